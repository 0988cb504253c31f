"""The graph's structure on the device: a CSR holding each edge once, in the row of its smaller
endpoint, in the order of the edges' ranks.

:class:`GpuCsr` holds what a build makes of an edge list (the weights in input order, the map from
rank to edge id, the rows, each row's split at the filter threshold, the heavy rows' chunks) and
keeps it in one of the two orders (``order``): a new order or new weights re-rank the edges in
place, the topology stays. :class:`~gpu_core._graphs.gpu.GpuGraph` runs ECL-MST on it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._backend.kernels import kernel
from ..errors import GraphTooLargeError
from .layout import MAX_GPU_EDGES, SlotLayout, csr_pieces, slot_layout
from .order import Objective, edge_order
from .validate import validate_edges

INT32_MAX = 2**31 - 1
BLOCK = 256
#: rows with at least this many slots are cut into chunks of this many, one warp each
CHUNK_SLOTS = 256
#: graphs of at least this many edges hand the pool's cached blocks back between build steps:
#: a freed sort buffer split to serve a smaller array can no longer serve the worklists (the
#: largest graphs then ran out of memory with much of it cached in pieces)
RELEASE_FROM_EDGES = 1 << 26


def cupy_module() -> Any:
    import cupy

    return cupy


def device_errors() -> tuple[type[BaseException], ...]:
    cp = cupy_module()
    return (cp.cuda.runtime.CUDARuntimeError, cp.cuda.driver.CUDADriverError)


def _narrow_ids(cp: Any, ids: Any) -> Any:
    """Validated vertex ids as int32 or int64, as given where they already are (no copy)."""
    if ids.dtype in (cp.int32, cp.int64):
        return ids
    return ids.astype(cp.int32 if ids.dtype.itemsize <= 4 else cp.int64)  # in [0, n): exact


def _id_type(ids: Any) -> str:
    """The kernels' template argument for an int32 or int64 id array."""
    return "int" if ids.dtype.itemsize == 4 else "long long"


