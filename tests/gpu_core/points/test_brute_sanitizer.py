"""The brute-force kernels (``kernels/brute.cu``, and ``kernels/brute_wgmma.cu`` on compute
capability 9.0) under ``compute-sanitizer``: no bad access, no race.

Small sets that take every path: blocks and batches that do not divide n, buffers that fill so
rows stop and are launched again, 128- and 64-row blocks, streamed builds (the rows loaded stage
by stage; two stages a tile, rows that stop: on two of the sets), components masked and skipped,
duplicates and near-ties, query lists, and the products written out. Where the device has wgmma the
default and ``stream=True`` builds are its two (resident and streamed), and ``wgmma=False`` the
mma.sync build of 128 rows and stages of 64.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.utils.sanitizer import assert_clean_under_sanitizer

SCRIPT = textwrap.dedent(
    """
    import time

    import cupy
    import numpy as np

    cupy.cuda.set_allocator(None)
    cupy.cuda.set_pinned_memory_allocator(None)

    import gpu_core
    from gpu_core._points.brute_gpu import BruteGpuIndex
    from gpu_core._points.neighbours import query_neighbours
    from tests.gpu_core.points.test_brute import far_clusters
    from tests.utils.points import point_sets

    sets = [*point_sets(61, 40, seed=1), far_clusters(2, 45, 33), far_clusters(3, 700, 40)]
    if RACECHECK:  # shared-memory hazards follow the block and buffer sizes, not the values
        sets = [sets[0], sets[3], sets[-1]]  # random, duplicated (ties), far clusters (stops)
    streamed = {"stream": True, "chunk": 32, "cap": 384, "batch": 50}
    for ps in sets:
        builds = [{"cap": 384, "batch": 50}, {"rows_per_block": 64}, {"chunk": 32}]
        if ps is sets[0] or ps is sets[-1]:  # random points; far clusters (stops)
            builds += [streamed, {"stream": True, "cap": 384, "batch": 50}, {"wgmma": False, "cap": 384}]
        for knobs in builds:
            index = BruteGpuIndex(np.ascontiguousarray(ps.points, dtype=np.float64), **knobs)
            for k in (1, 3):
                gpu = index.tree(k, time.perf_counter(), True, False)
                cpu = gpu_core.euclidean_mst(ps.points, min_samples=k, backend="cpu")
                assert np.array_equal(gpu.src, cpu.src) and np.array_equal(gpu.weights, cpu.weights), ps.name
            index.query(cupy.asarray(ps.points[:9], dtype=cupy.float64), 5)
            index.engine.dump_products(0, 7)
    cupy.cuda.runtime.deviceSynchronize()
    print("sanitized ok")
    """
)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.timeout(600)  # racecheck runs every kernel serialized: minutes, beyond the default 300 s
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_brute_force_kernels_under_compute_sanitizer(tool: str) -> None:
    script = f"RACECHECK = {tool == 'racecheck'}\n{SCRIPT}"
    # CuPy's own scan (flatnonzero) reports shared-memory warnings under racecheck; every error,
    # and any hazard in this project's kernels, still fails
    assert_clean_under_sanitizer(
        tool, script, timeout=560, ignore_kernels=("cupy_nonzero_kernel_incomplete_scan",)
    )
