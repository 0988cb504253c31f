"""After ``warm_up`` (the full sweep), no request compiles or loads a CUDA kernel (runs where a CUDA
device is visible).

A fresh process warms up, then counts every module CuPy builds or loads
(``cupy.cuda.compiler._compile_module_with_cache``, which every elementwise, reduction, scan and raw
kernel goes through on a miss of CuPy's in-memory cache, whether the module then comes from the
kernel cache, ``CUPY_CACHE_DIR``, or from NVRTC) and every program NVRTC compiles (a kernel, or
CuPy's empty probe of the compiler) while it builds, prepares and computes graphs the way a worker
does for an upload: host arrays of every vertex-id dtype x every weight dtype, sizes from 1 edge to
2^23 + 1, and bad input (ids out of range, NaN weights). Both counts must stay 0, whatever the
kernel cache holds (the environment's: warm, the test takes seconds). A control kernel compiled at
the end proves that the counter sees compilations. The quick start of a service's worker must load
all that the full sweep loads (``gpu_core._warm_up.warm_start`` checks, tests/service/test_warm_start.py
starts one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: a cold kernel cache compiles every kernel (minutes): pytest's 300 s would cut the sweep short
pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[3]

SCRIPT = r"""
import json, time
import numpy as np
import cupy
from cupy.cuda import compiler
import gpu_core
from gpu_core._graphs.warm_up import ID_DTYPES
from gpu_core.errors import GraphValidationError

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
started = time.perf_counter()
gpu_core.warm_up("gpu")
warm_up_s = time.perf_counter() - started
warm_up_compiles = len(compiled)
compiled.clear()
nvrtc.clear()

rng = np.random.default_rng(7)
slowest = 0.0
sizes = (1, 2, 5, 31, 127, 128, 129, 200, 511, 512, 513, 1000, 1025, 4097, 65537, 1_000_001, 2**23 + 1)
for m in sizes:
    for n in (max(m // 8, 2), m + 5):
        for id_dtype in ID_DTYPES:
            if np.iinfo(id_dtype).max < n:
                continue
            src = rng.integers(0, n, m).astype(id_dtype)
            dst = rng.integers(0, n, m).astype(id_dtype)
            for weight_dtype in gpu_core.WEIGHT_DTYPES:
                if m > 70_000 and id_dtype not in (np.int32, np.int64):
                    continue  # big graphs: the ids' dtype only matters for the (elementwise) cast
                where = f"m={m} n={n} ids={np.dtype(id_dtype).name} weights={weight_dtype.name}"
                weight = rng.integers(-50, 50, m).astype(weight_dtype)
                t = time.perf_counter()
                graph = gpu_core.Graph(src, dst, weight, n, backend="gpu")
                graph.prepare()
                graph.minimum_spanning_forest()
                slowest = max(slowest, time.perf_counter() - t) if m < 70_000 else slowest
                if weight_dtype.kind == "f":
                    weight[m // 2] = np.nan
                    try:
                        gpu_core.Graph(src, dst, weight, n, backend="gpu")
                    except GraphValidationError:
                        pass
                    else:
                        raise AssertionError("a NaN weight was accepted")
            try:
                gpu_core.Graph(src, dst, np.ones(m, np.int32), 1, backend="gpu")
            except GraphValidationError:
                pass
checked, programs = len(compiled), list(nvrtc)
where = "control"
cupy.ElementwiseKernel("T x", "T y", "y = x * 3 + 1", f"faults_control_{time.time_ns()}")(cupy.arange(3))
report = {"warm_up_s": warm_up_s, "warm_up_compiles": warm_up_compiles, "compiled": compiled[:checked],
          "nvrtc": programs}
print(json.dumps({**report, "control": compiled[checked:], "slowest_small_s": slowest}))
"""


def test_no_kernel_compiles_on_a_request_path_after_warm_up() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # the environment's kernel cache (CUPY_CACHE_DIR)
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    print(report)
    assert report["warm_up_compiles"] > 0, "the warm-up loaded nothing: the counter does not see CuPy"
    assert report["control"] == ["control"], "the counter did not see a compilation"
    assert report["compiled"] == [], f"modules built or loaded after warm-up: {report['compiled'][:20]}"
    assert report["nvrtc"] == [], f"NVRTC programs compiled after warm-up: {report['nvrtc'][:20]}"
