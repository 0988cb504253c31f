"""The point-set kernels under ``compute-sanitizer`` (memcheck, racecheck): no bad access, no race.

Small sets that take every path: 1-D to 8-D (templated and generic kernels), duplicates and
grids (ties), mutual reachability, empty padded leaves (n not a multiple of the leaf size).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import cupy
    import numpy as np

    cupy.cuda.set_allocator(None)
    cupy.cuda.set_pinned_memory_allocator(None)

    import gpu_core
    from tests.utils.points import point_sets

    for d, n in ((1, 37), (2, 101), (3, 64), (8, 29)):
        for ps in point_sets(n, d, seed=n):
            for k in (1, 3):
                gpu = gpu_core.euclidean_mst(ps.points, min_samples=k, backend="gpu")
                cpu = gpu_core.euclidean_mst(ps.points, min_samples=k, backend="cpu")
                assert np.array_equal(gpu.src, cpu.src) and np.array_equal(gpu.weights, cpu.weights), ps.name
    cupy.cuda.runtime.deviceSynchronize()
    print("sanitized ok")
    """
)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_point_kernels_under_compute_sanitizer(tool: str) -> None:
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("compute-sanitizer is not on PATH")
    cmd = [sanitizer, f"--tool={tool}", "--error-exitcode=99", sys.executable, "-c", SCRIPT]
    if tool == "memcheck":
        cmd[2:2] = ["--leak-check=no"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    assert "sanitized ok" in proc.stdout
    assert re.search(r"SUMMARY: 0 (errors|hazards)", output), output[-6000:]
