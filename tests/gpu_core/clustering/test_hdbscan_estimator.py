"""``gpu_core.HDBSCAN`` and the prediction functions against the hdbscan library (0.8.44), the oracle.

The data has no mutual-reachability ties: ``min_samples=2`` (the library's ``min_samples=1``)
makes every mutual-reachability distance the Euclidean one (a point's core distance is its nearest
neighbour's distance, never more than any of its edges), and the points are random floats, so the
tree and the dendrogram are unique and both sides condense the same tree. The cluster numbers
differ (the library numbers breadth first over its own tree's orientation): the tests map ours
onto the library's through the labels (a bijection, checked) and compare everything else exactly
or within a few ulps. Where ties exist (larger ``min_samples``, grid points) the measured
agreement is in README.
"""

from __future__ import annotations

import pickle
import warnings
from typing import Any

import hdbscan
import numpy as np
import pytest

import gpu_core
from tests.utils.backends import BACKENDS

TOL = 1e-12


def blobs(seed: int, n_noise: int = 60) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-10, 10, size=(5, 2))
    parts = [c + rng.normal(scale=rng.uniform(0.3, 1.5), size=(120, 2)) for c in centers]
    return np.concatenate([*parts, rng.uniform(-12, 12, size=(n_noise, 2))])


def library(x: np.ndarray, **kwargs: Any) -> Any:
    return hdbscan.HDBSCAN(min_samples=1, approx_min_span_tree=False, prediction_data=True, **kwargs).fit(x)


