"""After ``warm_up`` (the full sweep), no point-set request compiles or loads a CUDA kernel (runs where
a CUDA device is visible).

As tests/gpu_core/graphs/test_warm_up.py does for graphs: a fresh process warms up (on the
environment's kernel cache), then counts every module CuPy builds or loads and every program NVRTC
compiles while it computes point sets the way a worker and a library user do: CuPy and NumPy
points, the hierarchy (1 to 32 coordinates) and brute force (33 to 1,024), sizes that are no
warm-up size, min_samples from 1 to 100, trees, HDBSCAN*'s labels and prediction. The counts must
stay 0; a control kernel compiled at the end proves that the counter sees compilations.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: a cold kernel cache compiles every kernel (minutes): pytest's 300 s would cut the sweep short
pytestmark = [pytest.mark.gpu, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[3]

SCRIPT = r"""
import json, time
import numpy as np
import cupy
from cupy.cuda import compiler
import gpu_core
from gpu_core._clustering.dendrogram_labels import warm_up_device

compiled, nvrtc = [], []
original = compiler._compile_module_with_cache
def counting(source, *args, **kwargs):
    compiled.append(where)
    return original(source, *args, **kwargs)
compiler._compile_module_with_cache = counting
original_program = compiler._NVRTCProgram.compile
def counting_program(self, *args, **kwargs):
    nvrtc.append(where if self.src else f"{where} (probe)")
    return original_program(self, *args, **kwargs)
compiler._NVRTCProgram.compile = counting_program

where = "warm-up"
gpu_core.warm_up("gpu")
warm_up_device()  # what a worker adds when its first point set arrives (the labels' device path)
warm_up_compiles = len(compiled)
compiled.clear()
nvrtc.clear()

rng = np.random.default_rng(5)
for d in (2, 3, 7, 20, 33, 50, 100, 384, 768, 1000):
    for n in (3, 47, 700, 5000, 12345):
        if n * d > 5_000_000:
            continue
        points = rng.random((n, d)).astype(np.float32)
        for k in (1, 4, 10, 30, 100):
            if k > n:
                continue
            where = f"n={n} d={d} k={k}"
            index = gpu_core.build_point_index(cupy.asarray(points), backend="gpu")
            gpu_core.euclidean_mst(index, min_samples=k)
            gpu_core.euclidean_mst(points, min_samples=k, backend="gpu")
            if n >= 47:
                result = gpu_core.hdbscan(index, min_cluster_size=5, min_samples=k)
                model = gpu_core.HDBSCAN(min_cluster_size=5, min_samples=k, backend="gpu").fit(points)
                gpu_core.approximate_predict(model, points[: n // 3] + 0.01)
checked, programs = len(compiled), list(nvrtc)
where = "control"
cupy.ElementwiseKernel("T x", "T y", "y = x * 3 + 1", f"points_control_{time.time_ns()}")(cupy.arange(3))
print(json.dumps({"warm_up_compiles": warm_up_compiles, "compiled": compiled[:checked],
                  "nvrtc": programs, "control": compiled[checked:]}))
"""


def test_no_kernel_compiles_on_a_point_set_request_after_warm_up() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # the environment's kernel cache (CUPY_CACHE_DIR)
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=1800
    )
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["warm_up_compiles"] > 0, "the warm-up loaded nothing: the counter does not see CuPy"
    assert report["control"] == ["control"], "the counter did not see a compilation"
    assert report["compiled"] == [], f"modules built or loaded after warm-up: {report['compiled'][:20]}"
    assert report["nvrtc"] == [], f"NVRTC programs compiled after warm-up: {report['nvrtc'][:20]}"
