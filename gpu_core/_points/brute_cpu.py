"""The host's brute-force searches: float64 BLAS distance tiles, every candidate rechecked exactly.

A block of query rows meets the targets tile by tile: ``F = ‖ã‖² + ‖b̃‖² - 2 ã·b̃`` from one matrix
product of the shifted (and, for the device's float16, scaled) coordinates (``filter``: ``|F - s²D|
≤ E(s²D)``), each row's running ``m``-th smallest filtered key ``K̃_(m)`` gives its threshold
``threshold(upper(K̃_(m)))`` (``filter`` says why no true candidate is above it), and every target
at most the threshold is kept. At the end of the block the kept candidates still under the final
threshold are rechecked with the contract's formula (float64, dimension order, no FMA:
``tree.squared_distances``'s arithmetic) and each row keeps its ``m`` least by ``(exact key,
index)``. The brute-force index (:class:`BruteCpuIndex`) is these searches over the points; its
trees are ``brute``'s rounds.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .brute import BruteIndex, boruvka, plan_blocks, split_rows
from .filter import Precision, float16_scale, row_terms, threshold, upper
from .tree import EuclideanTree, finish_tree

Array = np.ndarray[Any, Any]
#: targets per tile (a block's filtered keys: BLOCK x TILE float64, 4 MiB)
TILE = 2048
#: query rows per block
BLOCK = 256


class HostEngine:
    """The brute-force searches over validated float64 coordinates (read-only once built).

    ``precision``: the filter's arithmetic, float64 (the default), or run here so CI tests the
    margins a GPU relies on: the device's float16 (scaled by a power of two, rounded to 11 bits,
    float32 products), float32 or TF32 (inputs truncated to 10 explicit bits); ``tile`` and
    ``block``: targets per tile and query rows per block; ``shards``: the rows of each search
    split into that many runs searched apart (as the device engine splits them over devices).
    """

    xp = np

    def __init__(
        self,
        coords: Array,
        precision: Precision = "float64",
        *,
        tile: int = TILE,
        block: int = BLOCK,
        shards: int = 1,
    ) -> None:
        self.coords = coords
        self.n, self.d = (int(x) for x in coords.shape)
        self.precision, self.tile, self.block, self.shards = precision, tile, block, max(1, shards)
        self.coords_t = np.ascontiguousarray(coords.T)  # the exact recheck reads columns
        self.shift = coords.mean(axis=0)
        shifted = coords - self.shift
        self.norms = np.sqrt(np.einsum("ij,ij->i", shifted, shifted))
        self.radius = float(self.norms.max()) if self.n else 0.0
        largest = float(np.abs(shifted).max()) if shifted.size else 0.0
        scale = float16_scale(largest) if precision == "float16" else 1.0
        if scale is None:  # past float16's reach even scaled (the device's searches run here then)
            self.precision, scale = "float64", 1.0
        self.scale = scale
        self.centered, self.norm2 = self._filter_inputs(shifted)
        self.alpha, self.beta = self._terms(self.norms)

    def _terms(self, norms: Array) -> tuple[Array, Array]:
        alpha, beta = row_terms(np, norms, self.radius, self.scale, self.d, self.precision)
        return alpha, beta

    def _filter_inputs(self, shifted: Array) -> tuple[Array, Array]:
        """Points as the filter's GEMM reads them (shifted, scaled, rounded to its precision) and
        their squared norms, summed in float64 from those rounded values (as the device does)."""
        if self.precision == "float64":
            return shifted, np.einsum("ij,ij->i", shifted, shifted)
        if self.precision == "float16":
            single = (shifted * self.scale).astype(np.float16).astype(np.float32)
        else:
            single = shifted.astype(np.float32)
            if self.precision == "tf32":  # keep 10 explicit mantissa bits (truncation: the worse case)
                single = (single.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
        wide = single.astype(np.float64)
        return single, np.einsum("ij,ij->i", wide, wide)

    @property
    def nbytes(self) -> int:
        arrays = (self.coords_t, self.centered, self.norm2, self.norms, self.alpha, self.beta)
        return int(sum(a.nbytes for a in arrays))

    def _runs(self, count: int) -> list[tuple[int, int]]:
        """The blocks' rows ``[lo, hi)`` in order, shard by shard (``split_rows``)."""
        starts = np.arange(0, count, self.block)
        sizes = np.minimum(starts + self.block, count) - starts
        out: list[tuple[int, int]] = []
        for first, last in split_rows(sizes, self.shards):
            out.extend((int(starts[b]), int(starts[b] + sizes[b])) for b in range(first, last))
        return out

    def nearest(self, width: int) -> tuple[Array, Array]:
        ids = np.empty((self.n, width), dtype=np.int64)
        keys = np.empty((self.n, width))
        for lo, hi in self._runs(self.n):
            sl = slice(lo, hi)
            ids[sl], keys[sl] = self._top(
                self.centered[sl], self.norm2[sl], self.coords_t[:, sl], width, _Targets(self),
                [(0, self.n)], lo, terms=(self.alpha[sl], self.beta[sl]),
            )  # fmt: skip
        return ids, keys

    def products_only(self) -> float:
        """Every tile's matrix product of every block, nothing selected: the filter's arithmetic
        alone, the floor under any search's time. Returns a checksum."""
        total = 0.0
        for lo in range(0, self.n, self.block):
            block = self.centered[lo : lo + self.block]
            for s in range(0, self.n, self.tile):
                total += float((block @ self.centered[s : s + self.tile].T)[0, 0])
        return total

    def query(self, queries: Array, width: int) -> tuple[Array, Array]:
        count = int(queries.shape[0])
        ids = np.empty((count, width), dtype=np.int64)
        keys = np.empty((count, width))
        shifted = queries - self.shift
        centered, norm2 = self._filter_inputs(shifted)
        alpha, beta = self._terms(np.sqrt(np.einsum("ij,ij->i", shifted, shifted)))
        queries_t = np.ascontiguousarray(queries.T)
        for lo, hi in self._runs(count):
            sl = slice(lo, hi)
            ids[sl], keys[sl] = self._top(
                centered[sl], norm2[sl], queries_t[:, sl], width, _Targets(self), [(0, self.n)], 0,
                terms=(alpha[sl], beta[sl]),
            )  # fmt: skip
        return ids, keys

    def outside(self, rows: Array, comp: Array, core2: Array | None, width: int) -> tuple[Array, Array]:
        order = np.argsort(comp, kind="stable")  # targets grouped by component
        comp_sorted = comp[order]
        scaled = None if core2 is None else core2 * (self.scale * self.scale)  # a power of two: exact
        targets = _Targets(self, order, comp_sorted, None if core2 is None else core2[order], scaled)
        labels = np.arange(int(comp.max()) + 1)
        first_at = np.searchsorted(comp_sorted, labels, side="left")
        last_at = np.searchsorted(comp_sorted, labels, side="right")
        by_comp = rows[np.argsort(comp[rows], kind="stable")]
        ids = np.empty((rows.size, width), dtype=np.int64)
        keys = np.empty((rows.size, width))
        place = np.empty(self.n, dtype=np.int64)
        place[rows] = np.arange(rows.size)
        planned = plan_blocks(comp[by_comp], self.block)
        sizes = np.array([e - s for s, e, _ in planned], dtype=np.int64)
        for first, last in split_rows(sizes, self.shards):
            for s, e, c in planned[first:last]:
                q = by_comp[s:e]
                # a block of one component skips that component's targets; a mixed block masks them
                ranges = [(0, int(first_at[c])), (int(last_at[c]), self.n)] if c >= 0 else [(0, self.n)]
                ids[place[q]], keys[place[q]] = self._top(
                    self.centered[q], self.norm2[q], self.coords_t[:, q], width, targets, ranges, -1,
                    q_core=None if core2 is None else core2[q], q_comp=comp[q],
                    terms=(self.alpha[q], self.beta[q]),
                )  # fmt: skip
        return ids, keys

    def _top(
        self,
        qc: Array,
        qn2: Array,
        qx_t: Array,
        width: int,
        targets: _Targets,
        ranges: list[tuple[int, int]],
        first_at: int,
        *,
        terms: tuple[Array, Array],
        q_core: Array | None = None,
        q_comp: Array | None = None,
    ) -> tuple[Array, Array]:
        """The ``width`` least ``(exact key, id)`` targets of each query row (``qc``, ``qn2``: the
        rows as the filter reads them and their squared norms; ``qx_t``: their float64 coordinates,
        transposed; ``terms``: their margins' ``(alpha, beta)``)."""
        q = int(qc.shape[0])
        alpha, beta = terms
        scale2 = self.scale * self.scale
        running = np.full((q, width), np.inf)  # the width least filtered keys seen so far
        limit = np.full(q, np.inf)  # the threshold: threshold(upper(m-th filtered key))
        kept: list[tuple[Array, Array, Array]] = []
        for s, e in _tiles(ranges, first_at, self.tile):
            product = (qc @ targets.centered[s:e].T).astype(np.float64)
            f = qn2[:, None] + targets.norm2[None, s:e] - 2.0 * product
            if targets.core2 is not None:
                assert q_core is not None and targets.scaled is not None
                f = np.maximum(np.maximum(q_core[:, None] * scale2, targets.scaled[None, s:e]), f)
            if targets.comp is not None:
                assert q_comp is not None
                f[q_comp[:, None] == targets.comp[None, s:e]] = np.inf  # own component: not a candidate
            running = np.partition(np.concatenate([running, f], axis=1), width - 1, axis=1)[:, :width]
            limit = np.minimum(
                limit, threshold(np, upper(np, running[:, width - 1], alpha, beta), alpha, beta)
            )
            r, c = np.nonzero((f <= limit[:, None]) & np.isfinite(f))
            kept.append((r, c + s, f[r, c]))
        r, pos, f = (np.concatenate([k[i] for k in kept]) for i in range(3))
        keep = f <= limit[r]  # the final thresholds: what was kept under an earlier one may go
        r, pos = r[keep], pos[keep]
        j = targets.ids(pos)
        key = np.zeros(r.size)
        for qcol, col in zip(qx_t, self.coords_t, strict=True):  # the contract's formula
            diff = qcol[r] - col[j]
            key = key + diff * diff
        if q_core is not None:
            assert targets.core2 is not None
            key = np.maximum(np.maximum(q_core[r], targets.core2[pos]), key)
        order = np.lexsort((j, key, r))
        r, j, key = r[order], j[order], key[order]
        counts = np.bincount(r, minlength=q)
        rank = np.arange(r.size) - (np.cumsum(counts) - counts)[r]
        sel = rank < width
        ids = np.full((q, width), -1, dtype=np.int64)
        keys = np.full((q, width), np.inf)
        ids[r[sel], rank[sel]] = j[sel]
        keys[r[sel], rank[sel]] = key[sel]
        return ids, keys


