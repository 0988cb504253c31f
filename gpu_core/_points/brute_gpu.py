"""The device's brute-force searches: cuBLAS distance tiles, every candidate rechecked exactly.

The same searches as ``brute_cpu`` (and the same rounds, ``brute``), on the device: a block of
``BLOCK`` query rows meets the targets ``TILE`` at a time. cuBLAS multiplies the shifted float32
coordinates (TF32 tensor cores by default, or IEEE float32: ``precision``); ``kernels/brute.cu``
then gives each row a threshold from the first tile (``tile_threshold``: while a row has none),
appends the tile's targets under it to the row's buffer (``tile_candidates``), and rechecks the
buffer exactly in float64, coordinate order, no FMA, merging it into the row's list of the ``m``
least ``(key, id)`` (``flush_candidates``), which tightens the threshold to the m-th exact key
plus the row's error bound (``filter``). A buffer that fills is flushed and its row scanned again
from where it stopped, so any number of candidates (duplicates, ties) is exact.

Device memory for ``n`` points of ``d`` coordinates (:func:`workspace_bytes` counts it): the
index keeps the float64 points (``8nd``; the exact recheck reads them) and the float32 filter
copy (``4nd``); a tree adds the lists, a permuted filter copy for the searches outside a
component (``4nd``) and one tile of products (``4 BLOCK TILE``: 512 MiB). At 10^6 x 1,024 that
is 12 GB resident and about 17 GB at the peak, within an H100's 80 GB.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .._backend.kernels import BRUTE_FILE, kernel
from .brute import BruteIndex, boruvka, finish_order, list_width, plan_blocks
from .filter import Precision, coefficient
from .tree import EuclideanTree

Array = Any
#: query rows per block and targets per tile (a tile of products: BLOCK x TILE float32, 512 MiB)
BLOCK = 8192
TILE = 16384
#: candidates a row's buffer holds between two flushes, and the longest list the flush sorts
#: (BRUTE_MERGE in kernels/brute.cu is their sum, 512)
CAP = 256
MAX_WIDTH = 256
#: per-lane list of tile_threshold (BRUTE_LANE_LIST): thresholds for m <= 32 x 8
LANE_LIST = 8
WARPS = 4  # warps per block of the kernels (flush_candidates keeps four rows' sort in shared memory)
#: cuBLAS compute types of CuPy's matmul (cupy._core._routines_linalg): IEEE float32, or TF32
_PEDANTIC, _TF32 = 2, 7


def _k(name: str) -> Any:
    return kernel(name, BRUTE_FILE)


def _grid(rows: int) -> tuple[int]:
    return (max(1, min(-(-rows // WARPS), 65535)),)


class _Products:
    """cuBLAS matrix products in the filter's precision (CuPy's float32 compute type set around
    each call, then put back). Where CuPy does not let it be set, the products may use TF32 and
    the TF32 bound is the one that holds."""

    def __init__(self, cp: Any, precision: Precision) -> None:
        self.cp = cp
        self.precision: Precision = precision
        try:
            from cupy._core import _routines_linalg as linalg

            self._linalg: Any = linalg
            linalg.get_compute_type(np.float32)
        except (ImportError, AttributeError):
            self._linalg = None
            self.precision = "tf32"

    def __call__(self, a: Array, b: Array) -> Array:
        if self._linalg is None:
            return self.cp.matmul(a, b.T)
        before = self._linalg.get_compute_type(np.float32)
        self._linalg.set_compute_type(np.float32, _TF32 if self.precision == "tf32" else _PEDANTIC)
        try:
            return self.cp.matmul(a, b.T)
        finally:
            self._linalg.set_compute_type(np.float32, before)


class DeviceEngine:
    """The brute-force searches over validated float64 coordinates on the device (CuPy).

    ``precision``: the filter's products, TF32 (the default) or IEEE float32; ``tile``, ``block``,
    ``cap``: targets per tile, query rows per block, a row's buffer (32 to 256; the tests make
    them small, so that tiles, blocks and full buffers meet every path on small sets).
    """

    def __init__(
        self,
        coords: Array,
        precision: Precision = "tf32",
        *,
        tile: int = TILE,
        block: int = BLOCK,
        cap: int = CAP,
    ) -> None:
        import cupy as cp

        if not 32 <= cap <= CAP:
            raise ValueError(f"cap must lie between 32 and {CAP}; got {cap}.")
        self.tile, self.block, self.cap = tile, block, cap
        self.xp = cp
        self.coords = cp.ascontiguousarray(cp.asarray(coords, dtype=cp.float64))
        self.n, self.d = (int(x) for x in self.coords.shape)
        self.shift = self.coords.mean(axis=0)
        self.single, self.norm2 = self._filter_inputs(self.coords)
        self.radius = float(cp.sqrt(self.norm2.max()))
        self.products = _Products(cp, precision)
        self.coef = coefficient(self.d, self.products.precision)

    def _filter_inputs(self, x: Array) -> tuple[Array, Array]:
        """The filter's float32 copy of shifted points and their squared norms, summed in float64
        from those float32 values (tensor cores truncate to TF32 inside the product only)."""
        cp = self.xp
        single = cp.ascontiguousarray((x - self.shift).astype(cp.float32))
        wide = single.astype(cp.float64)
        return single, cp.einsum("ij,ij->i", wide, wide)

    @property
    def nbytes(self) -> int:
        return int(self.coords.nbytes + self.single.nbytes + self.norm2.nbytes)

    def _host(self) -> Any:
        """The host's engine over the same points: lists wider than the flush sorts (exact too)."""
        from .brute_cpu import HostEngine

        return HostEngine(self.coords.get(), self.products.precision)

    def nearest(self, width: int) -> tuple[Array, Array]:
        cp = self.xp
        if width > MAX_WIDTH:
            ids, keys = self._host().nearest(width)
            return cp.asarray(ids), cp.asarray(keys)
        ids = cp.empty((self.n, width), dtype=cp.int64)
        keys = cp.empty((self.n, width), dtype=cp.float64)
        targets = _Targets(self)
        for lo in range(0, self.n, self.block):
            sl = slice(lo, min(lo + self.block, self.n))
            ids[sl], keys[sl] = self._top(
                self.single[sl], self.norm2[sl], self.coords[sl], width, targets, [(0, self.n)], lo
            )
        return ids, keys

    def query(self, queries: Array, width: int) -> tuple[Array, Array]:
        cp = self.xp
        if width > MAX_WIDTH:
            ids, keys = self._host().query(queries.get(), width)
            return cp.asarray(ids), cp.asarray(keys)
        count = int(queries.shape[0])
        exact = cp.ascontiguousarray(queries, dtype=cp.float64)
        single, norm2 = self._filter_inputs(exact)
        ids = cp.empty((count, width), dtype=cp.int64)
        keys = cp.empty((count, width), dtype=cp.float64)
        targets = _Targets(self)
        for lo in range(0, count, self.block):
            sl = slice(lo, min(lo + self.block, count))
            ids[sl], keys[sl] = self._top(single[sl], norm2[sl], exact[sl], width, targets, [(0, self.n)], 0)
        return ids, keys

    def outside(self, rows: Array, comp: Array, core2: Array | None, width: int) -> tuple[Array, Array]:
        cp = self.xp
        if width > MAX_WIDTH:
            ids, keys = self._host().outside(
                rows.get(), comp.get(), None if core2 is None else core2.get(), width
            )
            return cp.asarray(ids), cp.asarray(keys)
        order = cp.argsort(comp)  # stable: targets grouped by component
        comp_sorted = comp[order]
        targets = _Targets(self, order, comp_sorted, core2)
        labels = cp.arange(int(comp.max()) + 1)
        first = cp.searchsorted(comp_sorted, labels, side="left").get()
        last = cp.searchsorted(comp_sorted, labels, side="right").get()
        by_comp = rows[cp.argsort(comp[rows])]
        ids = cp.empty((int(rows.size), width), dtype=cp.int64)
        keys = cp.empty((int(rows.size), width), dtype=cp.float64)
        place = cp.empty(self.n, dtype=cp.int64)
        place[rows] = cp.arange(int(rows.size))
        for s, e, c in plan_blocks(comp[by_comp].get(), self.block):
            q = by_comp[s:e]
            ranges = [(0, int(first[c])), (int(last[c]), self.n)] if c >= 0 else [(0, self.n)]
            ids[place[q]], keys[place[q]] = self._top(
                self.single[q], self.norm2[q], self.coords[q], width, targets, ranges, -1,
                q_core=None if core2 is None else core2[q], q_comp=comp[q].astype(cp.int32),
            )  # fmt: skip
        return ids, keys

    def products_only(self) -> float:
        """Every tile's product of every block, nothing selected (``bench.highdim``'s figure)."""
        total = 0.0
        for lo in range(0, self.n, self.block):
            block = self.single[lo : lo + self.block]
            for s in range(0, self.n, self.tile):
                total += float(self.products(block, self.single[s : s + self.tile])[0, 0])
        return total

    def _top(
        self,
        q_single: Array,
        qn2: Array,
        q_exact: Array,
        width: int,
        targets: _Targets,
        ranges: list[tuple[int, int]],
        first_at: int,
        *,
        q_core: Array | None = None,
        q_comp: Array | None = None,
    ) -> tuple[Array, Array]:
        """The ``width`` least ``(exact key, id)`` targets of each query row (the rows' float32
        filter copy, squared norms and float64 coordinates)."""
        cp = self.xp
        q = int(q_single.shape[0])
        q_single = cp.ascontiguousarray(q_single)
        q_exact = cp.ascontiguousarray(q_exact)
        margin = self.coef * (cp.sqrt(qn2) + self.radius) ** 2
        theta = cp.full(q, cp.inf)
        list_ids = cp.full((q, width), -1, dtype=cp.int64)
        list_keys = cp.full((q, width), cp.inf)
        cap = self.cap
        buffer = cp.empty((q, cap), dtype=cp.int32)
        count = cp.zeros(q, dtype=cp.int32)
        resume = cp.empty(q, dtype=cp.int32)
        overflow = cp.zeros(1, dtype=cp.int32)
        grid, block = _grid(q), (32 * WARPS,)
        core_args = (q_core, targets.core2)
        comp_args = (q_comp, targets.comp)
        for s, e in _tiles(ranges, first_at, self.tile):
            tile = cp.ascontiguousarray(self.products(q_single, targets.single[s:e]))
            cols = e - s
            common = (tile, np.int32(q), np.int32(cols), np.int64(cols), np.int32(s), qn2, targets.norm2,
                      *core_args, *comp_args)  # fmt: skip
            _k("tile_threshold")(grid, block, (*common, margin, np.int32(width), theta))
            resume.fill(0)
            while True:
                overflow.fill(0)
                _k("tile_candidates")(
                    grid, block, (*common, theta, np.int32(cap), buffer, count, resume, overflow)
                )
                _k("flush_candidates")(
                    grid, block,
                    (np.int32(q), np.int32(self.d), q_exact, self.coords, targets.order, q_core,
                     targets.core2_by_id, np.int32(cap), buffer, count, np.int32(width), list_ids,
                     list_keys, theta, margin),
                )  # fmt: skip
                if not int(overflow.get()[0]):
                    break
            # both names hold the tile: the next tile's products must not meet this one in the pool
            del tile, common
        return list_ids, list_keys


