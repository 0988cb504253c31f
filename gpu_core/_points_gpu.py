"""The CuPy backend for point sets: Borůvka rounds over a bounding-volume hierarchy (``kernels/emst.cu``).

Points are sorted by Morton code on the device and grouped into leaves of an implicit
complete binary tree whose boxes are built bottom-up. Core distances (``min_samples > 1``)
are k-nearest-neighbour searches on that tree. Each Borůvka round recomputes, bottom-up,
which nodes hold points of one component only, lets every point find its lightest edge to
another component (skipping such nodes), picks each component's lightest edge under the
exact ``(weight², min, max)`` order and links the components; the host reads one counter
per round (the number of components left). The tree's edges are sorted on the device.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import numpy as np

from ._kernels import EMST_FILE, EMST_LEAF, kernel
from ._points import EuclideanTree, _is_cupy, _to_host, check_min_samples, finish_tree, validate_points
from .errors import DeviceError, DeviceMemoryError, GraphTooLargeError

BLOCK = 256
#: points per leaf of the hierarchy (kLeaf in kernels/emst.cu)
LEAF = EMST_LEAF
#: the largest min_samples the device's k-nearest-neighbour search keeps in registers
DEVICE_MAX_K = 64
INT32_MAX = 2**31 - 1
#: point sets of at most this many dimensions search packed float boxes (and the templates'
#: fixed-size fast path: d <= 3)
PACKED_MAX_DIMS = 3
PACKED_FLOATS = 8  # floats per packed node (two float4)
Array = Any


def _k(name: str) -> Any:
    return kernel(name, EMST_FILE)


def _grid(work: int) -> tuple[int]:
    return (max(1, min(math.ceil(work / BLOCK), 65535)),)


class _Device:
    """The points on the device, sorted by Morton code, with the hierarchy over them."""

    def __init__(self, cp: Any, coords: Array) -> None:
        self.cp = cp
        n, d = coords.shape
        self.n, self.d = n, d
        x = cp.asarray(coords)
        # per coordinate over a contiguous copy: a column reduction of (n, d) runs on d blocks only
        columns = cp.ascontiguousarray(x.T)
        lo = cp.stack([c.min() for c in columns])
        span = cp.stack([c.max() for c in columns]) - lo
        del columns
        scale = cp.where(span > 0, 1.0 / cp.where(span > 0, span, 1.0), 0.0)
        bits = max(1, min(32, 63 // d))
        codes = cp.empty(n, dtype=cp.uint64)
        _k("morton_codes")(
            _grid(n), (BLOCK,), (x, np.int32(n), np.int32(d), lo, scale, np.int32(bits), codes)
        )
        order = cp.argsort(codes)
        self.pts = cp.ascontiguousarray(x[order])
        self.orig = order.astype(cp.int32)
        self.pos = cp.empty(n, dtype=cp.int32)
        self.pos[self.orig] = cp.arange(n, dtype=cp.int32)
        del x, codes, order
        self.num_leaves = 1 << max(0, math.ceil(math.log2(max(1, math.ceil(n / LEAF)))))
        nodes = 2 * self.num_leaves
        self.lo = cp.empty(nodes * d, dtype=cp.float64)
        self.hi = cp.empty(nodes * d, dtype=cp.float64)
        self.min_core2 = cp.empty(nodes, dtype=cp.float64)
        self.node_comp = cp.empty(nodes, dtype=cp.int32)
        #: 1 to 3 dimensions: the searches read a packed float copy of the boxes (PackedNode in
        #: kernels/emst.cu, 32 bytes per node); more dimensions read the double boxes
        self.packed = cp.empty(nodes * PACKED_FLOATS, dtype=cp.float32) if d <= PACKED_MAX_DIMS else None

    def build(self, core2: Array | None) -> None:
        """Boxes (and each node's smallest squared core distance) bottom-up."""
        n, d, leaves = self.n, self.d, self.num_leaves
        _k("build_leaves")(
            _grid(leaves), (BLOCK,),
            (self.pts, np.int32(n), np.int32(d), np.int32(leaves), core2, self.lo, self.hi, self.min_core2),
        )  # fmt: skip
        level = leaves // 2
        while level >= 1:
            _k("build_level")(
                _grid(level), (BLOCK,), (np.int32(level), np.int32(d), self.lo, self.hi, self.min_core2)
            )
            level //= 2
        if self.packed is not None:
            nodes = 2 * leaves
            _k("pack_nodes")(
                _grid(nodes), (BLOCK,),
                (np.int32(nodes), np.int32(d), self.lo, self.hi, self.min_core2, self.packed),
            )  # fmt: skip

    def components(self, comp: Array) -> None:
        leaves = self.num_leaves
        _k("leaf_components")(
            _grid(leaves), (BLOCK,), (comp, np.int32(self.n), np.int32(leaves), self.node_comp, self.packed)
        )
        level = leaves // 2
        while level >= 1:
            _k("level_components")(_grid(level), (BLOCK,), (np.int32(level), self.node_comp, self.packed))
            level //= 2

    def core_distances(self, k: int) -> Array:
        cp = self.cp
        core2 = cp.empty(self.n, dtype=cp.float64)
        dims = self.d if self.d <= 3 else 0
        kmax = next(size for size in (8, 16, 32, 64) if k <= size)
        _k(f"core_distances<{dims}, {kmax}>")(
            _grid(self.n), (BLOCK,),
            (self.pts, np.int32(self.n), np.int32(self.d), np.int32(self.num_leaves), self.lo, self.hi,
             self.packed, np.int32(k), core2),
        )  # fmt: skip
        return core2


def _device_errors(cp: Any) -> tuple[type[BaseException], ...]:
    return (cp.cuda.runtime.CUDARuntimeError, cp.cuda.driver.CUDADriverError)


def gpu_euclidean_mst(points: Any, min_samples: int = 1) -> EuclideanTree:
    import cupy as cp

    started = time.perf_counter()
    on_device = _is_cupy(points)
    coords = validate_points(points, on_device=True)
    n, d = coords.shape
    k = check_min_samples(min_samples, n)
    if n > INT32_MAX:
        raise GraphTooLargeError(
            f"the GPU backend indexes points with 32 bits: at most {INT32_MAX} points, got {n}.",
            limit=INT32_MAX,
            actual=n,
        )
    timings: dict[str, float] = {}
    if n == 1:
        empty = np.empty(0, dtype=np.int64)
        tree = finish_tree(
            empty, empty, np.empty(0), n=n, d=d, min_samples=k, backend="gpu",
            core2=np.zeros(1) if k > 1 else None, started=started, timings_ms=timings,
        )  # fmt: skip
        return _on_device(cp, tree) if on_device else tree
    try:
        return _compute(cp, coords, k, started, timings, on_device)
    except cp.cuda.memory.OutOfMemoryError as exc:
        raise DeviceMemoryError(f"the point set does not fit in free device memory: {exc}") from None
    except _device_errors(cp) as exc:
        raise DeviceError(f"CUDA failed while computing the tree: {exc}") from None


def _on_device(cp: Any, tree: EuclideanTree) -> EuclideanTree:
    core = None if tree.core_distances is None else cp.asarray(tree.core_distances)
    return dataclasses.replace(
        tree, src=cp.asarray(tree.src), dst=cp.asarray(tree.dst), weights=cp.asarray(tree.weights),
        core_distances=core,
    )  # fmt: skip


class _Clock:
    """Device time per phase from CUDA events (read once, at the end)."""

    def __init__(self, cp: Any) -> None:
        self.cp = cp
        self.marks: list[tuple[str, Any, Any]] = []

    def start(self) -> Any:
        event = self.cp.cuda.Event()
        event.record()
        return event

    def stop(self, name: str, begin: Any) -> None:
        end = self.cp.cuda.Event()
        end.record()
        self.marks.append((name, begin, end))

    def totals(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, begin, end in self.marks:
            end.synchronize()
            out[name] = out.get(name, 0.0) + self.cp.cuda.get_elapsed_time(begin, end)
        return out


def _compute(
    cp: Any, coords: Array, k: int, started: float, timings: dict[str, float], on_device: bool
) -> EuclideanTree:
    n, d = coords.shape
    clock = _Clock(cp)
    t0 = clock.start()
    dev = _Device(cp, coords)
    dev.build(None)
    clock.stop("index_ms", t0)

    core2: Array | None = None
    if k > 1:
        t0 = clock.start()
        if k <= DEVICE_MAX_K:
            core2 = dev.core_distances(k)
        else:  # beyond the registers of one thread: the exact host search, same values
            from ._points_cpu import _core_distances, _Search

            host = _core_distances(_Search(_to_host(coords), None), k)
            core2 = cp.asarray(host)[dev.orig]
        dev.build(core2)
        clock.stop("core_ms", t0)

    grid = _grid(n)
    comp = cp.arange(n, dtype=cp.int32)
    parent = cp.arange(n, dtype=cp.int32)
    bound = cp.empty(n, dtype=cp.uint64)
    pair = cp.empty(n, dtype=cp.uint64)
    best_w = cp.empty(n, dtype=cp.float64)
    best_pair = cp.empty(n, dtype=cp.uint64)
    edges = cp.empty(n - 1, dtype=cp.int64)
    edge_w2 = cp.empty(n - 1, dtype=cp.float64)
    num_edges = cp.zeros(1, dtype=cp.int32)
    num_roots = cp.zeros(1, dtype=cp.int32)
    dims = d if d <= 3 else 0
    nearest = _k(f"nearest_outside<{dims}, {'true' if core2 is not None else 'false'}>")
    roots, rounds = n, 0
    while roots > 1:
        rounds += 1
        if rounds > 64:
            raise DeviceError(f"the Borůvka rounds stopped making progress ({roots} components left).")
        t0 = clock.start()
        dev.components(comp)
        _k("reset_round")(grid, (BLOCK,), (np.int32(n), bound, pair))
        _k("seed_bounds")(grid, (BLOCK,), (dev.pts, core2, comp, np.int32(n), np.int32(d), bound))
        t1 = clock.start()
        nearest(
            grid, (BLOCK,),
            (dev.pts, core2, np.int32(n), np.int32(d), np.int32(dev.num_leaves), dev.lo, dev.hi,
             dev.min_core2, dev.node_comp, dev.packed, comp, dev.orig, bound, best_w, best_pair),
        )  # fmt: skip
        clock.stop("nearest_ms", t1)
        _k("offer_pairs")(grid, (BLOCK,), (np.int32(n), comp, best_w, best_pair, bound, pair))
        _k("link_components")(
            grid, (BLOCK,), (np.int32(n), comp, dev.pos, bound, pair, parent, num_edges, edges, edge_w2)
        )
        num_roots.fill(0)
        _k("compress")(grid, (BLOCK,), (np.int32(n), parent, comp, num_roots))
        clock.stop("rounds_ms", t0)
        roots = int(num_roots.get()[0])
    count = int(num_edges.get()[0])
    if count != n - 1:
        raise DeviceError(f"the device tree has {count} edges instead of {n - 1}.")
    timings["rounds"] = float(rounds)

    # the canonical order (w², min, max): two stable radix sorts, by the packed pair then by w²
    t0 = clock.start()
    by_pair = cp.argsort(edges)
    order = by_pair[cp.argsort(edge_w2[by_pair])]
    del by_pair
    packed = edges[order]
    src = (packed >> 32).astype(cp.int32)
    dst = (packed & 0xFFFFFFFF).astype(cp.int32)
    del packed, edges
    weights = cp.sqrt(edge_w2[order])
    core = None
    if core2 is not None:
        core = cp.empty(n, dtype=cp.float64)
        core[dev.orig] = cp.sqrt(core2)
    clock.stop("sort_ms", t0)
    timings.update(clock.totals())
    t0_host = time.perf_counter()
    result: tuple[Array, Array, Array, Array | None]
    if on_device:
        result = (src.astype(cp.int64), dst.astype(cp.int64), weights, core)
    else:  # 4-byte indices cross the bus and are widened on the host
        core_h = None if core is None else core.get()
        result = (src.get().astype(np.int64), dst.get().astype(np.int64), weights.get(), core_h)
    total = float(result[2].sum())
    timings["host_ms"] = (time.perf_counter() - t0_host) * 1e3
    return EuclideanTree(
        src=result[0], dst=result[1], weights=result[2], total_weight=total, n=n, dimensions=d,
        min_samples=k, backend="gpu", compute_ms=(time.perf_counter() - started) * 1e3,
        core_distances=result[3], timings_ms=timings,
    )  # fmt: skip
