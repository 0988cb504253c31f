"""Metrics of point sets on the CPU backend: single-linkage heights against SciPy's
``linkage(pdist(X, metric), "single")``, the paths of one metric against each other (spatial index,
brute force, a precomputed matrix of the same keys), index reuse, and the errors (issue 45, ask 6).
The GPU backend's bits against these: ``test_metrics_gpu.py``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse
from scipy.cluster.hierarchy import linkage
from scipy.spatial.distance import pdist, squareform

import gpu_core
from gpu_core._points.index import build_index, validated
from gpu_core._points.metrics import resolve_metric
from gpu_core.errors import MetricError
from tests.utils.metrics import CASES, EXACT_HEIGHTS, airports, blobs, case_id, lat_lon, real_data


def _heights(z: np.ndarray) -> np.ndarray:
    return np.sort(z[:, 2])


@pytest.mark.parametrize("d", [3, 20])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_single_linkage_heights_are_scipys(case: tuple[Any, ...], d: int) -> None:
    metric, params, name, kwargs = case
    x = blobs(400, d, seed=d)
    got = _heights(gpu_core.single_linkage(x, metric=metric, metric_params=params, backend="cpu"))
    want = _heights(linkage(pdist(x, name, **kwargs), "single"))
    if metric in EXACT_HEIGHTS:
        assert np.array_equal(got, want)
    else:
        assert np.allclose(got, want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("data", sorted(real_data()), ids=str)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_single_linkage_of_real_data_is_scipys(case: tuple[Any, ...], data: str) -> None:
    metric, params, name, kwargs = case
    x = real_data()[data]
    got = _heights(gpu_core.single_linkage(x, metric=metric, metric_params=params, backend="cpu"))
    want = _heights(linkage(pdist(x, name, **kwargs), "single"))
    assert np.allclose(got, want, rtol=1e-12, atol=1e-15)


def test_haversine_heights_are_scikit_learns_on_airports() -> None:
    from sklearn.metrics.pairwise import haversine_distances

    x = airports()[::4]  # about 2,000 airports of the world
    got = _heights(gpu_core.single_linkage(x, metric="haversine", backend="cpu"))
    want = _heights(linkage(squareform(haversine_distances(x), checks=False), "single"))
    # the chord of unit vectors: 1e-16 absolute, so a relative 1e-9 where airports are 1e-7 apart
    assert np.allclose(got, want, rtol=1e-9, atol=1e-15)


def test_precomputed_heights_are_scipys_dense_and_sparse() -> None:
    x = blobs(300, 4, seed=3)
    d = squareform(pdist(x))
    want = _heights(linkage(pdist(x), "single"))
    assert np.array_equal(_heights(gpu_core.single_linkage(d, metric="precomputed", backend="cpu")), want)
    sparse = scipy.sparse.csr_matrix(d)
    assert np.array_equal(
        _heights(gpu_core.single_linkage(sparse, metric="precomputed", backend="cpu")), want
    )


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("case", [c for c in CASES if c[0] != "cosine"], ids=case_id)
def test_spatial_brute_and_precomputed_paths_give_one_tree(case: tuple[Any, ...], k: int) -> None:
    """The k-d tree with SciPy's p, the exact brute force and the rows of a matrix of the same keys
    choose the same edges under the tie rule, ties included (points on a grid)."""
    metric, params = case[0], case[1]
    resolved = resolve_metric(metric, params)
    rng = np.random.default_rng(k)
    x = np.concatenate([blobs(200, 3, seed=k), rng.integers(0, 4, size=(60, 3)).astype(float)])
    trees = []
    for search in ("spatial", "brute"):
        coords, chosen, from_cupy = validated(x, "cpu", resolved)
        index = build_index(x, coords, chosen, from_cupy, search, metric=resolved, tile=64, block=16)
        trees.append(gpu_core.metric_mst(index, min_samples=k))
    a, b = trees
    assert np.array_equal(a.src, b.src) and np.array_equal(a.dst, b.dst)
    assert np.array_equal(a.weights, b.weights)
    if k > 1:
        assert a.core_distances is not None and b.core_distances is not None
        assert np.array_equal(a.core_distances, b.core_distances)
    matrix = squareform(pdist(x, case[2], **case[3]))
    c = gpu_core.metric_mst(matrix, "precomputed", min_samples=k, backend="cpu")
    assert np.allclose(c.weights, a.weights, rtol=1e-12) and c.weights.size == a.weights.size
    if metric in EXACT_HEIGHTS:
        assert np.array_equal(c.src, a.src) and np.array_equal(c.dst, a.dst)


def test_cosine_and_haversine_are_euclidean_trees_of_unit_vectors() -> None:
    x = blobs(500, 8, seed=4)
    cos = gpu_core.metric_mst(x, "cosine", min_samples=3, backend="cpu")
    unit = x / np.sqrt((x * x).sum(axis=1))[:, None]
    euc = gpu_core.metric_mst(unit, min_samples=3, backend="cpu")
    assert np.array_equal(cos.src, euc.src) and np.array_equal(cos.dst, euc.dst)
    assert np.allclose(cos.weights, euc.weights**2 / 2, rtol=1e-12)
    ll = lat_lon(600, seed=5)
    hav = gpu_core.metric_mst(ll, "haversine", backend="cpu")
    from sklearn.metrics.pairwise import haversine_distances

    assert np.allclose(hav.weights, haversine_distances(ll)[hav.src, hav.dst], rtol=1e-9)
    assert hav.metric == "haversine"


def test_an_index_is_of_one_metric() -> None:
    x = blobs(200, 3, seed=6)
    index = gpu_core.build_point_index(x, metric="manhattan", backend="cpu")
    assert index.metric == "manhattan" and "manhattan" in repr(index)
    tree = gpu_core.metric_mst(index, min_samples=3)
    again = gpu_core.metric_mst(x, "l1", min_samples=3, backend="cpu")
    assert np.array_equal(tree.weights, again.weights) and np.array_equal(tree.src, again.src)
    assert np.array_equal(
        gpu_core.hdbscan(index, min_samples=3).labels,
        gpu_core.hdbscan(x, metric="l1", min_samples=3, backend="cpu").labels,
    )
    with pytest.raises(MetricError, match="built with metric='manhattan'"):
        gpu_core.metric_mst(index, "cosine")
    with pytest.raises(MetricError, match="use metric_mst"):
        gpu_core.euclidean_mst(index)


def test_alpha_divides_the_distances_not_the_cores() -> None:
    """scikit-learn's tree-based HDBSCAN (and the hdbscan library): ``max(core_i, core_j, d / alpha)``.
    With alpha < 1 and min_samples = 2 every weight is d / alpha (a core distance is the nearest
    neighbour's): no ties, so the labels and probabilities are its own."""
    from sklearn.cluster import HDBSCAN

    from tests.utils.metrics import bijection

    x = blobs(500, 2, seed=7)
    for alpha in (0.5, 0.8):
        got = gpu_core.hdbscan(x, min_samples=2, alpha=alpha, backend="cpu")
        want = HDBSCAN(min_samples=2, alpha=alpha, algorithm="kd_tree", copy=True).fit(x)
        assert bijection(got.labels, want.labels_)
        assert np.abs(got.probabilities - want.probabilities_).max() <= 1e-12


# --- errors (ask 6) ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metric", "params", "match"),
    [
        ("braycurtis", None, "unknown metric 'braycurtis'; the metrics are euclidean, manhattan"),
        ("cosine", {"p": 2}, "metric='cosine' takes no metric_params; got \\['p'\\]"),
        ("minkowski", {"p": 0.5}, "p >= 1"),
        ("minkowski", {"p": 2, "w": [1, 1]}, "takes metric_params \\{'p': p\\} only"),
        ("euclidean", [("p", 2)], "metric_params must be a dict"),
    ],
)
def test_bad_metrics_are_refused_naming_what_is_wrong(metric: str, params: Any, match: str) -> None:
    with pytest.raises(MetricError, match=match) as err:
        gpu_core.hdbscan(blobs(50, 2, seed=1), metric=metric, metric_params=params, backend="cpu")
    assert isinstance(err.value, ValueError)


