"""GPU: trees on a reused device index are the CPU backend's arrays bit for bit; the index never changes.

Marked ``gpu``: skipped where no CUDA device is visible. The CPU backend's arrays are themselves
checked against brute force (test_points.py, test_point_index.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gpu_core
from gpu_core import errors
from tests.utils.points import blobs, point_sets, random_points

pytestmark = pytest.mark.gpu

#: up and back down, and 70: beyond the device's k-nearest search (host core distances)
KS = (5, 16, 1, 70, 2, 5)


def host(a: Any) -> Any:
    return a.get() if type(a).__module__.split(".")[0] == "cupy" else a


def assert_same(gpu: gpu_core.EuclideanTree, cpu: gpu_core.EuclideanTree, name: str) -> None:
    assert gpu.backend == "gpu" and cpu.backend == "cpu", name
    assert np.array_equal(host(gpu.src), cpu.src), name
    assert np.array_equal(host(gpu.dst), cpu.dst), name
    assert np.array_equal(host(gpu.weights), cpu.weights), name
    if cpu.core_distances is None:
        assert gpu.core_distances is None, name
    else:
        assert gpu.core_distances is not None, name
        assert np.array_equal(host(gpu.core_distances), cpu.core_distances), name


def snapshot(index: gpu_core.PointIndex) -> list[Any]:
    """Copies of the index's arrays (the boxes from node 1: node 0 is never written, maybe NaN bits)."""
    dev = index._state.device  # type: ignore[attr-defined]
    d = dev.d
    return [a.copy() for a in (dev.pts, dev.orig, dev.pos, dev.lo[d:], dev.hi[d:])]


@pytest.mark.parametrize("d", [1, 2, 3, 8])
def test_reused_gpu_index_equals_cpu(d: int) -> None:
    import cupy

    for ps in point_sets(300, d, seed=17 * d):  # random, float32, blobs, duplicated, collinear, grid
        index = gpu_core.build_point_index(ps.points, backend="gpu")
        assert (index.n, index.dimensions, index.backend, index.on_device) == (300, d, "gpu", False)
        before = snapshot(index)
        for k in KS:
            reused = gpu_core.euclidean_mst(index, min_samples=k)
            cpu = gpu_core.euclidean_mst(ps.points, min_samples=k, backend="cpu")
            assert_same(reused, cpu, f"{ps.name} k={k} reused")
            assert isinstance(reused.src, np.ndarray) and reused.timings_ms["index_ms"] == 0.0
            fresh = gpu_core.euclidean_mst(ps.points, min_samples=k, backend="gpu")
            assert_same(fresh, cpu, f"{ps.name} k={k} fresh")
        after = snapshot(index)
        assert all(bool(cupy.array_equal(a, b)) for a, b in zip(before, after, strict=True)), ps.name


@pytest.mark.parametrize(("d", "ks"), [(2, (5, 16, 64, 2)), (3, (16, 5, 1)), (5, (8, 3))])
def test_reused_gpu_index_on_larger_sets(d: int, ks: tuple[int, ...]) -> None:
    for ps in (
        random_points(d, 20_000, d),
        blobs(d, 20_000, d, centers=8),
        point_sets(20_000, d, seed=d)[-1],
    ):
        index = gpu_core.build_point_index(ps.points, backend="gpu")
        for k in ks:
            cpu = gpu_core.euclidean_mst(ps.points, min_samples=k, backend="cpu")
            assert_same(gpu_core.euclidean_mst(index, min_samples=k), cpu, f"{ps.name} k={k}")


def test_node_core_minima_equal_the_kernels() -> None:
    """The per-computation node minima (CuPy reductions) are the values build_leaves/build_level
    compute, rebuilding the boxes gives the index's own boxes, and a computation's packed nodes are
    what pack_nodes makes of the kernels' arrays."""
    import cupy

    from gpu_core._points.gpu import BLOCK, PACKED_FLOATS, _grid, _k

    for n, d in ((1000, 2), (777, 3), (300, 8), (513, 1)):
        index = gpu_core.build_point_index(blobs(n, n, d).points, backend="gpu")
        dev = index._state.device  # type: ignore[attr-defined]
        packed = dev.packed()
        assert (packed is None) == (d > 3)
        dev.pack(dev.min_core2(None), packed)
        for k in (2, 5, 16):
            core2 = dev.core_distances(k, packed)
            lo, hi = cupy.empty_like(dev.lo), cupy.empty_like(dev.hi)
            mc = cupy.empty(dev.nodes, dtype=cupy.float64)
            _k("build_leaves")(
                _grid(dev.num_leaves), (BLOCK,),
                (dev.pts, np.int32(dev.n), np.int32(d), np.int32(dev.num_leaves), core2, lo, hi, mc),
            )  # fmt: skip
            level = dev.num_leaves // 2
            while level >= 1:
                _k("build_level")(_grid(level), (BLOCK,), (np.int32(level), np.int32(d), lo, hi, mc))
                level //= 2
            ours = dev.min_core2(core2)
            assert bool(cupy.array_equal(ours[1:], mc[1:])), (n, d, k)
            assert bool(cupy.array_equal(lo[d:], dev.lo[d:])) and bool(cupy.array_equal(hi[d:], dev.hi[d:]))
            if packed is not None:
                theirs = cupy.empty_like(packed)
                args = (np.int32(dev.nodes), np.int32(d), lo, hi, mc, theirs)
                _k("pack_nodes")(_grid(dev.nodes), (BLOCK,), args)
                mine = dev.packed()
                dev.pack(ours, mine)
                same = mine[PACKED_FLOATS:].view(cupy.uint32) == theirs[PACKED_FLOATS:].view(cupy.uint32)
                assert bool(same.all()), (n, d, k)  # bit for bit (NaN-boxed component ids included)


def test_index_of_cupy_points_hdbscan_and_bytes() -> None:
    import cupy

    ps = blobs(9, 3000, 2, centers=6, spread=0.2)
    index = gpu_core.build_point_index(cupy.asarray(ps.points), backend="gpu")
    assert index.on_device and index.build_ms > 0.0
    dev = index._state.device  # type: ignore[attr-defined]
    assert index.nbytes == sum(a.nbytes for a in (dev.pts, dev.orig, dev.pos, dev.lo, dev.hi))
    for k in (1, 5, 16):
        tree = gpu_core.euclidean_mst(index, min_samples=k)
        assert all(isinstance(a, cupy.ndarray) for a in (tree.src, tree.dst, tree.weights))
        assert_same(tree, gpu_core.euclidean_mst(ps.points, min_samples=k, backend="cpu"), f"k={k}")
    for mcs, ms in ((10, 5), (10, 16), (20, 5)):
        a = gpu_core.hdbscan(index, min_cluster_size=mcs, min_samples=ms)
        b = gpu_core.hdbscan(ps.points, min_cluster_size=mcs, min_samples=ms, backend="cpu")
        assert np.array_equal(a.labels, b.labels) and np.array_equal(a.probabilities, b.probabilities)
        assert a.backend == "gpu"
    z = gpu_core.single_linkage(index)  # merged on the device, left there like the points
    assert isinstance(z, cupy.ndarray)
    assert np.array_equal(z.get(), gpu_core.single_linkage(ps.points, backend="cpu"))
    with pytest.raises(errors.PointIndexBackendError):
        gpu_core.euclidean_mst(index, backend="cpu")
    one = gpu_core.build_point_index(cupy.zeros((1, 3)), backend="gpu")
    tree = gpu_core.euclidean_mst(one)
    assert one.nbytes == 0 and tree.num_edges == 0 and isinstance(tree.src, cupy.ndarray)
