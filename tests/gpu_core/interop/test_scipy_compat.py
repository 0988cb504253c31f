"""``gpu_core.minimum_spanning_tree`` against SciPy's ``minimum_spanning_tree`` on the same inputs.

SciPy is the oracle: the same total always, and the same matrix (entries, orientation, type)
wherever the tree is unique; SciPy breaks ties by a stable sort in CSR order, the engine by
``(weight, edge_id)`` with the CSR position as the id, so the trees agree with ties too.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import minimum_spanning_tree as scipy_mst

from gpu_core import minimum_spanning_tree
from tests.utils.backends import BACKENDS


def assert_same_tree(ours, theirs) -> None:
    assert type(ours) is type(theirs)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype == np.float64
    ours, theirs = ours.tocoo(), theirs.tocoo()
    assert sorted(zip(ours.row.tolist(), ours.col.tolist(), ours.data.tolist(), strict=True)) == sorted(
        zip(theirs.row.tolist(), theirs.col.tolist(), theirs.data.tolist(), strict=True)
    )


def random_matrix(seed: int, n: int, density: float, values: list[float], symmetric: bool = False):
    rng = np.random.default_rng(seed)
    dense = np.where(rng.random((n, n)) < density, rng.choice(values, (n, n)), 0.0)
    if symmetric:
        dense = np.triu(dense) + np.triu(dense, 1).T
    return dense


CONVERSIONS = {
    "dense": lambda d: d,
    "list": lambda d: d.tolist(),
    "csr_matrix": sp.csr_matrix,
    "csc_matrix": sp.csc_matrix,
    "coo_matrix": sp.coo_matrix,
    "csr_array": sp.csr_array,
    "csc_array": sp.csc_array,
    "coo_array": sp.coo_array,
    "lil_array": sp.lil_array,
    "int64 csr": lambda d: sp.csr_array(np.rint(d).astype(np.int64)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", CONVERSIONS)
@pytest.mark.parametrize("values", ["ties", "unique", "negative"])
def test_same_tree_as_scipy(kind, values, backend):
    pools = {
        "ties": [1.0, 2.0, 3.0],
        "unique": list(np.linspace(0.5, 900.5, 1800)),
        "negative": [-2.5, -1.0, 0.5, 4.0],
    }
    for seed in range(8):
        for symmetric in (False, True):  # asymmetric: both directions stored, different weights
            dense = random_matrix(seed, 40, 0.08, pools[values], symmetric)
            if values == "unique":  # every entry its own weight, so the tree is unique
                nz = dense != 0
                dense[nz] = np.random.default_rng(seed).permutation(np.count_nonzero(nz)) + 1.0
            graph = CONVERSIONS[kind](dense)
            ours = minimum_spanning_tree(graph, backend=backend)
            theirs = scipy_mst(CONVERSIONS[kind](dense))
            assert_same_tree(ours, theirs)
            assert ours.sum() == pytest.approx(theirs.sum(), rel=1e-12)


def test_both_directions_with_different_weights_keep_the_lighter_in_its_orientation():
    dense = np.array([[0, 3, 0], [1, 0, 2], [0, 7, 0]], dtype=float)
    ours = minimum_spanning_tree(dense, backend="cpu")
    assert ours.toarray().tolist() == [[0, 0, 0], [1, 0, 2], [0, 0, 0]]
    assert_same_tree(ours, scipy_mst(dense))


def test_explicit_zeros_are_zero_weight_edges_and_dropped_from_the_result():
    """SciPy: an explicit zero joins its endpoints (a zero-weight edge) but cannot be stored in the tree."""
    graph = sp.csr_matrix((np.array([0.0, 5.0, 1.0]), ([0, 0, 1], [1, 2, 2])), shape=(3, 3))
    ours = minimum_spanning_tree(graph, backend="cpu")
    assert ours.toarray().tolist() == [[0, 0, 0], [0, 0, 1], [0, 0, 0]]
    assert_same_tree(ours, scipy_mst(graph))


def test_dense_entries_near_zero_inf_and_nan_are_not_edges():
    dense = np.array([[0, 1e-9, np.inf, 4], [0, 0, np.nan, 2], [0, 0, 0, 0], [0, 0, 5, 0]])
    ours = minimum_spanning_tree(dense, backend="cpu")
    assert ours.toarray().tolist() == [[0, 0, 0, 4], [0, 0, 0, 2], [0, 0, 0, 0], [0, 0, 5, 0]]
    assert_same_tree(ours, scipy_mst(dense))


def test_sparse_inf_and_nan_entries_sort_last_as_in_scipy():
    graph = sp.csr_array(
        (np.array([np.inf, np.nan, 1.0, np.inf, 2.0]), ([0, 0, 1, 2, 3], [1, 2, 2, 3, 0])), shape=(5, 5)
    )
    ours = minimum_spanning_tree(graph, backend="cpu")
    assert_same_tree(ours, scipy_mst(graph))
    assert np.isinf(ours.data).sum() == 1  # the inf edge 0-1 or 2-3 that SciPy keeps


def test_self_loops_duplicates_and_masked_arrays():
    coo = sp.coo_matrix((np.array([1.0, 2.0, 10.0, 0.5]), ([0, 0, 1, 2], [1, 1, 2, 2])), shape=(3, 3))
    assert_same_tree(minimum_spanning_tree(coo, backend="cpu"), scipy_mst(coo))  # duplicates summed
    masked = np.ma.masked_array(
        [[0, 3, 1], [0, 0, 0], [0, 2, 0]], mask=np.array([[0, 1, 0], [1, 1, 1], [1, 0, 1]], dtype=bool)
    )
    assert_same_tree(minimum_spanning_tree(masked, backend="cpu"), scipy_mst(masked))


def test_empty_and_edgeless():
    for graph in (np.zeros((0, 0)), np.zeros((4, 4)), sp.csr_matrix((5, 5))):
        assert_same_tree(minimum_spanning_tree(graph, backend="cpu"), scipy_mst(graph))


def test_overwrite_uses_the_input_in_place():
    graph = sp.csr_matrix(np.array([[0, 3, 1], [0, 0, 2], [0, 0, 0]], dtype=float))
    kept = graph.data.copy()
    tree = minimum_spanning_tree(graph, backend="cpu")
    assert np.array_equal(graph.data, kept)  # overwrite=False: the input is untouched
    tree = minimum_spanning_tree(graph, overwrite=True, backend="cpu")
    assert tree.toarray().tolist() == [[0, 0, 1], [0, 0, 2], [0, 0, 0]]
    assert np.shares_memory(tree.data, graph.data)  # no copy: the input's array holds the tree


def test_non_square_input_is_refused():
    with pytest.raises(ValueError, match="square"):
        minimum_spanning_tree(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="square"):
        minimum_spanning_tree(sp.csr_array((2, 3)))