def take_by_u32(cp: Any, table: Any, index: Any) -> Any:
    """``table[index]`` for a uint32 index (bool or uint32 table), without an int64 copy of the index."""
    out = cp.empty(index.shape[0], dtype=table.dtype)
    if out.size:
        word = "unsigned char" if table.dtype.itemsize == 1 else "unsigned"
        grid = (max(1, min(-(-out.size // BLOCK), 65535)),)
        kernel(f"take_by_u32<{word}>")(grid, (BLOCK,), (table, index, np.int64(out.size), out))
    return out


def device_weight_bound(weight: Any) -> int | None:
    """The largest weight magnitude (None for floats), for exact forest totals."""
    if weight.dtype.kind not in "iu":
        return None
    if not weight.shape[0]:
        return 0
    return max(abs(int(weight.min())), abs(int(weight.max())))


def _check_gpu_limits(n: int, m: int) -> None:
    """The GPU backend's 32-bit vertex index and edge ranks: a :class:`GraphTooLargeError` beyond."""
    if n > INT32_MAX:
        raise GraphTooLargeError(
            f"the GPU backend indexes vertices with 32 bits: at most {INT32_MAX} vertices, got {n}.",
            limit=INT32_MAX,
            actual=n,
        )
    if m > MAX_GPU_EDGES:
        raise GraphTooLargeError(
            f"the GPU backend ranks edges with 32 bits: at most {MAX_GPU_EDGES} edges, got {m}.",
            limit=MAX_GPU_EDGES,
            actual=m,
        )


class GpuCsr:
    """A graph's CSR on the current CUDA device, in the order of ``_objective``.

    Built by :meth:`_build_csr` on the stream and with the block limit its subclass sets up.
    """

    device_id: int
    num_vertices: int
    num_edges: int
    #: loop-free edges: the ranks 0 .. num_loop_free - 1
    num_loop_free: int
    #: the weights in input (edge-id) order
    weight: Any
    weight_bound: int | None
    rank_to_id: Any
    layout: SlotLayout
    threshold: int
    row_ptr: Any
    split: Any
    adj: Any
    heavy_chunks: Any
    #: the order the CSR's ranks follow now ("min": (weight, id); "max": (-weight, id))
    _objective: Objective
    _stream: Any
    _max_blocks: int

    def _build_csr(self, cp: Any, src: Any, dst: Any, weight: Any, num_vertices: int | None) -> None:
        """Validate, rank and build the CSR, holding little more than the finished CSR at any time:
        the ranking sort runs before anything of the graph's size but the weights exists; the
        endpoints by rank replace the input ids; the CSR is filled one chunk of rows at a time (its
        scratch is one chunk's keys)."""
        edges = validate_edges(cp, src, dst, weight, num_vertices, widen=False)
        n = edges.num_vertices
        m = int(edges.weight.shape[0])
        _check_gpu_limits(n, m)
        self.num_vertices = n
        self.num_edges = m
        # Input order, for the forest's weights; a copy, so the caller may reuse its own array.
        self.weight = edges.weight.copy() if edges.weight is weight else edges.weight
        src_ids, dst_ids = _narrow_ids(cp, edges.src), _narrow_ids(cp, edges.dst)
        del edges  # device copies of host input go as soon as the endpoints by rank exist

        # Rank edges by (weight, edge_id), self-loops left out: rank_to_id (uint32).
        self.rank_to_id = self._rank(cp, src_ids, dst_ids)
        self.weight_bound = device_weight_bound(self.weight)
        k = int(self.rank_to_id.shape[0])
        self.num_loop_free = k
        self.layout = slot_layout(n, k)
        self.threshold = self.layout.threshold
        slot_dtype = cp.int64 if self.layout.wide else cp.int32

        # Endpoints by rank; the input ids are not needed after this.
        self._release(cp)
        u = self._gather_ids(cp, src_ids, k)
        v = self._gather_ids(cp, dst_ids, k)
        del src_ids, dst_ids

        self._build_rows(cp, u, v, k, slot_dtype)

        # CSR of each edge once (the row of its smaller endpoint; ECL-MST takes every edge from that
        # end only), rows in ascending rank order, one chunk of rows at a time.
        self._release(cp)
        self.adj = cp.empty((k, 2), dtype=cp.int32)
        self._fill_rows(cp, u, v, k)
        del u, v
        self._release(cp)
        self.heavy_chunks = self._heavy_chunks(cp, slot_dtype)
        self._release(cp)

    def _build_rows(self, cp: Any, u: Any, v: Any, k: int, slot_dtype: Any) -> None:
        """The rows from the endpoints by rank: degrees and light-slot counts (rank < threshold)
        -> ``row_ptr`` and ``split``."""
        n = self.num_vertices
        degree = cp.zeros(max(n, 1), dtype=cp.uint32)
        light = cp.zeros(max(n, 1), dtype=cp.uint32)
        if k:
            kernel("count_rows")(
                self._grid(k), (BLOCK,), (u, v, np.int64(k), np.uint32(self.threshold), degree, light)
            )
        self.row_ptr = cp.zeros(n + 1, dtype=slot_dtype)
        cp.cumsum(degree[:n], dtype=slot_dtype, out=self.row_ptr[1:])
        del degree
        self.split = self.row_ptr[:-1] + light[:n].astype(slot_dtype)
        del light

    def _rank(self, cp: Any, src: Any, dst: Any) -> Any:
        """Edge ids of the loop-free edges in ``(weight, edge_id)`` order, as uint32.

        4-byte weights: one sort of 64-bit keys {order bits of the weight : edge id} (8 bytes
        per edge, sorted in place), self-loops keyed last. 8-byte weights do not fit such a
        key: a stable argsort of the weights, then the self-loops filtered out.
        """
        m = self.num_edges
        weight = self.weight
        loops = int(cp.count_nonzero(src == dst)) if m else 0
        k = m - loops
        if weight.dtype.itemsize == 4:
            keys = cp.empty(m, dtype=cp.uint64)
            if m:
                name = f"rank_keys<{'float' if weight.dtype.kind == 'f' else 'int'}, {_id_type(src)}>"
                kernel(name)(self._grid(m), (BLOCK,), (weight, src, dst, np.int64(m), keys))
                keys.sort()
            self._release(cp)  # the sort's scratch, before anything is carved out of it
            rank_to_id = cp.empty(k, dtype=cp.uint32)
            if k:
                kernel("key_ids")(self._grid(k), (BLOCK,), (keys, np.int64(k), rank_to_id))
            del keys
            return rank_to_id
        order = edge_order(cp, weight, "min")
        if loops:
            order = order[(src != dst)[order]]
        return order.astype(cp.uint32)

    def _release(self, cp: Any) -> None:
        """Hand the pool's wholly free blocks back to the device (giant graphs only, see
        ``RELEASE_FROM_EDGES``), once the stream's work that used them is done."""
        if self.num_edges >= RELEASE_FROM_EDGES:
            self._stream.synchronize()
            cp.get_default_memory_pool().free_all_blocks()

    def _gather_ids(self, cp: Any, ids: Any, k: int) -> Any:
        """``ids[rank_to_id]`` as int32: one endpoint of every rank."""
        out = cp.empty(k, dtype=cp.int32)
        if k:
            kernel(f"gather_ids<{_id_type(ids)}>")(
                self._grid(k), (BLOCK,), (ids, self.rank_to_id, np.int64(k), out)
            )
        return out

    def _fill_rows(self, cp: Any, u: Any, v: Any, k: int) -> None:
        """``adj`` row by row: the slots of each of ``csr_pieces`` chunks of whole rows are
        bucketed as keys {row : rank}, sorted, and written with their neighbours."""
        if not k:
            return
        n = self.num_vertices
        pieces = csr_pieces(k)
        slots = k
        targets = cp.arange(1, pieces, dtype=cp.int64) * (slots // pieces)
        cuts = cp.searchsorted(self.row_ptr, targets.astype(self.row_ptr.dtype), side="left").astype(cp.int64)
        bounds = [0, *(int(c) for c in cuts.get()), n]
        bounds = sorted(set(bounds))
        starts = self.row_ptr[cp.asarray(bounds, dtype=cp.int64)].get().astype(np.int64)
        largest = int(np.diff(starts).max())
        keys = cp.empty(max(largest, 1), dtype=cp.uint64)
        count = cp.zeros(1, dtype=cp.uint64)
        slot = np.int64 if self.layout.wide else np.int32
        for lo, hi, first, last in zip(bounds[:-1], bounds[1:], starts[:-1], starts[1:], strict=True):
            size = int(last - first)
            if not size:
                continue
            count.fill(0)
            kernel("bucket_slots")(
                (self._max_blocks,), (BLOCK,),
                (u, v, np.int64(k), np.int32(lo), np.int32(hi), keys, count),
            )  # fmt: skip
            chunk = keys[:size]
            chunk.sort()
            kernel(f"write_slots<{self.layout.slot}>")(
                self._grid(size), (BLOCK,),
                (chunk, slot(size), slot(first), np.int32(lo), u, v, self.adj),
            )  # fmt: skip
            del chunk
        del keys, count

    def _heavy_chunks(self, cp: Any, slot_dtype: Any) -> Any:
        """{row, first slot} of every CHUNK_SLOTS-slot chunk of the rows with at least CHUNK_SLOTS slots."""
        degree = cp.diff(self.row_ptr)
        heavy = cp.flatnonzero(degree >= CHUNK_SLOTS).astype(slot_dtype)
        per_row = (degree[heavy] + CHUNK_SLOTS - 1) // CHUNK_SLOTS
        ends = cp.cumsum(per_row)
        total = int(ends[-1]) if heavy.size else 0
        chunks = cp.empty((total, 2), dtype=slot_dtype)
        if total:
            task = cp.arange(total, dtype=slot_dtype)
            which = cp.searchsorted(ends, task, side="right")
            chunks[:, 0] = heavy[which]
            chunks[:, 1] = self.row_ptr[heavy[which]] + (task - (ends[which] - per_row[which])) * CHUNK_SLOTS
        return chunks

    @property
    def wide(self) -> bool:
        """Whether this graph indexes its slots with 64 bits (``layout``)."""
        return self.layout.wide

    def _grid(self, work: int) -> tuple[int]:
        return (max(1, min(math.ceil(work / BLOCK), self._max_blocks)),)

    def _rerank(self, order: Any) -> None:
        """Re-rank the edges by ``order`` (every edge id, in the new order): the CSR keeps its shape.

        Only what depends on the order is rebuilt, in place (so the run's CUDA graph, whose kernels
        read these buffers, stays valid for either order): the rank map, each slot's rank, and
        within every row the split between the slots under the filter threshold and the rest: a
        stable partition per row (kernels ``assign_ranks`` and ``partition_rows``); nothing is
        sorted but the edges.
        """
        cp = cupy_module()
        m, k, n = self.num_edges, self.num_loop_free, self.num_vertices
        if k == 0:
            return
        order = cp.ascontiguousarray(order, dtype=cp.int64)
        nonloop = cp.zeros(m, dtype=cp.bool_)
        kernel("mark_ids")(self._grid(k), (BLOCK,), (self.rank_to_id, np.int64(k), nonloop))
        upto = cp.cumsum(nonloop[order], dtype=cp.uint32)  # non-loop edges up to each position
        rank_of_id = cp.empty(m, dtype=cp.uint32)
        new_rank_to_id = cp.empty(k, dtype=cp.uint32)
        slot = self.layout.slot
        kernel(f"assign_ranks<{slot}>")(
            self._grid(m), (BLOCK,),
            (order, upto, nonloop, np.int64(m) if self.wide else np.int32(m), rank_of_id, new_rank_to_id),
        )  # fmt: skip
        del order, upto, nonloop
        slot_rank = cp.empty(k, dtype=cp.uint32)  # every slot's new rank, one pass
        kernel("slot_ranks")(
            self._grid(k), (BLOCK,), (self.adj, np.int64(k), self.rank_to_id, rank_of_id, slot_rank)
        )
        del rank_of_id
        moved = cp.empty_like(self.adj)
        kernel(f"partition_rows<{slot}>")(
            self._grid(n), (BLOCK,),
            (self.row_ptr, self.adj, slot_rank, np.uint32(self.threshold), np.int32(n), moved, self.split),
        )  # fmt: skip
        del slot_rank
        self.rank_to_id[...] = new_rank_to_id
        self.adj[...] = moved

    def _ensure_order(self, objective: Objective) -> None:
        """Make the CSR's ranks follow ``objective``'s order (a re-rank when it is another one)."""
        if objective != self._objective:
            cp = cupy_module()
            with cp.cuda.Device(self.device_id), self._stream:
                self._rerank(edge_order(cp, self.weight, objective))
            self._objective = objective

    def _after_caller(self) -> None:
        """Order this graph's stream after the caller's current one, which made the arrays it passes
        (the graph's stream does not synchronize with the legacy default stream by itself)."""
        cp = cupy_module()
        self._stream.wait_event(cp.cuda.get_current_stream().record())

    def endpoints(self, edge_ids: Any) -> tuple[Any, Any]:
        """(src, dst) of the given (loop-free) edges, on the device, read off the CSR (smaller end first)."""
        cp = cupy_module()
        self._after_caller()
        with cp.cuda.Device(self.device_id), self._stream:
            slot = cp.arange(self.num_loop_free, dtype=self.row_ptr.dtype)
            row = cp.searchsorted(self.row_ptr[1:], slot, side="right").astype(cp.int32)
            ranks = cp.ascontiguousarray(self.adj.view(cp.uint32)[:, 1])
            ids = take_by_u32(cp, self.rank_to_id, ranks).astype(cp.int64)
            src = cp.zeros(self.num_edges, dtype=cp.int32)
            dst = cp.zeros(self.num_edges, dtype=cp.int32)
            src[ids] = row
            dst[ids] = self.adj[:, 0]
            edge_ids = cp.asarray(edge_ids)
            ends = src[edge_ids], dst[edge_ids]
        self._stream.synchronize()  # the caller reads them on its own stream
        return ends