class _Targets:
    """The points a search compares with, in a given order (a permutation of the point ids)."""

    def __init__(
        self,
        engine: HostEngine,
        order: Array | None = None,
        comp: Array | None = None,
        core2: Array | None = None,
        scaled: Array | None = None,
    ) -> None:
        self.order = order
        self.centered = engine.centered if order is None else engine.centered[order]
        self.norm2 = engine.norm2 if order is None else engine.norm2[order]
        self.comp = comp
        self.core2 = core2  # by position, unscaled (the exact keys')
        self.scaled = None if scaled is None or order is None else scaled[order]  # by position, scaled

    def ids(self, pos: Array) -> Array:
        return pos if self.order is None else self.order[pos]


def _tiles(ranges: list[tuple[int, int]], first_at: int, tile: int) -> list[tuple[int, int]]:
    """The ranges cut into tiles, the one holding ``first_at`` first (a block's own points: its
    nearest are likely there, so the threshold is tight early)."""
    tiles = [(s, min(s + tile, e)) for lo, e in ranges for s in range(lo, e, tile)]
    return sorted(tiles, key=lambda t: not t[0] <= first_at < t[1])


class BruteCpuIndex(BruteIndex):
    """The CPU backend's index of points of many coordinates: the brute-force searches over them.

    ``owns_coords``: the coordinates are a copy made for the index (counted in ``nbytes``);
    ``engine``: :class:`HostEngine`'s options (the tests run the device's filter precisions here).
    """

    def __init__(self, coords: Array, *, owns_coords: bool, **engine: Any) -> None:
        started = time.perf_counter()
        self.coords = coords
        self.n, self.d = (int(x) for x in coords.shape)
        self.engine = HostEngine(coords, **engine)
        self._owns_coords = owns_coords
        self._build_ms = (time.perf_counter() - started) * 1e3

    @property
    def nbytes(self) -> int:
        return self.engine.nbytes + (int(self.coords.nbytes) if self._owns_coords else 0)

    def build_ms(self) -> float:
        return self._build_ms

    def tree(
        self, min_samples: int, started: float, fresh: bool, on_device: bool, *, keys: bool = False,
        core_scale: float = 1.0,
    ) -> EuclideanTree:  # fmt: skip
        del on_device  # the CPU backend's trees are NumPy arrays
        return host_brute_tree(self, min_samples, started, fresh, keys, core_scale)

    def nearest(self, k: int) -> tuple[Array, Array]:
        return self.engine.nearest(k)

    def query(self, queries: Array, k: int) -> tuple[Array, Array]:
        return self.engine.query(queries, k)

    def coordinates(self) -> Array:
        return self.coords


def host_brute_tree(
    index: Any, k: int, started: float, fresh: bool, keys: bool, core_scale: float
) -> EuclideanTree:
    """The tree of a host brute-force index (its ``engine``, ``n``, ``d`` and build time)."""
    timings: dict[str, float] = {"index_ms": index.build_ms() if fresh else 0.0}
    n, d = index.n, index.d
    if n == 1:
        empty = np.empty(0, dtype=np.int64)
        return finish_tree(
            empty, empty, np.empty(0), n=n, d=d, min_samples=k, backend="cpu",
            core2=np.zeros(1) if k > 1 else None, started=started, timings_ms=timings, keys=keys,
        )  # fmt: skip
    lo, hi, w2, core2 = boruvka(index.engine, k, timings, core_scale)
    return finish_tree(
        lo, hi, w2, n=n, d=d, min_samples=k, core2=core2, backend="cpu", started=started,
        timings_ms=timings, keys=keys,
    )  # fmt: skip
