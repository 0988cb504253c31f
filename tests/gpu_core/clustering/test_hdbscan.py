"""HDBSCAN* labels and probabilities against scikit-learn.

Two oracles: scikit-learn's own selection (``_tree.tree_to_labels``) run on *our* single-linkage
tree must give exactly our labels and probabilities; and ``sklearn.cluster.HDBSCAN`` end to end
must give the same partition (adjusted Rand index 1.0) on sets where its tie order in the
mutual-reachability tree does not change the hierarchy.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.cluster import HDBSCAN
from sklearn.cluster._hdbscan._tree import HIERARCHY_dtype, tree_to_labels
from sklearn.metrics import adjusted_rand_score

import gpu_core
from gpu_core import errors
from gpu_core._clustering.hdbscan import labels_from_tree
from tests.utils.points import blobs, random_points

SETS = [
    blobs(1, 600, 2, centers=6, spread=0.15),
    blobs(2, 800, 3, centers=4, spread=0.3),
    random_points(3, 500, 2),
]
PARAMS = [
    (5, 5, "eom", 0.0),
    (10, 3, "eom", 0.0),
    (5, 5, "leaf", 0.0),
    (8, 4, "leaf", 0.0),
    (25, 10, "eom", 0.0),
]


def _hierarchy(z: np.ndarray) -> np.ndarray:
    h = np.zeros(z.shape[0], dtype=HIERARCHY_dtype)
    h["left_node"], h["right_node"], h["value"], h["cluster_size"] = z[:, 0], z[:, 1], z[:, 2], z[:, 3]
    return h


@pytest.mark.parametrize("compiled", [False, True], ids=["numpy", "numba"])
@pytest.mark.parametrize("ps", SETS, ids=lambda p: p.name)
@pytest.mark.parametrize(("mcs", "ms", "method", "eps"), [*PARAMS, (15, 2, "eom", 0.3)])
def test_selection_equals_sklearn_on_the_same_tree(ps, mcs, ms, method, eps, compiled) -> None:
    if compiled:
        pytest.importorskip("numba")
    z = gpu_core.single_linkage(gpu_core.euclidean_mst(ps.points, min_samples=ms, backend="cpu"))
    try:
        ref_labels, ref_prob = tree_to_labels(_hierarchy(z), mcs, method, False, eps, None)
    except TypeError:  # scikit-learn's epsilon walk fails under NumPy 2 on some trees
        pytest.skip("scikit-learn's own epsilon search fails on this tree")
    labels, prob = labels_from_tree(z, mcs, method, eps, compiled=compiled)
    assert np.array_equal(labels == -1, ref_labels == -1)
    assert adjusted_rand_score(ref_labels, labels) == 1.0
    assert np.array_equal(prob, ref_prob)


END_TO_END = [
    (SETS[1], 5, None, "eom", 0.0),
    (SETS[1], 10, 3, "eom", 0.0),
    (SETS[1], 15, 2, "eom", 0.3),
    (SETS[0], 15, 2, "eom", 0.3),
    (SETS[0], 25, 10, "eom", 0.0),
]


@pytest.mark.parametrize(("ps", "mcs", "ms", "method", "eps"), END_TO_END)
def test_labels_equal_sklearn_hdbscan(ps, mcs, ms, method, eps) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ref = HDBSCAN(
            min_cluster_size=mcs,
            min_samples=ms,
            cluster_selection_method=method,
            cluster_selection_epsilon=eps,
        ).fit(ps.points)
    ours = gpu_core.hdbscan(
        ps.points, min_cluster_size=mcs, min_samples=ms, cluster_selection_method=method,
        cluster_selection_epsilon=eps, backend="cpu",
    )  # fmt: skip
    assert adjusted_rand_score(ref.labels_, ours.labels) == 1.0
    assert np.array_equal(ref.labels_ == -1, ours.labels == -1)
    assert ours.num_clusters == ref.labels_.max() + 1
    np.testing.assert_allclose(ours.probabilities, ref.probabilities_, rtol=1e-12, atol=1e-12)


def test_tiny_inputs() -> None:
    one = gpu_core.hdbscan(np.zeros((1, 2)), min_cluster_size=2, min_samples=1, backend="cpu")
    assert one.labels.tolist() == [-1]
    few = gpu_core.hdbscan(np.arange(6.0).reshape(3, 2), min_cluster_size=5, min_samples=2, backend="cpu")
    assert few.labels.tolist() == [-1, -1, -1] and few.num_clusters == 0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"min_cluster_size": 1}, "min_cluster_size"),
        ({"min_samples": 50}, "min_samples"),
        ({"cluster_selection_method": "tree"}, "cluster_selection_method"),
        ({"cluster_selection_epsilon": -1.0}, "cluster_selection_epsilon"),
    ],
)
def test_bad_parameters(kwargs, field) -> None:
    with pytest.raises(errors.ClusteringParameterError) as info:
        gpu_core.hdbscan(np.random.default_rng(0).random((20, 2)), backend="cpu", **kwargs)
    assert info.value.field == field


def test_compiled_and_python_excess_of_mass_agree() -> None:
    from gpu_core._clustering import passes as _passes
    from gpu_core._clustering import select as _select

    passes = _passes.compiled_passes()
    if passes is None:
        pytest.skip("Numba is not installed")
    rng = np.random.default_rng(8)
    size = 20_001
    parent = np.zeros(size, dtype=np.int64)
    parent[1:] = (np.arange(1, size) - 1) // 2  # a binary tree, children after parents
    stability = rng.random(size) * rng.integers(1, 4, size)
    copy = passes._eom  # the compiled passes' own copy (see its docstring)
    assert np.array_equal(copy(parent, stability), _select._eom(parent, stability))
