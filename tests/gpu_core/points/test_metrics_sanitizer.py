"""The metrics' kernels under ``compute-sanitizer`` (memcheck, racecheck): the minkowski build of
``emst.cu`` (1 to 3 and 8 coordinates, mutual reachability, query points), ``metrics.cu`` (unit
vectors, maps of keys, ``pow``, the Minkowski key tiles of brute force) and ``precomputed.cu``
(radix select, row Borůvka; symmetric and not), on small sets that take every path."""

from __future__ import annotations

import textwrap

import pytest

from tests.utils.sanitizer import assert_clean_under_sanitizer

SCRIPT = textwrap.dedent(
    """
    import cupy
    import numpy as np
    from scipy.spatial.distance import pdist, squareform

    cupy.cuda.set_allocator(None)
    cupy.cuda.set_pinned_memory_allocator(None)

    import gpu_core
    from tests.utils.metrics import blobs, lat_lon

    for d, n in ((2, 61), (3, 40), (8, 29), (40, 33)):
        x = blobs(n, d, seed=n)
        for metric, params in (("manhattan", None), ("chebyshev", None), ("minkowski", {"p": 3}),
                               ("cosine", None)):
            for k in (1, 3):
                gpu = gpu_core.metric_mst(x, metric, metric_params=params, min_samples=k, backend="gpu")
                cpu = gpu_core.metric_mst(x, metric, metric_params=params, min_samples=k, backend="cpu")
                assert np.array_equal(gpu.weights, cpu.weights), (metric, d)
            model = gpu_core.HDBSCAN(min_cluster_size=3, metric=metric, metric_params=params, backend="gpu")
            model.fit(x)
            gpu_core.approximate_predict(model, x[:7] + 0.1)
    ll = lat_lon(90, seed=1)
    gpu_core.metric_mst(ll, "haversine", min_samples=2, backend="gpu")
    d = squareform(pdist(blobs(77, 3, seed=2)))
    for matrix in (d, d + np.eye(77) * 0.0, np.where(np.arange(77)[:, None] < 40, d, d * (1 + 1e-12))):
        for k in (1, 4):
            gpu_core.metric_mst(matrix, "precomputed", min_samples=k, backend="gpu")
    cupy.cuda.runtime.deviceSynchronize()
    print("sanitized ok")
    """
)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_metric_kernels_under_compute_sanitizer(tool: str) -> None:
    assert_clean_under_sanitizer(tool, SCRIPT)
