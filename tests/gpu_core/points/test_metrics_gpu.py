"""The GPU backend under every metric is the CPU backend, bit for bit (issue 45, ask 3): trees (edges,
weights, core distances) on the device hierarchy (1 to 3 and 8 coordinates; the minkowski build) and
on brute force (40 coordinates), precomputed dense (radix select, row Borůvka) and sparse matrices,
HDBSCAN*'s labels and probabilities, the estimator's predictions; and the device's unit vectors,
``pow`` and maps of keys are the host's on values of every scale."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse
from scipy.spatial.distance import pdist, squareform

import gpu_core
from gpu_core._points.metrics import MAP_HALF, MAP_HAVERSINE, MAP_IDENTITY, MAP_ROOT, MAP_SQRT, host_distances
from tests.utils.metrics import CASES, blobs, case_id, lat_lon

pytestmark = pytest.mark.gpu


def _host(array: Any) -> np.ndarray:
    return array.get() if hasattr(array, "get") else np.asarray(array)


def assert_same_tree(a: Any, b: Any) -> None:
    assert np.array_equal(_host(a.src), _host(b.src))
    assert np.array_equal(_host(a.dst), _host(b.dst))
    assert np.array_equal(_host(a.weights), _host(b.weights))
    if a.core_distances is not None:
        assert np.array_equal(_host(a.core_distances), _host(b.core_distances))


def with_ties(x: np.ndarray, seed: int) -> np.ndarray:
    """The points with duplicates and a small integer grid mixed in (exact ties)."""
    rng = np.random.default_rng(seed)
    grid = rng.integers(1, 4, size=(40, x.shape[1])).astype(np.float64)  # no zero row (cosine)
    return np.ascontiguousarray(np.concatenate([x, x[:10], grid]))


@pytest.mark.parametrize("d", [1, 2, 3, 8, 40])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_trees_are_the_cpus(case: tuple[Any, ...], d: int) -> None:
    metric, params = case[0], case[1]
    if metric == "cosine" and d == 1:
        pytest.skip("cosine of one coordinate: every direction is +-1")
    x = with_ties(blobs(1500 if d <= 8 else 400, d, seed=d), seed=d)
    for k in (1, 5, 70):  # 70: past the device's registers (the host's exact search, the same values)
        cpu = gpu_core.metric_mst(x, metric, metric_params=params, min_samples=k, backend="cpu")
        gpu = gpu_core.metric_mst(x, metric, metric_params=params, min_samples=k, backend="gpu")
        assert_same_tree(cpu, gpu)
        assert cpu.total_weight == gpu.total_weight


def test_haversine_trees_are_the_cpus() -> None:
    x = lat_lon(3000, seed=1)
    x = np.concatenate([x, x[:20]])  # duplicates
    for k in (1, 4, 30):
        assert_same_tree(
            gpu_core.metric_mst(x, "haversine", min_samples=k, backend="cpu"),
            gpu_core.metric_mst(x, "haversine", min_samples=k, backend="gpu"),
        )


def test_device_points_stay_on_the_device() -> None:
    import cupy

    x = cupy.asarray(blobs(800, 3, seed=2))
    for metric in ("manhattan", "cosine"):
        tree = gpu_core.metric_mst(x, metric, min_samples=3, backend="gpu")
        assert isinstance(tree.weights, cupy.ndarray) and isinstance(tree.core_distances, cupy.ndarray)
        assert_same_tree(tree, gpu_core.metric_mst(x.get(), metric, min_samples=3, backend="cpu"))


@pytest.mark.parametrize("k", [1, 3, 9])
def test_precomputed_trees_are_the_cpus(k: int) -> None:
    rng = np.random.default_rng(k)
    x = blobs(700, 3, seed=k)
    dense = squareform(pdist(x))
    ties = squareform(rng.integers(1, 6, size=700 * 699 // 2).astype(np.float64))  # many exact ties
    near = dense.copy()
    near[0, 1] *= 1 + 1e-12  # asymmetric within scikit-learn's tolerance: the lighter of the two
    missing = dense.copy()
    missing[:100, 100:] = missing[100:, :100] = np.inf
    negzero = dense.copy()
    negzero[5, 6] = negzero[6, 5] = -0.0
    for matrix in (dense, ties, near, missing, negzero):
        assert_same_tree(
            gpu_core.metric_mst(matrix, "precomputed", min_samples=k, backend="cpu"),
            gpu_core.metric_mst(matrix, "precomputed", min_samples=k, backend="gpu"),
        )
    knn = dense * (dense <= np.sort(dense, axis=1)[:, [15]])
    sparse = scipy.sparse.csr_matrix(np.maximum(knn, knn.T))
    assert_same_tree(
        gpu_core.metric_mst(sparse, "precomputed", min_samples=k, backend="cpu"),
        gpu_core.metric_mst(sparse, "precomputed", min_samples=k, backend="gpu"),
    )


@pytest.mark.parametrize(
    "metric,params,points",
    [
        ("manhattan", None, "blobs"), ("chebyshev", None, "blobs"), ("minkowski", {"p": 3}, "blobs"),
        ("cosine", None, "wide"), ("haversine", None, "lat_lon"), ("precomputed", None, "matrix"),
    ],
)  # fmt: skip
def test_hdbscan_and_prediction_are_the_cpus(metric: str, params: Any, points: str) -> None:
    makers = {
        "blobs": lambda: blobs(2000, 3, 3),
        "wide": lambda: blobs(2000, 100, 3),
        "lat_lon": lambda: lat_lon(2000, 3),
        "matrix": lambda: squareform(pdist(blobs(1500, 3, 3))),
    }
    x = makers[points]()
    for k in (2, 10):
        cpu = gpu_core.HDBSCAN(min_samples=k, metric=metric, metric_params=params, backend="cpu").fit(x)
        gpu = gpu_core.HDBSCAN(min_samples=k, metric=metric, metric_params=params, backend="gpu").fit(x)
        assert np.array_equal(cpu.labels_, gpu.labels_)
        assert np.array_equal(cpu.probabilities_, gpu.probabilities_)
        assert np.array_equal(cpu.outlier_scores_, gpu.outlier_scores_)
        if metric == "precomputed":
            continue
        new = x[:300] * (1.0 + 1e-3) if metric == "haversine" else x[:300] + 0.05
        for a, b in zip(
            gpu_core.approximate_predict(cpu, new), gpu_core.approximate_predict(gpu, new), strict=True
        ):
            assert np.array_equal(a, b)
        assert np.allclose(gpu_core.membership_vector(cpu, new), gpu_core.membership_vector(gpu, new),
                           rtol=1e-12, atol=1e-15)  # fmt: skip


def _scales(rng: np.random.Generator) -> np.ndarray:
    return np.concatenate([
        [0.0, 5e-324, 1e-310, 1e-200, 1.0, 2.0, 4.0],
        10.0 ** rng.uniform(-300, 300, 20000),
        rng.uniform(0, 4, 20000),
    ])  # fmt: skip


def test_device_arithmetic_is_the_hosts() -> None:
    import cupy

    from gpu_core._points import detmath
    from gpu_core._points.metric_kernels import (
        device_distances,
        device_pow,
        device_unit_rows,
        device_unit_vectors,
    )
    from gpu_core._points.metrics import unit_rows, unit_vectors

    rng = np.random.default_rng(4)
    x = rng.normal(size=(2000, 384)) * 10.0 ** rng.integers(-5, 5, size=(2000, 1))
    assert np.array_equal(device_unit_rows(cupy.asarray(x))[1].get(), unit_rows(x))
    ll = np.column_stack(
        (rng.uniform(-np.pi / 2, np.pi / 2, 50000), rng.uniform(-2 * np.pi, 2 * np.pi, 50000))
    )
    assert np.array_equal(device_unit_vectors(cupy.asarray(ll)).get(), unit_vectors(ll))
    keys = _scales(rng)
    for distance_map in (MAP_SQRT, MAP_HALF, MAP_HAVERSINE, MAP_IDENTITY, MAP_ROOT):
        k = keys[keys <= 4.0] if distance_map == MAP_HAVERSINE else keys
        for alpha in (1.0, 1.3):
            got = device_distances(cupy.asarray(k), distance_map, 1 / 3.3, alpha).get()
            assert np.array_equal(got, host_distances(k, distance_map, 1 / 3.3, alpha)), distance_map
    small = keys[keys < 1e40]
    for p in (1.5, 3.0, 7.25):
        assert np.array_equal(device_pow(cupy.asarray(small), p).get(), detmath.pow_(small, p))