class _Targets:
    """The points a search compares with, in a given order (a permutation of the point ids)."""

    def __init__(
        self,
        engine: DeviceEngine,
        order: Array | None = None,
        comp: Array | None = None,
        core2: Array | None = None,
    ) -> None:
        self.order = order  # target position -> point id (int64), None: the identity
        self.single = engine.single if order is None else engine.single[order]
        self.norm2 = engine.norm2 if order is None else engine.norm2[order]
        self.comp = None if comp is None else comp.astype(engine.xp.int32)
        self.core2 = None if core2 is None else (core2 if order is None else core2[order])
        self.core2_by_id = core2


def _tiles(ranges: list[tuple[int, int]], first_at: int, tile: int) -> list[tuple[int, int]]:
    tiles = [(s, min(s + tile, e)) for lo, e in ranges for s in range(lo, e, tile)]
    return sorted(tiles, key=lambda t: not t[0] <= first_at < t[1])


def workspace_bytes(n: int, d: int, min_samples: int) -> tuple[int, int]:
    """(resident, peak) device bytes of the brute-force index of ``n`` points of ``d`` coordinates
    and of a tree of ``min_samples`` computed on it (see the module's docstring)."""
    resident = 12 * n * d + 8 * n
    width = list_width(max(n, 1), min_samples)
    block = min(n, BLOCK)
    lists = n * width * (8 + 8) * 3  # ids and keys, the neighbour distances and a sorted copy
    rounds = n * width * 17 + 96 * n  # a round's gathers over the lists and its per-point arrays
    search = 4 * n * d + 24 * n  # outside(): the permuted filter copy, norms, cores, components
    block_work = block * (4 * min(n, TILE) + 8 * d + 4 * d + width * 16 + CAP * 4 + 64)
    return resident, resident + lists + max(rounds, search) + block_work


