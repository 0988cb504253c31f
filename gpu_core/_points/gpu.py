"""The CuPy backend for point sets: Borůvka rounds over a bounding-volume hierarchy (``kernels/emst.cu``).

Points are sorted by Morton code on the device and grouped into leaves of an implicit
complete binary tree whose boxes are built bottom-up: that is the point set's index
(:class:`GpuIndex`), built once and never written again, whatever ``min_samples``. Each
computation on it allocates its own scratch: each node's smallest squared core distance
(``min_samples > 1``), which nodes hold points of one component only, the packed float copy of
the boxes the 1 to 3 dimensional searches read (it carries those two per-computation values
too), the Borůvka state.
Core distances are k-nearest-neighbour searches on the tree. Before the rounds, every point's
:data:`LIST` nearest points are found the same way: they settle most points' edges in the early
rounds (a listed point of another component nearer than the list's last is the exact lightest
edge out) and give the core distances up to ``min_samples = LIST``. Each Borůvka round recomputes,
bottom-up, which nodes hold points of one component only, lets every point find its lightest
edge to another component (skipping such nodes), picks each component's lightest edge under the
exact ``(weight², min, max)`` order and links the components; the host reads one counter per
round (the number of components left). The tree's edges are sorted on the device.

Design: docs/design/point-trees.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._backend.kernels import EMST_FILE, EMST_LEAF, EMST_LIST, kernel
from ..errors import DeviceError, DeviceMemoryError, GraphTooLargeError
from .kdtree import L2
from .metrics import KeySpace
from .tree import EuclideanTree, finish_tree

BLOCK = 256
#: points per leaf of the hierarchy (kLeaf in kernels/emst.cu)
LEAF = EMST_LEAF
#: neighbours per point in the lists that settle the early Borůvka rounds of Euclidean trees
#: (``neighbour_edges`` in kernels/emst.cu; 0: no lists)
LIST = EMST_LIST
#: the largest min_samples the device's k-nearest-neighbour search keeps in registers
DEVICE_MAX_K = 64
#: the list sizes of the query points' searches (``core_distances<D, K, true>`` with queries)
QUERY_LIST_SIZES = (8, 16, 32, 64)
INT32_MAX = 2**31 - 1
#: point sets of at most this many dimensions search packed float boxes (and the templates'
#: fixed-size fast path: d <= 3)
PACKED_MAX_DIMS = 3
PACKED_FLOATS = 8  # floats per packed node (two float4)
Array = Any


def _k(name: str, variant: str = "") -> Any:
    return kernel(name, EMST_FILE, variant=variant)


def _grid(work: int) -> tuple[int]:
    return (max(1, min(math.ceil(work / BLOCK), 65535)),)


class _Device:
    """The points on the device, sorted by Morton code, with the boxes of the hierarchy over them.

    Written once, here; computations only read it. ``space``: the keys its searches compare (the
    Euclidean build of the kernels, or the minkowski build with the metric's code and ``p``).
    """

    def __init__(self, cp: Any, coords: Array, space: KeySpace = L2) -> None:
        self.cp = cp
        n, d = coords.shape
        self.n, self.d = n, d
        self.space = space
        self.variant = "" if space.kind == "l2" else "minkowski"
        self.metric_args = (np.int32(space.code), np.float64(space.p))
        x = cp.asarray(coords)
        # per coordinate over a contiguous copy: a column reduction of (n, d) runs on d blocks only
        columns = cp.ascontiguousarray(x.T)
        lo = cp.stack([c.min() for c in columns])
        span = cp.stack([c.max() for c in columns]) - lo
        del columns
        scale = cp.where(span > 0, 1.0 / cp.where(span > 0, span, 1.0), 0.0)
        bits = max(1, min(32, 63 // d))
        codes = cp.empty(n, dtype=cp.uint64)
        self.k("morton_codes")(
            _grid(n), (BLOCK,), (x, np.int32(n), np.int32(d), lo, scale, np.int32(bits), codes)
        )
        order = cp.argsort(codes)
        # the Morton frame, kept: query points are sorted in it and placed among the points by it
        self.code_lo, self.code_scale, self.bits = lo, scale, bits
        self.pts = cp.ascontiguousarray(x[order])
        self.orig = order.astype(cp.int32)
        self.pos = cp.empty(n, dtype=cp.int32)
        self.pos[self.orig] = cp.arange(n, dtype=cp.int32)
        del x, codes, order
        self.num_leaves = 1 << max(0, math.ceil(math.log2(max(1, math.ceil(n / LEAF)))))
        self.nodes = 2 * self.num_leaves
        self.lo = cp.empty(self.nodes * d, dtype=cp.float64)
        self.hi = cp.empty(self.nodes * d, dtype=cp.float64)
        # the kernels also reduce per-node core distances: none here (a scratch the index drops)
        scratch = cp.empty(self.nodes, dtype=cp.float64)
        self.k("build_leaves")(
            _grid(self.num_leaves), (BLOCK,),
            (self.pts, np.int32(n), np.int32(d), np.int32(self.num_leaves), None, self.lo, self.hi, scratch),
        )  # fmt: skip
        level = self.num_leaves // 2
        while level >= 1:
            args = (np.int32(level), np.int32(d), self.lo, self.hi, scratch)
            self.k("build_level")(_grid(level), (BLOCK,), args)
            level //= 2

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in (self.pts, self.orig, self.pos, self.lo, self.hi)))

    def k(self, name: str) -> Any:
        """A kernel of this index's build (Euclidean or minkowski)."""
        return _k(name, self.variant)

    def min_core2(self, core2: Array | None) -> Array:
        """Each node's smallest squared core distance (+inf for a node without points), bottom-up:
        the values ``build_leaves``/``build_level`` compute (a minimum is exact), into a new array."""
        cp = self.cp
        out = cp.zeros(self.nodes, dtype=cp.float64)
        if core2 is None:  # the Euclidean traversal never reads it
            return out
        padded = cp.full(self.num_leaves * LEAF, cp.inf, dtype=cp.float64)
        padded[: self.n] = core2
        out[self.num_leaves :] = padded.reshape(self.num_leaves, LEAF).min(axis=1)
        del padded
        level = self.num_leaves // 2
        while level >= 1:
            children = out[2 * level : 4 * level]
            out[level : 2 * level] = cp.minimum(children[0::2], children[1::2])
            level //= 2
        return out

    def packed(self) -> Array | None:
        """A computation's packed float copy of the boxes (PackedNode in kernels/emst.cu, 32 bytes per
        node: the searches of 1 to 3 dimensions read it), to be filled by :meth:`pack`; None for more
        dimensions (their searches read the double boxes)."""
        if self.d > PACKED_MAX_DIMS or self.space.kind == "lp":  # lp: the double boxes' keys
            return None
        return self.cp.empty(self.nodes * PACKED_FLOATS, dtype=self.cp.float32)

    def pack(self, min_core2: Array, packed: Array | None) -> None:
        """Fill ``packed`` from the index's boxes and the computation's node core minima."""
        if packed is not None:
            args = (np.int32(self.nodes), np.int32(self.d), self.lo, self.hi, min_core2, packed)
            self.k("pack_nodes")(_grid(self.nodes), (BLOCK,), args)

    def components(self, comp: Array, node_comp: Array, packed: Array | None) -> None:
        leaves = self.num_leaves
        args = (comp, np.int32(self.n), np.int32(leaves), node_comp, packed)
        self.k("leaf_components")(_grid(leaves), (BLOCK,), args)
        level = leaves // 2
        while level >= 1:
            self.k("level_components")(_grid(level), (BLOCK,), (np.int32(level), node_comp, packed))
            level //= 2

    def core_distances(self, k: int, packed: Array | None) -> Array:
        core2 = self.cp.empty(self.n, dtype=self.cp.float64)
        kmax = next(size for size in (8, 16, 32, 64) if k <= size)
        self._nearest(f"{kmax}, false", k, packed, core2, None, None)
        return core2

    def neighbour_lists(self, packed: Array | None) -> tuple[Array, Array]:
        """Every point's :data:`LIST` nearest points (itself included): sorted positions (-1 past the
        set's size) and squared distances (+inf there), ascending, ``(n, LIST)`` each."""
        cp = self.cp
        pos = cp.empty((self.n, LIST), dtype=cp.int32)
        w2 = cp.empty((self.n, LIST), dtype=cp.float64)
        self._nearest(f"{LIST}, true", LIST, packed, None, pos, w2)
        return pos, w2

    def query_lists(self, queries: Array, size: int, packed: Array | None) -> tuple[Array, Array]:
        """The ``size`` nearest points of each query point (a C-contiguous ``(q, d)`` float64
        CuPy array, not points of the index): sorted positions (-1 past the set's size) and
        squared distances (+inf there), ascending, ``(q, size)`` each; ``size`` one of
        :data:`QUERY_LIST_SIZES`."""
        cp = self.cp
        count = int(queries.shape[0])
        pos = cp.empty((count, size), dtype=cp.int32)
        w2 = cp.empty((count, size), dtype=cp.float64)
        if not count:
            return pos, w2
        # searched in Morton order, each starting from the bound of the points where its code falls
        # among the index's: neighbouring threads walk the same boxes, and the bound prunes from the
        # start
        codes = cp.empty(count, dtype=cp.uint64)
        self.k("morton_codes")(
            _grid(count), (BLOCK,),
            (queries, np.int32(count), np.int32(self.d), self.code_lo, self.code_scale, np.int32(self.bits),
             codes),
        )  # fmt: skip
        order = cp.argsort(codes)
        del codes
        ordered = cp.ascontiguousarray(queries[order])
        self._nearest(f"{size}, true", size, packed, None, pos, w2, ordered, count, framed=True)
        del ordered
        out_pos, out_w2 = cp.empty_like(pos), cp.empty_like(w2)
        out_pos[order] = pos
        out_w2[order] = w2
        return out_pos, out_w2

    def _nearest(
        self,
        template: str,
        k: int,
        packed: Array | None,
        core2: Array | None,
        pos: Any,
        w2: Any,
        queries: Array | None = None,
        count: int = 0,
        framed: bool = False,
    ) -> None:
        """``framed``: the queries' first bounds from where they fall in the index's Morton order."""
        dims = self.d if self.d <= 3 else 0
        frame = (self.code_lo, self.code_scale, np.int32(self.bits)) if framed else (None, None, np.int32(0))
        self.k(f"core_distances<{dims}, {template}>")(
            _grid(count if queries is not None else self.n), (BLOCK,),
            (self.pts, np.int32(self.n), np.int32(self.d), np.int32(self.num_leaves), self.lo, self.hi,
             packed, np.int32(k), core2, pos, w2, queries, np.int32(count), *frame, *self.metric_args),
        )  # fmt: skip

    def host_coords(self) -> np.ndarray[Any, Any]:
        """The points in their original order, on the host (the same float64 values)."""
        host = np.empty((self.n, self.d), dtype=np.float64)
        host[self.orig.get()] = self.pts.get()
        return host


def _device_errors(cp: Any) -> tuple[type[BaseException], ...]:
    return (cp.cuda.runtime.CUDARuntimeError, cp.cuda.driver.CUDADriverError)


@contextlib.contextmanager
def _device_failures(cp: Any, doing: str) -> Iterator[None]:
    """CUDA's errors as the engine's typed ones."""
    try:
        yield
    except cp.cuda.memory.OutOfMemoryError as exc:
        raise DeviceMemoryError(f"the point set does not fit in free device memory: {exc}") from None
    except _device_errors(cp) as exc:
        raise DeviceError(f"CUDA failed while {doing}: {exc}") from None


class GpuIndex:
    """The device index of validated coordinates (NumPy, copied to the device, or CuPy), searched
    under ``space``'s keys."""

    def __init__(self, coords: Array, space: KeySpace = L2) -> None:
        import cupy as cp

        n, d = (int(x) for x in coords.shape)
        if n > INT32_MAX:
            raise GraphTooLargeError(
                f"the GPU backend indexes points with 32 bits: at most {INT32_MAX} points, got {n}.",
                limit=INT32_MAX,
                actual=n,
            )
        self.cp = cp
        self.n, self.d = n, d
        self.space = space
        self.device: _Device | None = None
        self._events: tuple[Any, Any] | None = None
        self._build_ms: float | None = 0.0 if n == 1 else None
        if n > 1:  # one point needs no index
            with _device_failures(cp, "building the index"):
                begin = cp.cuda.Event()
                begin.record()
                self.device = _Device(cp, coords, space)
                end = cp.cuda.Event()
                end.record()
                self._events = (begin, end)

    @property
    def nbytes(self) -> int:
        return 0 if self.device is None else self.device.nbytes

    def build_ms(self) -> float:
        if self._build_ms is None and self._events is not None:
            begin, end = self._events
            end.synchronize()
            self._build_ms = float(self.cp.cuda.get_elapsed_time(begin, end))
        return self._build_ms or 0.0

    def tree(
        self, min_samples: int, started: float, fresh: bool, on_device: bool, *, keys: bool = False,
        core_scale: float = 1.0,
    ) -> EuclideanTree:  # fmt: skip
        """``keys``: weights and core distances as keys (no square roots); ``core_scale``: the core
        keys multiplied by it for the rounds (``alpha``), reported as they were."""
        cp = self.cp
        timings: dict[str, float] = {}
        if self.device is None:
            empty = np.empty(0, dtype=np.int64)
            timings["index_ms"] = 0.0
            tree = finish_tree(
                empty, empty, np.empty(0), n=self.n, d=self.d, min_samples=min_samples, backend="gpu",
                core2=np.zeros(1) if min_samples > 1 else None, started=started, timings_ms=timings,
                keys=keys,
            )  # fmt: skip
            return _on_device(cp, tree) if on_device else tree
        clock = _Clock(cp)
        if fresh and self._events is not None:
            clock.marks.append(("index_ms", *self._events))
        else:
            timings["index_ms"] = 0.0
        with _device_failures(cp, "computing the tree"):
            return _compute(
                cp,
                self.device,
                min_samples,
                started,
                timings,
                clock,
                on_device,
                keys=keys,
                core_scale=core_scale,
            )


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
    cp: Any,
    dev: _Device,
    k: int,
    started: float,
    timings: dict[str, float],
    clock: _Clock,
    on_device: bool,
    *,
    keys: bool = False,
    core_scale: float = 1.0,
) -> EuclideanTree:
    """The tree of ``min_samples = k`` on ``dev``: the searches' lists and core keys, Borůvka
    rounds, then the canonical order."""
    n = dev.n
    t0 = clock.start()
    min_core2 = dev.min_core2(None)
    packed_nodes = dev.packed()
    dev.pack(min_core2, packed_nodes)
    clock.stop("pack_ms", t0)
    lists = None
    resolved = None
    if LIST > 0:
        # every point's nearest neighbours settle most points' edges in the early rounds, where
        # each point would otherwise search the tree; they also hold core distances up to LIST
        t0 = clock.start()
        lists = dev.neighbour_lists(packed_nodes)
        resolved = cp.empty(n, dtype=cp.uint8)
        clock.stop("lists_ms", t0)
    core2: Array | None = None
    reported: Array | None = None  # the core keys as computed (core2 may be scaled by alpha)
    if k > 1:
        core2, reported, min_core2 = _core_keys(cp, dev, k, lists, packed_nodes, core_scale, clock)
    edges, edge_w2, rounds = _rounds(cp, dev, core2, min_core2, packed_nodes, lists, resolved, clock)
    del lists, resolved
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
    root = cp.copy if keys else cp.sqrt
    weights = root(edge_w2[order])
    core = None
    if core2 is not None:
        core = cp.empty(n, dtype=cp.float64)
        core[dev.orig] = root(reported)
    clock.stop("sort_ms", t0)
    timings.update(clock.totals())
    return _finish(cp, dev, k, (src, dst, weights, core), on_device, started, timings)


