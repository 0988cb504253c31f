"""A point set's spatial index, built once and reused for any ``min_samples`` (CPU backend).

A tree computed on a reused :class:`gpu_core.PointIndex` must be the very arrays a fresh
computation on the points gives, and both must equal the brute-force oracle of
tests/utils/points.py, whatever order the ``min_samples`` come in (the index is never written by
a computation). The GPU equivalents are in test_point_index_gpu.py.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
from sklearn.cluster import HDBSCAN
from sklearn.metrics import adjusted_rand_score

import gpu_core
from gpu_core import errors
from gpu_core._points import index as point_index
from gpu_core._points.validate import validate_points
from tests.utils.points import (
    blobs,
    core_squared,
    point_sets,
    prim_tree,
    squared_distance_matrix,
    weight_matrix,
)

#: min_samples in an order that goes up and back down (a later k must not see an earlier k's state)
KS = (5, 16, 1, 2, 5)


def same_tree(a: gpu_core.EuclideanTree, b: gpu_core.EuclideanTree, name: str) -> None:
    assert np.array_equal(a.src, b.src), name
    assert np.array_equal(a.dst, b.dst), name
    assert np.array_equal(a.weights, b.weights), name
    assert a.total_weight == b.total_weight, name
    if b.core_distances is None:
        assert a.core_distances is None, name
    else:
        assert a.core_distances is not None and np.array_equal(a.core_distances, b.core_distances), name


@pytest.mark.parametrize("d", [2, 3, 8])
def test_reused_index_trees_equal_fresh_ones_and_brute_force(d: int) -> None:
    n = 150
    for ps in point_sets(n, d, seed=13 * d):  # random, float32, blobs, duplicated, collinear, grid
        index = gpu_core.build_point_index(ps.points, backend="cpu")
        assert (index.n, index.dimensions, index.backend, index.on_device) == (n, d, "cpu", False)
        d2 = squared_distance_matrix(ps.points)
        for k in KS:
            reused = gpu_core.euclidean_mst(index, min_samples=k)
            fresh = gpu_core.euclidean_mst(ps.points, min_samples=k, backend="cpu")
            same_tree(reused, fresh, f"{ps.name} k={k}")
            src, dst, w = prim_tree(weight_matrix(ps.points, k))
            assert np.array_equal(reused.src, src) and np.array_equal(reused.dst, dst), ps.name
            assert np.array_equal(reused.weights, w), ps.name
            if k > 1:
                assert np.array_equal(reused.core_distances, np.sqrt(core_squared(d2, k))), ps.name  # type: ignore[arg-type]
            assert reused.timings_ms["index_ms"] == 0.0 and fresh.timings_ms["index_ms"] > 0.0


def test_emst_and_single_linkage_after_hdbscan_on_one_index() -> None:
    ps = blobs(4, 400, 2, centers=5, spread=0.1)
    index = gpu_core.build_point_index(ps.points, backend="cpu")
    for mcs, ms in ((10, 5), (10, 16), (25, 5), (5, 1)):
        reused = gpu_core.hdbscan(index, min_cluster_size=mcs, min_samples=ms)
        fresh = gpu_core.hdbscan(ps.points, min_cluster_size=mcs, min_samples=ms, backend="cpu")
        assert np.array_equal(reused.labels, fresh.labels), (mcs, ms)
        assert np.array_equal(reused.probabilities, fresh.probabilities), (mcs, ms)
        assert reused.timings_ms["index_ms"] == 0.0
        if ms > 1:  # scikit-learn counts a point in its own neighbourhood from min_samples 2
            reference = HDBSCAN(min_cluster_size=mcs, min_samples=ms, copy=True).fit(ps.points)
            assert adjusted_rand_score(reused.labels, reference.labels_) == 1.0
    same_tree(gpu_core.euclidean_mst(index), gpu_core.euclidean_mst(ps.points, backend="cpu"), "emst")
    assert np.array_equal(gpu_core.single_linkage(index), gpu_core.single_linkage(ps.points, backend="cpu"))


def test_validation_happens_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    validate = validate_points

    def counting(points: Any, **kwargs: Any) -> Any:
        calls.append(points)
        return validate(points, **kwargs)

    monkeypatch.setattr(point_index, "validate_points", counting)  # where the index module calls it
    pts = blobs(5, 200, 3).points
    gpu_core.hdbscan(pts, min_cluster_size=8, backend="cpu")
    assert len(calls) == 1  # hdbscan's check; the tree takes the index built from its result
    gpu_core.euclidean_mst(pts, min_samples=3, backend="cpu")
    assert len(calls) == 2
    index = gpu_core.build_point_index(pts, backend="cpu")
    assert len(calls) == 3
    gpu_core.hdbscan(index, min_cluster_size=8)
    gpu_core.euclidean_mst(index, min_samples=4)
    gpu_core.single_linkage(index)
    assert len(calls) == 3  # an index is never validated again


def test_index_bytes_and_single_point() -> None:
    pts = blobs(6, 300, 3).points
    own = gpu_core.build_point_index(pts, backend="cpu")  # float64 C-contiguous: the caller's array
    copy = gpu_core.build_point_index(pts.astype(np.float32), backend="cpu")  # converted: the index's
    assert own.nbytes > pts.nbytes  # at least the transpose and the k-d tree's permutation
    assert copy.nbytes - own.nbytes == pts.nbytes
    assert own.build_ms > 0.0 and "backend='cpu'" in repr(own)
    one = gpu_core.build_point_index(np.zeros((1, 2)), backend="cpu")
    tree = gpu_core.euclidean_mst(one)
    assert tree.num_edges == 0 and tree.core_distances is None and tree.n == 1
    assert gpu_core.hdbscan(one, min_cluster_size=2, min_samples=1).labels.tolist() == [-1]


def test_bad_use_of_an_index() -> None:
    index = gpu_core.build_point_index(blobs(7, 20, 2).points, backend="cpu")
    with pytest.raises(errors.PointIndexBackendError, match="built on the cpu backend") as info:
        gpu_core.euclidean_mst(index, backend="gpu")
    assert isinstance(info.value, ValueError) and info.value.field == "backend"
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is errors.PointIndexBackendError and again.field == "backend"
    with pytest.raises(errors.PointIndexBackendError):
        gpu_core.hdbscan(index, backend="gpu")
    with pytest.raises(ValueError, match="backend must be one of"):
        gpu_core.euclidean_mst(index, backend="tpu")  # type: ignore[arg-type]
    assert gpu_core.euclidean_mst(index, backend="cpu").num_edges == 19
    with pytest.raises(errors.ClusteringParameterError, match="between 1 and the number of points"):
        gpu_core.euclidean_mst(index, min_samples=21)
    with pytest.raises(errors.ClusteringParameterError) as bad:
        gpu_core.hdbscan(index, min_cluster_size=1)
    assert bad.value.field == "min_cluster_size"
    with pytest.raises(errors.NonFiniteCoordinateError):
        gpu_core.build_point_index(np.array([[0.0, np.nan]]), backend="cpu")


@pytest.mark.parametrize("n", [2, 3, 5, 8, 9, 100, 1000])
@pytest.mark.parametrize("leaf", [1, 4])
def test_node_core_minima_follow_the_kernels_recurrence(
    n: int, leaf: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPU computation's node core minima (CuPy reductions, here run by NumPy) are the values of
    build_leaves/build_level in kernels/emst.cu, written out as loops: +inf for a leaf without points.
    (On a device, test_point_index_gpu.py compares them with the kernels themselves.)"""
    import math

    from gpu_core._points import gpu as _points_gpu

    monkeypatch.setattr(_points_gpu, "LEAF", leaf)
    dev = _points_gpu._Device.__new__(_points_gpu._Device)
    dev.cp, dev.n = np, n
    dev.num_leaves = 1 << max(0, math.ceil(math.log2(max(1, math.ceil(n / leaf)))))
    dev.nodes = 2 * dev.num_leaves
    core2 = np.random.default_rng(n).random(n)
    expected = np.empty(dev.nodes)
    for j in range(dev.num_leaves):
        expected[dev.num_leaves + j] = min(core2[j * leaf : min(j * leaf + leaf, n)], default=np.inf)
    level = dev.num_leaves // 2
    while level >= 1:
        for node in range(level, 2 * level):
            expected[node] = min(expected[2 * node], expected[2 * node + 1])
        level //= 2
    assert np.array_equal(dev.min_core2(core2)[1:], expected[1:])
    assert not dev.min_core2(None).any()  # the Euclidean traversal never reads them