class BruteGpuIndex(BruteIndex):
    """The GPU backend's index of points of many coordinates: the brute-force searches over them."""

    def __init__(self, coords: Array, **engine: Any) -> None:
        import cupy as cp

        from .gpu import _device_failures

        self.cp = cp
        begin = cp.cuda.Event()
        begin.record()
        with _device_failures(cp, "building the index"):
            self.engine = DeviceEngine(coords, **engine)
        end = cp.cuda.Event()
        end.record()
        self._events = (begin, end)
        self._build_ms: float | None = None
        self.n, self.d = self.engine.n, self.engine.d

    @property
    def nbytes(self) -> int:
        return self.engine.nbytes

    def build_ms(self) -> float:
        if self._build_ms is None:
            begin, end = self._events
            end.synchronize()
            self._build_ms = float(self.cp.cuda.get_elapsed_time(begin, end))
        return self._build_ms

    def tree(
        self, min_samples: int, started: float, fresh: bool, on_device: bool, *, keys: bool = False,
        core_scale: float = 1.0,
    ) -> EuclideanTree:  # fmt: skip
        return device_brute_tree(self, min_samples, started, fresh, on_device, keys, core_scale)

    def nearest(self, k: int) -> tuple[Array, Array]:
        return self.engine.nearest(k)

    def query(self, queries: Array, k: int) -> tuple[Array, Array]:
        return self.engine.query(queries, k)

    def coordinates(self) -> Array:
        return self.engine.coords