def _core_keys(
    cp: Any, dev: _Device, k: int, lists: tuple[Array, Array] | None, packed_nodes: Array | None,
    core_scale: float, clock: _Clock,
) -> tuple[Array, Array, Array]:  # fmt: skip
    """The points' squared core distances (``k > 1``) as the rounds compare them (scaled by
    ``core_scale``) and as computed, and the nodes' core minima; the packed boxes refilled."""
    t0 = clock.start()
    if lists is not None and k <= LIST:
        core2 = cp.ascontiguousarray(lists[1][:, k - 1])  # the k-th smallest: the same value
    elif k <= DEVICE_MAX_K:
        core2 = dev.core_distances(k, packed_nodes)
    else:  # beyond the registers of one thread: the exact host search, same values
        from .kdtree import exact_core_distances

        core2 = cp.asarray(exact_core_distances(dev.host_coords(), k, dev.space))[dev.orig]
    reported = core2
    if core_scale != 1.0:  # alpha: the rounds compare max(alpha core, alpha core', d)
        core2 = core2 * core_scale
    min_core2 = dev.min_core2(core2)
    dev.pack(min_core2, packed_nodes)  # the boxes again, with the node core minima
    clock.stop("core_ms", t0)
    return core2, reported, min_core2


def _rounds(
    cp: Any, dev: _Device, core2: Array | None, min_core2: Array, packed_nodes: Array | None,
    lists: tuple[Array, Array] | None, resolved: Array | None, clock: _Clock,
) -> tuple[Array, Array, int]:  # fmt: skip
    """Borůvka rounds until one component is left: the tree's edges (packed pairs of sorted
    positions, in no order) and squared weights, and the number of rounds."""
    n, d = dev.n, dev.d
    _k = dev.k  # the kernels of the index's build
    node_comp = cp.empty(dev.nodes, dtype=cp.int32)
    grid = _grid(n)
    comp = cp.arange(n, dtype=cp.int32)
    parent = cp.arange(n, dtype=cp.int32)
    bound = cp.empty(n, dtype=cp.uint64)
    pair = cp.empty(n, dtype=cp.uint64)
    best_w = cp.empty(n, dtype=cp.float64)
    best_pair = cp.empty(n, dtype=cp.uint64)
    lower = cp.zeros(n, dtype=cp.float64)  # per point: no lighter edge leaves its component
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
        dev.components(comp, node_comp, packed_nodes)
        _k("reset_round")(grid, (BLOCK,), (np.int32(n), bound, pair))
        _k("seed_bounds")(
            grid, (BLOCK,), (dev.pts, core2, comp, np.int32(n), np.int32(d), bound, *dev.metric_args)
        )
        t1 = clock.start()
        if lists is not None:
            _k(f"neighbour_edges<{LIST}, {'true' if core2 is not None else 'false'}>")(
                grid, (BLOCK,),
                (np.int32(n), core2, comp, dev.orig, lists[0], lists[1], bound, best_w, best_pair, lower,
                 resolved),
            )  # fmt: skip
        nearest(
            grid, (BLOCK,),
            (dev.pts, core2, np.int32(n), np.int32(d), np.int32(dev.num_leaves), dev.lo, dev.hi,
             min_core2, node_comp, packed_nodes, comp, dev.orig, bound, best_w, best_pair, lower, resolved,
             *dev.metric_args),
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
    return edges, edge_w2, rounds


def _finish(
    cp: Any, dev: _Device, k: int, arrays: tuple[Array, Array, Array, Array | None], on_device: bool,
    started: float, timings: dict[str, float],
) -> EuclideanTree:  # fmt: skip
    """The tree of ``(src, dst, weights, core)``, in the canonical order on the device (int32 ids):
    kept there with int64 ids, or copied to the host."""
    src, dst, weights, core = arrays
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
        src=result[0], dst=result[1], weights=result[2], total_weight=total, n=dev.n, dimensions=dev.d,
        min_samples=k, backend="gpu", compute_ms=(time.perf_counter() - started) * 1e3,
        core_distances=result[3], timings_ms=timings,
    )  # fmt: skip
