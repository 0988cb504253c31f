"""The point-set kernels under ``compute-sanitizer`` (memcheck, racecheck): no bad access, no race.

Small sets that take every path: 1-D to 8-D (templated and generic kernels), duplicates and
grids (ties), mutual reachability, empty padded leaves (n not a multiple of the leaf size), and
query points' neighbour lists (inside and outside the index's box).
"""

from __future__ import annotations

import textwrap

import pytest

from tests.utils.sanitizer import assert_clean_under_sanitizer

SCRIPT = textwrap.dedent(
    """
    import cupy
    import numpy as np

    cupy.cuda.set_allocator(None)
    cupy.cuda.set_pinned_memory_allocator(None)

    import gpu_core
    from gpu_core._points.index import build_point_index
    from gpu_core._points.neighbours import query_neighbours
    from tests.utils.points import point_sets

    for d, n in ((1, 37), (2, 101), (3, 64), (8, 29)):
        for ps in point_sets(n, d, seed=n):
            for k in (1, 3):
                gpu = gpu_core.euclidean_mst(ps.points, min_samples=k, backend="gpu")
                cpu = gpu_core.euclidean_mst(ps.points, min_samples=k, backend="cpu")
                assert np.array_equal(gpu.src, cpu.src) and np.array_equal(gpu.weights, cpu.weights), ps.name
            # the query points' lists (prediction): sorted by Morton code, first bounds by binary search
            index = build_point_index(ps.points, backend="gpu")
            queries = np.concatenate([ps.points[:5], ps.points[:5] + 0.25, ps.points[:2] * 40.0 - 9.0])
            for k in (1, 8, 20):
                query_neighbours(index, cupy.asarray(queries, dtype=cupy.float64), k)
    cupy.cuda.runtime.deviceSynchronize()
    print("sanitized ok")
    """
)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_point_kernels_under_compute_sanitizer(tool: str) -> None:
    assert_clean_under_sanitizer(tool, SCRIPT)
