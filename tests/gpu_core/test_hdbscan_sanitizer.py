"""HDBSCAN*'s device path under ``compute-sanitizer`` (memcheck, racecheck): the segment kernels of
``kernels/hdbscan_tree.cu`` and the dendrogram's, from points to labels, with every method."""

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
    from tests.utils.points import blobs, duplicated

    for points in (blobs(1, 3000, 2, centers=5, spread=0.3).points, duplicated(2, 700, 3).points):
        for mcs, ms, method, eps in ((5, 5, "eom", 0.0), (10, 3, "leaf", 0.0), (8, 8, "eom", 0.2)):
            got = gpu_core.hdbscan(
                cupy.asarray(points), min_cluster_size=mcs, min_samples=ms,
                cluster_selection_method=method, cluster_selection_epsilon=eps, backend="gpu",
            )
            want = gpu_core.hdbscan(
                points, min_cluster_size=mcs, min_samples=ms, cluster_selection_method=method,
                cluster_selection_epsilon=eps, backend="cpu",
            )
            assert np.array_equal(got.labels, want.labels), (mcs, ms, method, eps)
            assert np.array_equal(got.probabilities, want.probabilities), (mcs, ms, method, eps)
    cupy.cuda.runtime.deviceSynchronize()
    print("sanitized ok")
    """
)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_hdbscan_device_path_under_compute_sanitizer(tool: str) -> None:
    # CuPy's own scan in flatnonzero reports shared-memory warnings under racecheck (see the
    # dendrogram's sanitizer test); every hazard in another kernel fails
    assert_clean_under_sanitizer(tool, SCRIPT, ignore_kernels=("cupy_nonzero_kernel_incomplete_scan",))