def test_bad_inputs_of_a_metric_are_refused_naming_the_row() -> None:
    x = blobs(50, 3, seed=2)
    x[7] = 0.0
    with pytest.raises(MetricError, match="metric='cosine': point 7 is the zero vector"):
        gpu_core.metric_mst(x, "cosine", backend="cpu")
    with pytest.raises(MetricError, match="metric='haversine' takes points of 2 coordinates"):
        gpu_core.metric_mst(x, "haversine", backend="cpu")
    ll = lat_lon(50, seed=3)
    ll[11, 0] = 48.85  # degrees, not radians
    with pytest.raises(MetricError, match=r"point 11 has latitude 48\.85"):
        gpu_core.metric_mst(ll, "haversine", backend="cpu")
    with pytest.raises(MetricError, match="overflow"):
        gpu_core.metric_mst(np.array([[0.0], [1e30]]), "minkowski", metric_params={"p": 30}, backend="cpu")


def test_bad_precomputed_matrices_are_refused() -> None:
    d = squareform(pdist(blobs(40, 2, seed=4)))
    with pytest.raises(MetricError, match="has shape \\(40, 2\\)"):
        gpu_core.metric_mst(d[:, :2], "precomputed", backend="cpu")
    bad = d.copy()
    bad[3, 5] = -1.0
    with pytest.raises(MetricError, match="row 3 holds a negative distance"):
        gpu_core.metric_mst(bad, "precomputed", backend="cpu")
    bad = d.copy()
    bad[2, 9] = np.nan
    with pytest.raises(
        MetricError, match=r"np\.nan values found in precomputed-dense \(the first in row 2\)"
    ):
        gpu_core.metric_mst(bad, "precomputed", backend="cpu")
    bad = d.copy()
    bad[0, 1] += 1.0
    with pytest.raises(MetricError, match="appear to be asymmetric"):
        gpu_core.metric_mst(bad, "precomputed", backend="cpu")
    knn = d * (d < np.sort(d, axis=1)[:, [3]])
    knn = np.maximum(knn, knn.T)
    knn[6] = 0.0
    knn[:, 6] = 0.0
    knn[6, 7] = knn[7, 6] = 1.0
    with pytest.raises(MetricError, match="fewer than 2 neighbors: row 6 stores 1 distance"):
        gpu_core.hdbscan(scipy.sparse.csr_matrix(knn), metric="precomputed", min_samples=2, backend="cpu")
    apart = scipy.sparse.block_diag(
        [scipy.sparse.csr_matrix(d[:20, :20]), scipy.sparse.csr_matrix(d[:20, :20])]
    )
    with pytest.raises(MetricError, match=r"2 connected components\. HDBSCAN cannot be performed"):
        gpu_core.hdbscan(apart.tocsr(), metric="precomputed", backend="cpu")


def test_missing_distances_are_infinite_in_a_dense_matrix() -> None:
    d = squareform(pdist(blobs(30, 2, seed=5)))
    d[:10, 10:] = np.inf
    d[10:, :10] = np.inf
    tree = gpu_core.metric_mst(d, "precomputed", backend="cpu")
    assert np.isinf(tree.weights).sum() == 1 and np.isinf(tree.weights[-1])
    result = gpu_core.hdbscan(d, metric="precomputed", min_cluster_size=5, backend="cpu")
    assert result.labels.shape == (30,)