def relabeling(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """The permutation taking our labels to the library's (asserting it is one): ``perm[our] = theirs``."""
    pairs = set(zip(ours.tolist(), theirs.tolist(), strict=True))
    assert len({a for a, _ in pairs}) == len(pairs) == len({b for _, b in pairs}), pairs
    assert (-1, -1) in pairs or -1 not in ours
    count = int(ours.max()) + 1
    perm = np.full(count, -1)
    for a, b in pairs:
        if a >= 0:
            perm[a] = b
    assert sorted(perm.tolist()) == list(range(count))
    return perm


def true_selection_is_the_library_prediction_clusters(lib: Any) -> bool:
    """The library's prediction data takes each label's lowest-numbered segment holding one of its
    points directly (``CondensedTree._select_clusters``): the selected cluster unless that has no
    point of its own. Our prediction uses the selected clusters; the data here has none such."""
    raw = lib.condensed_tree_._raw_tree
    points = raw[raw["child_size"] == 1]
    parent_of = {int(c): int(p) for p, c in zip(raw["parent"], raw["child"], strict=True)}
    chosen = sorted(lib.condensed_tree_._select_clusters())
    for label, cluster in enumerate(chosen):
        segments = {int(s) for s in points["parent"][lib.labels_[points["child"]] == label]}
        for s in segments:  # every segment of the label lies below (or is) the chosen cluster
            while s != cluster and s in parent_of:
                s = parent_of[s]
            if s != cluster:
                return False
    return True


CASES = [
    dict(min_cluster_size=10),
    dict(min_cluster_size=5),
    dict(min_cluster_size=15, cluster_selection_method="leaf"),
    dict(min_cluster_size=10, cluster_selection_epsilon=1.0),
    dict(min_cluster_size=10, cluster_selection_method="leaf", cluster_selection_epsilon=0.8),
    dict(min_cluster_size=10, max_cluster_size=100),
    dict(min_cluster_size=10, allow_single_cluster=True),
    dict(min_cluster_size=40, allow_single_cluster=True, cluster_selection_epsilon=3.0),
]


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_clustering_matches_the_hdbscan_library(case: dict[str, Any], seed: int) -> None:
    x = blobs(seed)
    ours = gpu_core.HDBSCAN(min_samples=2, backend="cpu", **case).fit(x)
    lib_case = {k: (0 if k == "max_cluster_size" and v is None else v) for k, v in case.items()}
    lib = library(x, **lib_case)
    weights = ours.minimum_spanning_tree_.to_numpy()[:, 2]
    assert np.unique(weights).size == weights.size, "the premise: no ties in the tree"
    perm = relabeling(ours.labels_, lib.labels_)
    assert np.array_equal(np.where(ours.labels_ >= 0, perm[ours.labels_], -1), lib.labels_)
    assert np.abs(ours.probabilities_ - lib.probabilities_).max() <= TOL
    assert np.abs(ours.outlier_scores_ - lib.outlier_scores_).max() <= TOL
    assert np.allclose(ours.cluster_persistence_, lib.cluster_persistence_[perm], rtol=1e-6, atol=0)
    # the condensed trees: the same points leave at the same lambdas, the same cluster sizes
    mine, theirs = ours.condensed_tree_.to_numpy(), lib.condensed_tree_.to_numpy()
    assert mine.shape == theirs.shape
    for rows in (mine, theirs):
        rows.sort(order=["child_size", "lambda_val", "child"])
    assert np.array_equal(mine["child_size"], theirs["child_size"])
    pm, pt = mine[mine["child_size"] == 1], theirs[theirs["child_size"] == 1]
    assert np.array_equal(np.sort(pm["child"]), np.sort(pt["child"]))
    assert np.abs(mine["lambda_val"] - theirs["lambda_val"]).max() <= TOL


@pytest.mark.parametrize("seed", [1, 3, 5])
@pytest.mark.parametrize("case", CASES[:6], ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_prediction_matches_the_hdbscan_library(case: dict[str, Any], seed: int) -> None:
    x = blobs(seed)
    rng = np.random.default_rng(100 + seed)
    new = np.concatenate([rng.uniform(-12, 12, size=(300, 2)), x[:50] + rng.normal(0, 0.05, size=(50, 2))])
    ours = gpu_core.HDBSCAN(min_samples=2, backend="cpu", **case).fit(x)
    lib = library(x, **{k: (0 if v is None else v) for k, v in case.items()})
    perm = relabeling(ours.labels_, lib.labels_)
    assert true_selection_is_the_library_prediction_clusters(lib), "the premise of the comparison"
    labels, probs = gpu_core.approximate_predict(ours, new)
    lib_labels, lib_probs = hdbscan.approximate_predict(lib, new)
    assert np.array_equal(np.where(labels >= 0, perm[np.maximum(labels, 0)], -1), lib_labels)
    assert np.abs(probs - lib_probs).max() <= TOL
    assert np.array_equal(ours.predict(new), labels)
    # exemplars: the same points per cluster
    for j, points in enumerate(ours.exemplars_):
        want = lib.prediction_data_.exemplars[perm[j]]
        assert np.array_equal(np.unique(points, axis=0), np.unique(want, axis=0))
    # soft clustering: exact where the library's argmax has one candidate (see README: where the
    # largest merge height is shared, the library takes its first cluster, ours our first)
    for got, want, heights_of in (
        (gpu_core.membership_vector(ours, new), hdbscan.membership_vector(lib, new), new),
        (gpu_core.all_points_membership_vectors(ours), hdbscan.all_points_membership_vectors(lib), None),
    ):
        want = want[:, perm]
        unique = _unique_argmax_rows(ours, heights_of)
        assert unique.sum() >= 10
        assert np.abs(got - want)[unique].max() <= 1e-10
        assert np.allclose(got.sum(axis=1), want.sum(axis=1), atol=0.5)  # every row a distribution (or less)


def test_a_model_without_a_selected_cluster_predicts_noise() -> None:
    """Condensed clusters but none selected (here max_cluster_size forbids them all): every new
    point is noise, as the hdbscan library predicts it, with membership vectors of no column
    (the selected clusters were indexed as if there were some: an IndexError)."""
    rng = np.random.default_rng(0)
    x = rng.random((40, 5))
    x[:20] += 3.0
    ours = gpu_core.HDBSCAN(min_cluster_size=4, max_cluster_size=10, backend="cpu").fit(x)
    assert ours.labels_.max() == -1 and ours.prediction_data_.num_clusters > 1
    labels, probs = gpu_core.approximate_predict(ours, x[:7])
    assert labels.tolist() == [-1] * 7 and probs.tolist() == [0.0] * 7
    assert gpu_core.membership_vector(ours, x[:7]).shape == (7, 0)
    lib = hdbscan.HDBSCAN(min_samples=3, min_cluster_size=4, max_cluster_size=10,  # ours less one
                          approx_min_span_tree=False, prediction_data=True).fit(x)  # fmt: skip
    assert lib.labels_.max() == -1
    assert hdbscan.approximate_predict(lib, x[:7])[0].tolist() == [-1] * 7


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_single_cluster_of_noise_predicts_noise(backend: Any) -> None:
    """allow_single_cluster chose the root, but an epsilon left every point noise: the library's
    prediction data holds no cluster (it reads the selection from the labels), so every new point
    is noise; membership vectors have no column (the root was taken as a label with no exemplar:
    a ValueError, and over HTTP a 500)."""
    rng = np.random.default_rng(3)
    x, new = rng.random((200, 20)), rng.random((9, 20))
    params: dict[str, Any] = {
        "min_cluster_size": 5, "cluster_selection_epsilon": 0.5, "allow_single_cluster": True,
    }  # fmt: skip
    ours = gpu_core.HDBSCAN(prediction_data=True, backend=backend, **params).fit(x)
    lib = hdbscan.HDBSCAN(min_samples=4, approx_min_span_tree=False, prediction_data=True, **params).fit(x)
    assert ours.labels_.max() == -1 and lib.labels_.max() == -1
    assert lib.prediction_data_.exemplars == [] and ours.exemplars_ == []
    labels, probs = gpu_core.approximate_predict(ours, new)
    with pytest.warns(UserWarning, match="does not have any defined clusters"):
        lib_labels, lib_probs = hdbscan.approximate_predict(lib, new)
    assert np.array_equal(labels, lib_labels) and np.array_equal(probs, lib_probs)
    assert gpu_core.membership_vector(ours, new).shape == (9, 0)
    assert gpu_core.all_points_membership_vectors(ours).shape == (200, 0)


def _unique_argmax_rows(model: gpu_core.HDBSCAN, new: np.ndarray | None) -> np.ndarray:
    from gpu_core._clustering.prediction import _heights, nearest_reachable

    data = model.prediction_data_
    if new is None:
        cluster, lam = data.point_cluster, data.point_lam
    else:
        nearest, lam = nearest_reachable(data, model._index_of(), new)
        lam = np.minimum(lam, data.point_lam[nearest])
        cluster = data.point_cluster[nearest]
    heights = _heights(data, cluster, lam)
    return (heights == heights.max(axis=1, keepdims=True)).sum(axis=1) == 1


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_labels_are_the_hdbscan_function_s_bits(case: dict[str, Any]) -> None:
    """With the options the function takes, the estimator's labels are ``gpu_core.hdbscan``'s."""
    if case.get("allow_single_cluster") or case.get("max_cluster_size"):
        pytest.skip("gpu_core.hdbscan has no such option")
    x = blobs(4)
    for k in (2, 7):
        ours = gpu_core.HDBSCAN(min_samples=k, backend="cpu", **case).fit(x)
        want = gpu_core.hdbscan(x, min_samples=k, backend="cpu", **case)
        assert np.array_equal(ours.labels_, want.labels)
        assert np.array_equal(ours.probabilities_, want.probabilities)


def test_single_linkage_cut_matches_the_library() -> None:
    x = blobs(5)
    ours = gpu_core.HDBSCAN(min_samples=2, backend="cpu").fit(x)
    lib = library(x)
    for cut in (0.3, 0.6, 1.5):
        got = ours.single_linkage_tree_.get_clusters(cut, min_cluster_size=8)
        want = lib.single_linkage_tree_.get_clusters(cut, min_cluster_size=8)
        perm = relabeling(got, want)
        assert np.array_equal(np.where(got >= 0, perm[np.maximum(got, 0)], -1), want)
        first = [int(np.flatnonzero(got == j)[0]) for j in range(int(got.max()) + 1)]
        assert first == sorted(first)  # numbered by their lowest point


def test_estimator_protocol() -> None:
    from sklearn.base import clone

    est = gpu_core.HDBSCAN(min_cluster_size=7, cluster_selection_method="leaf", backend="cpu")
    assert est.get_params()["min_cluster_size"] == 7
    assert repr(est) == "HDBSCAN(min_cluster_size=7, cluster_selection_method='leaf', backend='cpu')"
    twin = clone(est)
    assert twin is not est and twin.get_params() == est.get_params()
    est.set_params(min_samples=3, max_cluster_size=0)  # 0: the hdbscan library's "no limit"
    x = blobs(6)
    labels = est.fit_predict(x)
    assert np.array_equal(labels, est.labels_)
    with pytest.raises(ValueError, match="Invalid parameter 'nope'"):
        est.set_params(nope=1)
    with pytest.raises(gpu_core.NotFittedError):
        gpu_core.HDBSCAN().predict(x)
    # scikit-learn's validation of the declared constraints (InvalidParameterError, a ValueError)
    with pytest.raises(ValueError, match="'min_cluster_size' parameter of HDBSCAN must be an int"):
        gpu_core.HDBSCAN(min_cluster_size=1).fit(x)
    with pytest.raises(ValueError, match="'max_cluster_size' parameter of HDBSCAN"):
        gpu_core.HDBSCAN(max_cluster_size=-1).fit(x)
    with pytest.raises(ValueError, match="'metric' parameter of HDBSCAN must be a str among"):
        gpu_core.HDBSCAN(metric="braycurtis").fit(x)
    with pytest.raises(ValueError, match="expecting 2 features"):
        est.predict(np.zeros((3, 3)))


def test_pickled_model_predicts_the_same_and_rebuilds_its_trees() -> None:
    x = blobs(7)
    est = gpu_core.HDBSCAN(min_samples=4, backend="cpu").fit(x)
    new = np.random.default_rng(0).uniform(-12, 12, size=(200, 2))
    labels, probs = gpu_core.approximate_predict(est, new)
    again = pickle.loads(pickle.dumps(est))
    got, got_probs = gpu_core.approximate_predict(again, new)
    assert np.array_equal(got, labels) and np.array_equal(got_probs, probs)
    assert np.array_equal(again.condensed_tree_.to_numpy(), est.condensed_tree_.to_numpy())
    assert np.array_equal(again.outlier_scores_, est.outlier_scores_)


EXPECTED_FAILED_CHECKS: dict[str, str] = {}
"""None: every check of scikit-learn's that applies passes (``check_array_api_input`` skips itself
without SCIPY_ARRAY_API)."""


@pytest.mark.slow
def test_scikit_learn_check_estimator() -> None:
    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings():
        # scikit-learn notes that the estimator has no scikit-learn base class (on purpose: see
        # gpu_core/_clustering/estimator.py) and skips the array API check without SCIPY_ARRAY_API
        warnings.simplefilter("ignore")
        results = check_estimator(
            gpu_core.HDBSCAN(backend="cpu"), on_fail=None, expected_failed_checks=EXPECTED_FAILED_CHECKS
        )
    failed = {r["check_name"]: repr(r["exception"]) for r in results if r["status"] == "failed"}
    assert not failed, failed
    assert sum(r["status"] == "passed" for r in results) > 30


@pytest.mark.parametrize("backend", BACKENDS)
def test_backends_agree(backend: Any) -> None:
    """The GPU backend gives the CPU backend's labels, probabilities, GLOSH scores and predictions
    bit for bit, and its membership vectors within 1e-12 (CUDA's exp is not glibc's)."""
    x = blobs(8)
    new = np.random.default_rng(1).uniform(-12, 12, size=(500, 2))
    for k in (2, 5, 40):
        cpu = gpu_core.HDBSCAN(min_samples=k, backend="cpu").fit(x)
        other = gpu_core.HDBSCAN(min_samples=k, backend=backend).fit(x)
        assert np.array_equal(cpu.labels_, other.labels_)
        assert np.array_equal(cpu.probabilities_, other.probabilities_)
        assert np.array_equal(cpu.outlier_scores_, other.outlier_scores_)
        for a, b in zip(gpu_core.approximate_predict(cpu, new), gpu_core.approximate_predict(other, new),
                        strict=True):  # fmt: skip
            assert np.array_equal(a, b)
        assert np.allclose(gpu_core.membership_vector(cpu, new), gpu_core.membership_vector(other, new),
                           rtol=1e-12, atol=1e-15)  # fmt: skip
        assert np.allclose(gpu_core.all_points_membership_vectors(cpu),
                           gpu_core.all_points_membership_vectors(other), rtol=1e-12, atol=1e-15)  # fmt: skip


@pytest.mark.gpu
def test_device_resident_points_stay_on_the_device() -> None:
    import cupy

    x = cupy.asarray(blobs(9))
    est = gpu_core.HDBSCAN(min_samples=5, backend="gpu", prediction_data=True).fit(x)
    new = cupy.asarray(np.random.default_rng(2).uniform(-12, 12, size=(100, 2)))
    labels, probs = gpu_core.approximate_predict(est, new)
    assert isinstance(labels, cupy.ndarray) and isinstance(probs, cupy.ndarray)
    host = gpu_core.HDBSCAN(min_samples=5, backend="cpu").fit(x.get())
    want, _ = gpu_core.approximate_predict(host, new.get())
    assert np.array_equal(labels.get(), want)
