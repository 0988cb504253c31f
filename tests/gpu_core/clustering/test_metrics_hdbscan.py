"""HDBSCAN* under every metric against independent oracles (issue 45, ask 3), on the CPU backend:

* labels equal to scikit-learn's ``HDBSCAN(metric=...)`` (the same partition, cluster numbers
  aside) and probabilities within 1e-12, on tie-free data (``min_samples=2``: every weight is a
  distance, and the floats are random), generated and real (scikit-learn's bundled data sets;
  airports of the ``airportsdata`` package for haversine), on the spatial and the brute-force paths;
* cosine also against a matrix of ``1 - cos`` in extended precision (scikit-learn's own double
  formula cancels for close points);
* prediction (``approximate_predict``, membership vectors, GLOSH) against the hdbscan library
  (0.8.44) for the metrics it predicts with: euclidean, manhattan, chebyshev, haversine (its
  minkowski with other p disagrees with its own precomputed answer: not an oracle).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import scipy.sparse
from scipy.spatial.distance import pdist, squareform

import gpu_core
from tests.utils.metrics import CASES, airports, bijection, blobs, case_id, cosine_matrix, lat_lon, real_data

TOL = 1e-12


def scikit_learn(x: Any, **kwargs: Any) -> Any:
    from sklearn.cluster import HDBSCAN

    return HDBSCAN(copy=True, **kwargs).fit(x)


def assert_same_clustering(ours: Any, theirs: Any, tol: float = TOL) -> None:
    assert bijection(ours.labels, theirs.labels_)
    assert np.abs(ours.probabilities - theirs.probabilities_).max() <= tol


@pytest.mark.parametrize("d", [3, 20])  # the CPU's k-d tree, and its brute force above 12
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_labels_are_scikit_learns(case: tuple[Any, ...], d: int) -> None:
    metric, params = case[0], case[1]
    x = blobs(600, d, seed=d + 1)
    for size in (5, 15):
        ours = gpu_core.hdbscan(x, min_cluster_size=size, min_samples=2, metric=metric, metric_params=params,
                                backend="cpu")  # fmt: skip
        theirs = scikit_learn(x, min_cluster_size=size, min_samples=2, metric=metric, metric_params=params)
        assert_same_clustering(ours, theirs, tol=1e-9 if metric == "cosine" else TOL)


@pytest.mark.parametrize("data", sorted(real_data()), ids=str)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_labels_of_real_data_are_scikit_learns(case: tuple[Any, ...], data: str) -> None:
    metric, params = case[0], case[1]
    x = real_data()[data]
    ours = gpu_core.hdbscan(
        x, min_cluster_size=8, min_samples=2, metric=metric, metric_params=params, backend="cpu"
    )
    theirs = scikit_learn(x, min_cluster_size=8, min_samples=2, metric=metric, metric_params=params)
    assert_same_clustering(ours, theirs, tol=1e-9 if metric == "cosine" else TOL)


@pytest.mark.parametrize("d", [3, 384])
def test_cosine_is_one_minus_cos_in_extended_precision(d: int) -> None:
    x = blobs(500, d, seed=d)
    ours = gpu_core.hdbscan(x, min_cluster_size=10, min_samples=2, metric="cosine", backend="cpu")
    theirs = scikit_learn(cosine_matrix(x), min_cluster_size=10, min_samples=2, metric="precomputed")
    assert_same_clustering(ours, theirs, tol=1e-9)


def test_haversine_on_the_worlds_airports_is_scikit_learns() -> None:
    x = airports()[::3]  # about 2,600 airports
    for size in (5, 20):
        ours = gpu_core.hdbscan(x, min_cluster_size=size, min_samples=2, metric="haversine", backend="cpu")
        theirs = scikit_learn(x, min_cluster_size=size, min_samples=2, metric="haversine")
        assert_same_clustering(ours, theirs, tol=1e-9)


def test_precomputed_is_scikit_learns_dense_and_sparse() -> None:
    x = blobs(400, 3, seed=9)
    d = squareform(pdist(x))
    ours = gpu_core.hdbscan(d, min_cluster_size=10, min_samples=2, metric="precomputed", backend="cpu")
    assert_same_clustering(ours, scikit_learn(d, min_cluster_size=10, min_samples=2, metric="precomputed"))
    # a k-nn graph, as scikit-learn takes sparse distances: its rows' k-th stored entries are the cores
    knn = d * (d <= np.sort(d, axis=1)[:, [12]])
    knn = scipy.sparse.csr_matrix(np.maximum(knn, knn.T))
    ours = gpu_core.hdbscan(knn, min_cluster_size=10, min_samples=1, metric="precomputed", backend="cpu")
    assert_same_clustering(ours, scikit_learn(knn, min_cluster_size=10, min_samples=1, metric="precomputed"))
    # larger min_samples: the cores tie the weights, so the heights (which ties leave alone) are compared
    for k in (2, 5):
        tree = gpu_core.metric_mst(knn, "precomputed", min_samples=k, backend="cpu")
        theirs = scikit_learn(knn, min_cluster_size=10, min_samples=k, metric="precomputed")
        assert np.array_equal(tree.weights, np.sort(theirs._single_linkage_tree_["value"]))


# --- prediction against the hdbscan library -------------------------------------------------------


def library(x: Any, metric: str) -> Any:
    import hdbscan

    return hdbscan.HDBSCAN(
        min_samples=1, approx_min_span_tree=False, prediction_data=True, metric=metric
    ).fit(x)


def relabeling(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    assert bijection(ours, theirs)
    perm = np.full(int(ours.max()) + 1, -1)
    for a, b in set(zip(ours.tolist(), theirs.tolist(), strict=True)):
        if a >= 0:
            perm[a] = b
    return perm


def unique_argmax(model: gpu_core.HDBSCAN, new: np.ndarray) -> np.ndarray:
    """Rows whose largest merge height belongs to one cluster (where the library and we may pick
    different first clusters otherwise: see docs/design/exactness.md)."""
    from gpu_core._clustering.prediction import _heights, nearest_reachable
    from gpu_core._points.neighbours import query_points

    data = model.prediction_data_
    queries, _ = query_points(model._index_of(), new)
    nearest, lam = nearest_reachable(data, model._index_of(), queries)
    heights = _heights(data, data.point_cluster[nearest], np.minimum(lam, data.point_lam[nearest]))
    return (heights == heights.max(axis=1, keepdims=True)).sum(axis=1) == 1


@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "chebyshev", "haversine"])
def test_prediction_is_the_hdbscan_librarys(metric: str) -> None:
    import hdbscan

    x = lat_lon(800, seed=3) if metric == "haversine" else blobs(700, 2, seed=4)
    new = (
        lat_lon(300, seed=5) if metric == "haversine" else np.random.default_rng(6).uniform(-12, 12, (300, 2))
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lib = library(x, metric)
        ours = gpu_core.HDBSCAN(min_samples=2, metric=metric, prediction_data=True, backend="cpu").fit(x)
        perm = relabeling(ours.labels_, lib.labels_)
        tol = 1e-9 if metric == "haversine" else TOL
        assert np.abs(ours.outlier_scores_ - lib.outlier_scores_).max() <= tol
        labels, probs = gpu_core.approximate_predict(ours, new)
        lib_labels, lib_probs = hdbscan.approximate_predict(lib, new)
        assert np.array_equal(np.where(labels >= 0, perm[np.maximum(labels, 0)], -1), lib_labels)
        assert np.abs(probs - lib_probs).max() <= tol
        got, want = gpu_core.membership_vector(ours, new), hdbscan.membership_vector(lib, new)[:, perm]
        rows = unique_argmax(ours, new)
        assert rows.sum() >= 50
        assert np.abs(got - want)[rows].max() <= 1e-9


# --- the estimator as scikit-learn's -------------------------------------------------------------


def test_non_finite_rows_are_set_apart_in_fit_and_prediction() -> None:
    x = blobs(300, 2, seed=10)
    dirty = x.copy()
    dirty[3, 0], dirty[8] = np.inf, np.nan
    dirty[12] = [np.inf, -np.inf]  # its sum is NaN: missing, as scikit-learn tells them
    model = gpu_core.HDBSCAN(min_samples=2, backend="cpu").fit(dirty)
    clean_rows = np.setdiff1d(np.arange(300), [3, 8, 12])
    clean = gpu_core.HDBSCAN(min_samples=2, backend="cpu").fit(x[clean_rows])
    assert np.array_equal(model.labels_[clean_rows], clean.labels_)
    assert model.labels_[3] == -2 and model.labels_[8] == -3 and model.labels_[12] == -3
    assert model.probabilities_[3] == 0 and np.isnan(model.probabilities_[[8, 12]]).all()
    assert np.isnan(model.outlier_scores_[[3, 8, 12]]).all()
    labels, probs = gpu_core.approximate_predict(model, np.array([[0.0, 0.0], [np.inf, 1.0], [np.nan, 0.0]]))
    assert labels.tolist()[1:] == [-2, -3] and probs[1] == 0 and np.isnan(probs[2])
    vectors = gpu_core.all_points_membership_vectors(model)
    assert vectors.shape[0] == 300 and np.isnan(vectors[[3, 8, 12]]).all()


def test_store_centers_is_scikit_learns() -> None:
    x = blobs(400, 3, seed=11)
    for metric in ("euclidean", "manhattan", "cosine"):
        ours = gpu_core.HDBSCAN(min_samples=2, metric=metric, store_centers="both", backend="cpu").fit(x)
        theirs = scikit_learn(x, min_samples=2, metric=metric, store_centers="both")
        perm = relabeling(ours.labels_, theirs.labels_)
        assert np.allclose(ours.centroids_, theirs.centroids_[perm], rtol=1e-12)  # type: ignore[attr-defined]
        assert np.array_equal(ours.medoids_, theirs.medoids_[perm])  # type: ignore[attr-defined]


def test_sparse_coordinates_are_the_dense_ones() -> None:
    x = blobs(300, 5, seed=12)
    x[np.abs(x) < 2] = 0.0
    dense = gpu_core.HDBSCAN(min_samples=2, metric="manhattan", backend="cpu").fit(x)
    sparse = gpu_core.HDBSCAN(min_samples=2, metric="manhattan", backend="cpu").fit(
        scipy.sparse.csr_matrix(x)
    )
    assert np.array_equal(dense.labels_, sparse.labels_)


def test_the_parameters_clone_and_pickle_with_the_metric() -> None:
    import pickle

    from sklearn.base import clone

    est = gpu_core.HDBSCAN(metric="minkowski", metric_params={"p": 3}, alpha=0.9, backend="cpu")
    twin = clone(est)
    assert twin.get_params() == est.get_params() and twin.metric_params == {"p": 3}
    x = blobs(300, 3, seed=13)
    fitted = twin.fit(x)
    again = pickle.loads(pickle.dumps(fitted))
    new = np.random.default_rng(1).uniform(-10, 10, (50, 3))
    assert np.array_equal(
        gpu_core.approximate_predict(again, new)[1], gpu_core.approximate_predict(fitted, new)[1]
    )
    assert np.array_equal(again.condensed_tree_.to_numpy(), fitted.condensed_tree_.to_numpy())
    with pytest.raises(ValueError, match="needs the coordinates of new points"):
        gpu_core.HDBSCAN(metric="precomputed", backend="cpu").fit(squareform(pdist(x))).predict(x)