def device_brute_tree(
    index: Any, k: int, started: float, fresh: bool, on_device: bool, keys: bool, core_scale: float
) -> EuclideanTree:
    """The tree of a device brute-force index (its ``engine``, ``cp``, ``n``, ``d``, build time)."""
    from .gpu import _device_failures

    cp, n, d = index.cp, index.n, index.d
    timings: dict[str, float] = {"index_ms": index.build_ms() if fresh else 0.0}
    if n == 1:
        src = cp.empty(0, dtype=cp.int64)
        lo = hi = src
        w2 = cp.empty(0)
        core2 = cp.zeros(1) if k > 1 else None
    else:
        with _device_failures(cp, "computing the tree"):
            lo, hi, w2, core2 = boruvka(index.engine, k, timings, core_scale)
    t0 = time.perf_counter()
    order = finish_order(cp, lo, hi, w2, n)
    root = cp.copy if keys else cp.sqrt
    src, dst, weights = lo[order], hi[order], root(w2[order])
    core = None if core2 is None else root(core2)
    if not on_device:
        src, dst, weights = src.get(), dst.get(), weights.get()
        core = None if core is None else core.get()
    total = float(weights.sum())
    timings["host_ms"] = (time.perf_counter() - t0) * 1e3
    return EuclideanTree(
        src=src, dst=dst, weights=weights, total_weight=total, n=n, dimensions=d, min_samples=k,
        backend="gpu", compute_ms=(time.perf_counter() - started) * 1e3, core_distances=core,
        timings_ms=timings,
    )  # fmt: skip
