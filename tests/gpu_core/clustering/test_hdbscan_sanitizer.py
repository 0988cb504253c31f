"""HDBSCAN*'s device path under ``compute-sanitizer`` (memcheck, racecheck): the segment and
excess-of-mass kernels of ``kernels/hdbscan_tree.cu`` and the dendrogram's, from points to labels,
with every method, and the excess of mass alone over larger cluster trees."""

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
    # the excess of mass by heavy paths over larger trees: long paths, several light depths
    from gpu_core._clustering import eom_paths as _eom_paths
    from gpu_core._clustering import select as _select
    from gpu_core._clustering.dendrogram_labels import _cupy_launch
    from tests.gpu_core.clustering.test_eom_paths import cluster_tree, stabilities

    rng = np.random.default_rng(0)
    for shape, splits in (("random", 3000), ("caterpillar", 2000)):
        parent, size = cluster_tree(rng, splits, shape)
        stability = stabilities(rng, parent.size, "specials")
        selected, _ = _eom_paths.select_on_device(
            cupy.asarray(parent), cupy.asarray(size), cupy.asarray(stability), "eom", cupy, _cupy_launch
        )
        want = _select.select_clusters(parent, np.zeros(parent.size), stability, "eom", 0.0)
        assert np.array_equal(selected.get(), want), shape
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
