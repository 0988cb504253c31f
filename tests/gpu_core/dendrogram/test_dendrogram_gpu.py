"""The device dendrogram (``kernels/dendrogram.cu``) gives the host's linkage matrix bit for bit.

Marked ``gpu``: skipped where no CUDA device is visible. Trees of every shape (random, paths that
merge in order: the deepest dendrogram, stars, caterpillars; with and without weight ties) up to
10^6 points, every tuning of the kernels, the EMST and mutual-reachability trees of random,
clustered and duplicated points through ``gpu_core.single_linkage``, and the host's errors.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import gpu_core
from gpu_core._dendrogram.gpu import linkage_on_device
from gpu_core.errors import DisconnectedForestError, GraphValidationError
from tests.utils.dendrogram import Tree, random_tree, trees, with_cycle
from tests.utils.points import PointSet, blobs, duplicated, integer_grid, random_points

pytestmark = pytest.mark.gpu

MAKERS: dict[str, Callable[[int, int, int], PointSet]] = {
    "random": random_points, "blobs": blobs, "duplicated": duplicated,
}  # fmt: skip


def _on_device(tree: Tree, dtype=np.int64):
    import cupy

    src, dst = (cupy.asarray(a.astype(dtype)) for a in (tree.src, tree.dst))
    return src, dst, cupy.asarray(tree.weights)


def _assert_device_equals_host(tree: Tree, **tuning) -> None:
    import cupy

    want = gpu_core.linkage_from_sorted_edges(tree.n, tree.src, tree.dst, tree.weights)
    got = linkage_on_device(tree.n, *_on_device(tree), **tuning)
    assert isinstance(got, cupy.ndarray) and got.dtype == np.float64, tree.name
    assert np.array_equal(cupy.asnumpy(got), want), f"{tree.name} {tuning}"


@pytest.mark.parametrize(("tail", "spacing"), [(1, 2), (4, 32), (64, 32), (512, 8), (1 << 20, 64)])
def test_small_trees_every_tuning(tail: int, spacing: int) -> None:
    for tree in trees(seed=tail, sizes=(2, 3, 4, 5, 31, 64, 65, 300, 1000, 4099)):
        _assert_device_equals_host(tree, tail=tail, spacing=spacing)


@pytest.mark.parametrize("n", [10**5, 10**6])
def test_large_trees(n: int) -> None:
    for tree in trees(seed=n, sizes=(n,)):
        _assert_device_equals_host(tree)
    tree = random_tree(np.random.default_rng(n), n)
    _assert_device_equals_host(tree, tail=1)  # every level by the parallel union-find
    _assert_device_equals_host(tree, tail=4096, spacing=128)


def test_int32_ids_and_repeated_runs() -> None:
    import cupy

    tree = random_tree(np.random.default_rng(5), 50_000, ties=True)
    want = gpu_core.linkage_from_sorted_edges(tree.n, tree.src, tree.dst, tree.weights)
    for _ in range(3):  # no state survives a run
        got = linkage_on_device(tree.n, *_on_device(tree, np.int32))
        assert np.array_equal(cupy.asnumpy(got), want)


@pytest.mark.parametrize(
    "make", [random_points, blobs, duplicated, integer_grid], ids=["random", "blobs", "duplicated", "grid"]
)
@pytest.mark.parametrize("d", [2, 3])
def test_single_linkage_of_point_trees(make, d: int) -> None:
    import cupy

    ps = make(d, 20_000, d)
    points = cupy.asarray(ps.points)
    cpu = gpu_core.single_linkage(ps.points, backend="cpu")
    for min_samples in (1, 5):
        tree = gpu_core.euclidean_mst(points, min_samples=min_samples, backend="gpu")
        assert isinstance(tree.src, cupy.ndarray)
        got = gpu_core.single_linkage(tree)  # merged on the device, stays there
        assert isinstance(got, cupy.ndarray)
        src, dst, w = (cupy.asnumpy(a) for a in (tree.src, tree.dst, tree.weights))
        want = gpu_core.linkage_from_sorted_edges(tree.n, src, dst, w)
        assert np.array_equal(cupy.asnumpy(got), want), ps.name
        if min_samples == 1:
            assert np.array_equal(cupy.asnumpy(got), cpu), ps.name
    from_cupy = gpu_core.single_linkage(points, backend="gpu")
    assert isinstance(from_cupy, cupy.ndarray) and np.array_equal(cupy.asnumpy(from_cupy), cpu)
    from_numpy = gpu_core.single_linkage(ps.points, backend="gpu")  # the matrix comes back to the host
    assert isinstance(from_numpy, np.ndarray) and np.array_equal(from_numpy, cpu)
    index = gpu_core.build_point_index(ps.points, backend="gpu")
    from_index = gpu_core.single_linkage(index)
    assert isinstance(from_index, np.ndarray) and np.array_equal(from_index, cpu)


@pytest.mark.parametrize(("kind", "d"), [("random", 2), ("blobs", 3), ("duplicated", 2)])
def test_single_linkage_of_a_million_point_tree(kind: str, d: int) -> None:
    import cupy

    ps = MAKERS[kind](11, 10**6, d)
    tree = gpu_core.euclidean_mst(cupy.asarray(ps.points), backend="gpu")
    got = gpu_core.single_linkage(tree)
    src, dst, w = (cupy.asnumpy(a) for a in (tree.src, tree.dst, tree.weights))
    assert np.array_equal(cupy.asnumpy(got), gpu_core.linkage_from_sorted_edges(tree.n, src, dst, w))


def test_single_point_and_two_points() -> None:
    import cupy

    one = gpu_core.single_linkage(cupy.zeros((1, 2)), backend="gpu")
    assert one.shape == (0, 4)
    two = gpu_core.single_linkage(cupy.asarray([[0.0, 0.0], [3.0, 4.0]]), backend="gpu")
    assert np.array_equal(cupy.asnumpy(two), [[0.0, 1.0, 5.0, 2.0]])


def test_not_a_tree_raises_the_host_error() -> None:
    for tree in trees(seed=4, sizes=(3, 100, 5000)):
        bad = with_cycle(tree)
        with pytest.raises(DisconnectedForestError) as host:
            gpu_core.linkage_from_sorted_edges(bad.n, bad.src, bad.dst, bad.weights)
        with pytest.raises(DisconnectedForestError) as device:
            linkage_on_device(bad.n, *_on_device(bad))
        assert str(device.value) == str(host.value), bad.name
    tree = random_tree(np.random.default_rng(1), 1000)
    src, dst, w = _on_device(tree)
    dst[7] = 1000  # an id outside [0, n)
    with pytest.raises(GraphValidationError, match="outside"):
        linkage_on_device(tree.n, src, dst, w)
    with pytest.raises(GraphValidationError, match="merge order"):
        src, dst, w = _on_device(tree)
        linkage_on_device(tree.n, src, dst, w[::-1].copy())
