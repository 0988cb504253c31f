"""Exact Euclidean and mutual-reachability trees (CPU backend) against a brute-force O(n²) oracle.

The oracle (tests/utils/points.py) is a dense float64 squared-distance matrix computed with the
contract's formula and Prim's algorithm under the ``(weight², min, max)`` order; SciPy checks the
total weight and the single-linkage matrix independently.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from scipy.cluster.hierarchy import linkage
from scipy.sparse.csgraph import minimum_spanning_tree

import gpu_core
from gpu_core import errors
from tests.utils.points import (
    core_squared,
    point_sets,
    prim_tree,
    random_points,
    squared_distance_matrix,
    weight_matrix,
)

SIZES = [(d, n) for d in (1, 2, 3, 8) for n in (2, 3, 9, 150)] + [(2, 700), (3, 400)]
CASES = [(d, n, k) for d, n in SIZES for k in (1, 2, 5) if k <= n]


@pytest.mark.parametrize(("d", "n", "min_samples"), CASES)
def test_tree_equals_the_brute_force_oracle(d: int, n: int, min_samples: int) -> None:
    for ps in point_sets(n, d, seed=7 * n + d):
        tree = gpu_core.euclidean_mst(ps.points, min_samples=min_samples, backend="cpu")
        src, dst, w = prim_tree(weight_matrix(ps.points, min_samples))
        assert np.array_equal(tree.src, src), ps.name
        assert np.array_equal(tree.dst, dst), ps.name
        assert np.array_equal(tree.weights, w), ps.name  # bit for bit
        assert tree.total_weight == pytest.approx(float(w.sum()), rel=1e-12)
        assert tree.backend == "cpu" and tree.n == n and tree.num_edges == n - 1
        if min_samples > 1:
            core = np.sqrt(core_squared(squared_distance_matrix(ps.points), min_samples))
            assert tree.core_distances is not None
            assert np.array_equal(tree.core_distances, core), ps.name
        else:
            assert tree.core_distances is None


def test_total_weight_matches_scipy_on_a_larger_set() -> None:
    pts = random_points(11, 1200, 2).points
    tree = gpu_core.euclidean_mst(pts, backend="cpu")
    dense = np.sqrt(squared_distance_matrix(pts))
    assert tree.total_weight == pytest.approx(float(minimum_spanning_tree(dense).sum()), rel=1e-12)
    assert np.all(tree.src < tree.dst)
    order = np.lexsort((tree.dst, tree.src, tree.weights))
    assert np.array_equal(order, np.arange(order.size))  # canonical order


def test_float32_cupy_like_input_and_single_point() -> None:
    one = gpu_core.euclidean_mst(np.zeros((1, 3), dtype=np.float32), min_samples=1, backend="cpu")
    assert one.num_edges == 0 and one.total_weight == 0.0
    assert gpu_core.single_linkage(np.zeros((1, 2))).shape == (0, 4)


def test_single_linkage_equals_scipy() -> None:
    pts = random_points(5, 600, 3).points
    ours = gpu_core.single_linkage(pts, backend="cpu")
    assert np.array_equal(ours, linkage(pts, "single"))  # no ties: the whole matrix


def test_single_linkage_distance_column_with_ties() -> None:
    pts = point_sets(300, 2, seed=3)[-1].points.astype(np.float64)  # integer grid: many ties
    ours = gpu_core.single_linkage(pts, backend="cpu")
    ref = linkage(pts, "single")
    assert np.array_equal(ours[:, 2], ref[:, 2])
    assert np.array_equal(ours[-1, 3], ref[-1, 3])


def test_linkage_from_sorted_edges_checks_the_tree() -> None:
    z = gpu_core.linkage_from_sorted_edges(4, [2, 0, 1], [3, 1, 3], [1.0, 2.0, 3.0])
    assert z.tolist() == [[2, 3, 1.0, 2], [0, 1, 2.0, 2], [4, 5, 3.0, 4]]
    with pytest.raises(errors.DisconnectedForestError) as info:
        gpu_core.linkage_from_sorted_edges(4, [0, 2], [1, 3], [1.0, 2.0])
    assert isinstance(info.value, errors.DisconnectedForestError) and info.value.num_components == 2
    again = pickle.loads(pickle.dumps(info.value))
    assert isinstance(again, errors.GraphValidationError) and again.field == "graph"
    assert isinstance(again, errors.DisconnectedForestError)
    assert again.num_components == 2 and str(again) == str(info.value)
    with pytest.raises(errors.DisconnectedForestError):
        gpu_core.linkage_from_sorted_edges(3, [0, 1, 0], [1, 0, 1], [1.0, 1.0, 2.0])
    with pytest.raises(errors.GraphValidationError, match="merge order"):
        gpu_core.linkage_from_sorted_edges(3, [0, 1], [1, 2], [2.0, 1.0])
    with pytest.raises(errors.GraphValidationError, match="outside"):
        gpu_core.linkage_from_sorted_edges(3, [0, 1], [1, 3], [1.0, 2.0])


@pytest.mark.parametrize(
    ("points", "error", "match"),
    [
        (np.array([[0.0, 1.0], [np.nan, 2.0], [np.inf, 0.0]]), errors.NonFiniteCoordinateError, "point 1"),
        (np.zeros((0, 2)), errors.PointSetShapeError, "no point"),
        (np.zeros(5), errors.PointSetShapeError, "two-dimensional"),
        (np.zeros((2, 2, 2)), errors.PointSetShapeError, "two-dimensional"),
        (np.zeros((3, gpu_core.MAX_DIMENSIONS + 1)), errors.PointSetShapeError, "coordinates"),
        (np.array([["a", "b"]]), errors.PointDtypeError, "dtype"),
        (np.zeros((2, 2), dtype=complex), errors.PointDtypeError, "dtype"),
    ],
)
def test_bad_points_raise_typed_errors(points, error, match) -> None:
    with pytest.raises(error, match=match) as info:
        gpu_core.euclidean_mst(points, backend="cpu")
    assert isinstance(info.value, ValueError)
    if error is errors.NonFiniteCoordinateError:
        assert getattr(info.value, "index", None) == 1
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is error and str(again) == str(info.value) and again.field == "points"


@pytest.mark.parametrize("min_samples", [0, 4, 2.5, True])
def test_bad_min_samples(min_samples) -> None:
    with pytest.raises(errors.ClusteringParameterError) as info:
        gpu_core.euclidean_mst(np.zeros((3, 2)), min_samples=min_samples, backend="cpu")
    assert info.value.field == "min_samples"
    assert pickle.loads(pickle.dumps(info.value)).field == "min_samples"


@pytest.mark.parametrize("n", [50, 3000])  # the Python loop, and the compiled one where Numba is installed
def test_linkage_loops_agree_and_detect_cycles(n: int) -> None:
    from gpu_core._dendrogram import cpu as dendrogram_cpu

    rng = np.random.default_rng(n)
    perm = rng.permutation(n)
    u, v = perm[1:], perm[rng.integers(0, np.arange(1, n))]
    w = np.sort(rng.random(n - 1))
    z = gpu_core.linkage_from_sorted_edges(n, u, v, w)
    ref = np.empty_like(z)
    ref[:, 2] = w
    assert dendrogram_cpu._label_python(n, u.astype(np.int64), v.astype(np.int64), ref) == -1
    assert np.array_equal(z, ref)
    assert np.array_equal(z[:, :2].min(axis=1), z[:, 0]) and z[-1, 3] == n
    u2, v2 = u.copy(), v.copy()
    u2[-1], v2[-1] = u[0], v[0]  # the last edge repeats the first: a cycle, one vertex left out
    with pytest.raises(errors.DisconnectedForestError) as info:
        gpu_core.linkage_from_sorted_edges(n, u2, v2, w)
    assert isinstance(info.value, errors.DisconnectedForestError) and info.value.num_components == 2
    again = pickle.loads(pickle.dumps(info.value))
    assert isinstance(again, errors.GraphValidationError) and again.field == "graph"
    assert isinstance(again, errors.DisconnectedForestError)
    assert again.num_components == 2 and str(again) == str(info.value)
