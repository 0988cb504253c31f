"""The CuPy backend: ECL-MST on a graph that stays resident in device memory.

Building a :class:`GpuGraph` uploads the edge list once, validates it on the
device, ranks the edges by ``(weight, edge_id)`` and builds the CSR of both
directions there. Each computation then only runs kernels (see
``kernels/ecl_mst.cu``) and copies the forest back.

Host round trips. The loop's control stays on the device: worklist sizes live
in device memory and kernels with nothing to do return at once. The first
computation on a graph reads the sizes back after every second iteration and
counts the iterations of each phase; Borůvka rounds under a strict total order
are deterministic, so later computations replay one captured CUDA graph of
exactly that many iterations and read back once, at the end, to confirm.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._backend.kernels import kernel
from ..errors import DeviceError, DeviceMemoryError, GraphTooLargeError
from .layout import MAX_GPU_EDGES, csr_pieces, slot_layout
from .order import Objective, edge_order
from .validate import validate_edges

INT32_MAX = 2**31 - 1
BLOCK = 256
BLOCKS_PER_SM = 8
#: rows with at least this many slots are cut into chunks of this many, one warp each
CHUNK_SLOTS = 256
#: graphs of at least this many edges hand the pool's cached blocks back between build steps:
#: a freed sort buffer split to serve a smaller array can no longer serve the worklists (seen
#: as an out-of-memory error with 2.7B edges on an H200 while 14 GB were cached in pieces)
RELEASE_FROM_EDGES = 1 << 26
#: words of the forest bit set one thread of the compaction kernels reads (kernels/ecl_mst.cu)
TILE_WORDS = 256 * 8
#: counters on the device: worklist A size, worklist B size, forest size, phase-1 leftover
SIZE_A, SIZE_B, FOREST_SIZE, PHASE1_LEFT, NUM_COUNTERS = 0, 1, 2, 3, 4
#: init_worklist's skip-set argument when no edge is left out (a null pointer)
NO_SKIP = np.uint64(0)


def _cupy() -> Any:
    import cupy

    return cupy


def _device_errors() -> tuple[type[BaseException], ...]:
    cp = _cupy()
    return (cp.cuda.runtime.CUDARuntimeError, cp.cuda.driver.CUDADriverError)


def _narrow_ids(cp: Any, ids: Any) -> Any:
    """Validated vertex ids as int32 or int64, as given where they already are (no copy)."""
    if ids.dtype in (cp.int32, cp.int64):
        return ids
    return ids.astype(cp.int32 if ids.dtype.itemsize <= 4 else cp.int64)  # in [0, n): exact


def _id_type(ids: Any) -> str:
    """The kernels' template argument for an int32 or int64 id array."""
    return "int" if ids.dtype.itemsize == 4 else "long long"


def _take_by_u32(cp: Any, table: Any, index: Any) -> Any:
    """``table[index]`` for a uint32 index (bool or uint32 table), without an int64 copy of the index."""
    out = cp.empty(index.shape[0], dtype=table.dtype)
    if out.size:
        word = "unsigned char" if table.dtype.itemsize == 1 else "unsigned"
        grid = (max(1, min(-(-out.size // BLOCK), 65535)),)
        kernel(f"take_by_u32<{word}>")(grid, (BLOCK,), (table, index, np.int64(out.size), out))
    return out


def _weight_bound(weight: Any) -> int | None:
    """The largest weight magnitude (None for floats), for exact forest totals."""
    if weight.dtype.kind not in "iu":
        return None
    if not weight.shape[0]:
        return 0
    return max(abs(int(weight.min())), abs(int(weight.max())))


class GpuGraph:
    """A graph resident on the current CUDA device, ready for ECL-MST."""

    backend = "gpu"

    def __init__(self, src: Any, dst: Any, weight: Any, num_vertices: int | None) -> None:
        cp = _cupy()
        self.device_id = int(cp.cuda.Device().id)
        self._stream = cp.cuda.Stream(non_blocking=True)
        sms = int(cp.cuda.Device().attributes["MultiProcessorCount"])
        self._max_blocks = sms * BLOCKS_PER_SM
        try:
            self._after_caller()  # device arrays given may still be being written on the caller's stream
            with self._stream:
                self._build(cp, src, dst, weight, num_vertices)
            self._stream.synchronize()
        except cp.cuda.memory.OutOfMemoryError as exc:
            raise DeviceMemoryError(
                f"the graph does not fit in free device memory on GPU {self.device_id}: {exc}"
            ) from None
        except _device_errors() as exc:
            raise DeviceError(f"CUDA failed while building the graph: {exc}") from None
        #: the order the CSR's ranks follow now ("min": (weight, id); "max": (-weight, id))
        self._objective: Objective = "min"
        #: per order: iteration pairs of phase 1 and phase 2, learned by the first run
        #: per order: iteration pairs of phase 1 and of each round of phase 2, learned by the first run
        self._pairs: dict[str, tuple[int, ...]] = {}
        #: per order: the captured whole-run CUDA graph, once its plan is known
        self._graph_exec: dict[str, Any] = {}
        #: (objective, forest size, ms) of the forest prepare() computed, while the buffers hold it
        self._prepared: tuple[str, int, float] | None = None
        self._can_capture = True

    # -- building -----------------------------------------------------------------------
    def _build(self, cp: Any, src: Any, dst: Any, weight: Any, num_vertices: int | None) -> None:
        """Validate, rank and build the CSR, holding little more than the finished graph at any time.

        The order of the steps is the memory plan: the ranking sort runs before anything of the
        graph's size but the weights exists; the endpoints by rank replace the input ids; the CSR
        is filled one chunk of rows at a time (its scratch is one chunk's keys); the worklists,
        the largest part of the workspace, are allocated last, once every temporary is gone.
        """
        edges = validate_edges(cp, src, dst, weight, num_vertices, widen=False)
        n = edges.num_vertices
        m = int(edges.weight.shape[0])
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
        self.num_vertices = n
        self.num_edges = m
        # Input order, for the forest's weights; a copy, so the caller may reuse its own array.
        self.weight = edges.weight.copy() if edges.weight is weight else edges.weight
        src_ids, dst_ids = _narrow_ids(cp, edges.src), _narrow_ids(cp, edges.dst)
        del edges  # device copies of host input go as soon as the endpoints by rank exist

        # Rank edges by (weight, edge_id), self-loops left out: rank_to_id (uint32).
        self.rank_to_id = self._rank(cp, src_ids, dst_ids)
        self.weight_bound = _weight_bound(self.weight)
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

        # Rows: degrees and light-slot counts (rank < threshold) -> row_ptr and split.
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

        # CSR of both directions, rows in ascending rank order, one chunk of rows at a time.
        self._release(cp)
        self.adj = cp.empty((2 * k, 2), dtype=cp.int32)
        self._fill_rows(cp, u, v, k)
        del u, v
        self._release(cp)
        self.heavy_chunks = self._heavy_chunks(cp, slot_dtype)
        self._release(cp)

        # Workspace, kept with the graph so a computation allocates nothing.
        capacity = self.layout.capacity
        self._items_a = cp.empty(3 * capacity, dtype=cp.int32)
        self._items_b = cp.empty(3 * capacity, dtype=cp.int32)
        self._lightest0 = cp.empty(max(n, 1), dtype=cp.uint32)
        self._lightest1 = cp.empty(max(n, 1), dtype=cp.uint32)
        self._parent = cp.empty(max(n, 1), dtype=cp.int32)
        self._in_forest = cp.empty(max((m + 31) // 32, 1), dtype=cp.uint32)
        self._tile_counts = cp.empty(max(math.ceil(self._in_forest.size / TILE_WORDS), 1), dtype=cp.int32)
        self._forest = cp.empty(max(n, 1), dtype=cp.int64)  # written as the API's int64 edge ids
        self._forest_weights = cp.empty(max(n, 1), dtype=self.weight.dtype)
        self._counters = cp.zeros(NUM_COUNTERS, dtype=cp.uint32)
        self._counters_host = cp.cuda.alloc_pinned_memory(4 * NUM_COUNTERS)
        self._events = (cp.cuda.Event(), cp.cuda.Event())  # around each computation
        self._capacity = capacity

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
        pieces = csr_pieces(2 * k)
        slots = 2 * k
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

    @property
    def nbytes(self) -> int:
        """Device bytes held: graph (CSR, rank map, weights) and its workspace."""
        arrays = (
            self.weight, self.rank_to_id, self.adj, self.row_ptr, self.split, self.heavy_chunks,
            self._items_a, self._items_b, self._lightest0, self._lightest1, self._parent, self._in_forest,
            self._tile_counts, self._forest, self._forest_weights, self._counters,
        )  # fmt: skip
        return int(sum(a.nbytes for a in arrays))

    # -- kernel launches ----------------------------------------------------------------
    def _grid(self, work: int) -> tuple[int]:
        return (max(1, min(math.ceil(work / BLOCK), self._max_blocks)),)

    def _counter(self, index: int) -> Any:
        return self._counters[index : index + 1]

    def _launch_reset(self) -> None:
        n = self.num_vertices
        kernel("reset_state")(
            self._grid(n), (BLOCK,),
            (np.int32(n), self._parent, self._lightest0, self._lightest1, self._in_forest,
             np.int32(self._in_forest.size), self._counters, np.int32(NUM_COUNTERS)),
        )  # fmt: skip

    def _launch_init(self, second_phase: bool, skip: Any = None, rank_end: int = 0) -> None:
        """Fill worklist A from the CSR; ``skip``: a bit set by rank of edges to leave out (what-if);
        ``rank_end``: the second phase takes the ranks below it (a round, ``SlotLayout.phase_ends``)."""
        n = self.num_vertices
        if second_phase:
            kernel("prepare_second_phase")(
                self._grid(n), (BLOCK,), (np.int32(n), self._parent, self._lightest0, self._lightest1)
            )
        name = f"init_worklist<{'true' if second_phase else 'false'}, {self.layout.slot}>"
        kernel(name)(
            self._grid(n), (BLOCK,),
            (self.row_ptr, self.split, self.adj, np.int32(n), np.int32(CHUNK_SLOTS), self.heavy_chunks,
             np.int32(self.heavy_chunks.shape[0]), self._parent, self._items_a, self._counter(SIZE_A),
             NO_SKIP if skip is None else skip, np.uint32(rank_end)),
        )  # fmt: skip

    def _launch_pair(self) -> None:
        """Two iterations of Algorithm 2's loop: worklist A -> B, then B -> A."""
        grid = self._grid(self._capacity)
        slot = self.layout.slot
        select, link = kernel(f"select_lightest<{slot}>"), kernel(f"link_lightest<{slot}>")
        size_a, size_b = self._counter(SIZE_A), self._counter(SIZE_B)
        for items, size, next_items, next_size, lightest, lightest_next in (
            (self._items_a, size_a, self._items_b, size_b, self._lightest0, self._lightest1),
            (self._items_b, size_b, self._items_a, size_a, self._lightest1, self._lightest0),
        ):
            select(grid, (BLOCK,), (items, size, next_items, next_size, self._parent, lightest))
            link(
                grid, (BLOCK,),
                (next_items, next_size, self._parent, lightest, lightest_next, size, self.rank_to_id,
                 self._in_forest),
            )  # fmt: skip

    def _launch_extract(self) -> None:
        """Forest bit set -> ascending edge ids in ``_forest``, their weights in ``_forest_weights``."""
        words, tiles = np.int32(self._in_forest.size), self._tile_counts.size
        grid = (min(tiles, self._max_blocks),)
        kernel("count_forest_tiles")(grid, (BLOCK,), (self._in_forest, words, self._tile_counts))
        kernel("scan_forest_tiles")(
            (1,), (1024,), (self._tile_counts, np.int32(tiles), self._counter(FOREST_SIZE))
        )
        kernel("write_forest_ids")(grid, (BLOCK,), (self._in_forest, words, self._tile_counts, self._forest))
        word = "unsigned" if self.weight.dtype.itemsize == 4 else "unsigned long long"
        view = _cupy().uint32 if self.weight.dtype.itemsize == 4 else _cupy().uint64
        kernel(f"gather_weights<{word}>")(
            self._grid(self.num_vertices), (BLOCK,),
            (self._forest, self._counter(FOREST_SIZE), self.weight.view(view),
             self._forest_weights.view(view)),
        )  # fmt: skip

    def _read_counters(self) -> np.ndarray[Any, np.dtype[np.uint32]]:
        host = np.frombuffer(self._counters_host, dtype=np.uint32, count=NUM_COUNTERS)
        self._counters.get(stream=self._stream, out=host)
        return host

    # -- orders and weights ---------------------------------------------------------------
    def _rerank(self, order: Any) -> None:
        """Re-rank the edges by ``order`` (every edge id, in the new order): the CSR keeps its shape.

        Only what depends on the order is rebuilt, in place (so captured CUDA graphs of other
        orders stay valid): the rank map, each slot's rank, and within every row the split
        between the slots under the filter threshold and the rest: a stable partition per row
        (kernels ``assign_ranks`` and ``partition_rows``); nothing is sorted but the edges.
        """
        cp = _cupy()
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
        slot_rank = cp.empty(2 * k, dtype=cp.uint32)  # every slot's new rank, one pass
        kernel("slot_ranks")(
            self._grid(2 * k), (BLOCK,), (self.adj, np.int64(2 * k), self.rank_to_id, rank_of_id, slot_rank)
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
            cp = _cupy()
            with cp.cuda.Device(self.device_id), self._stream:
                self._rerank(edge_order(cp, self.weight, objective))
            self._objective = objective

    def _after_caller(self) -> None:
        """Order this graph's stream after the caller's current one, which made the arrays it passes
        (the graph's stream does not synchronize with the legacy default stream by itself)."""
        cp = _cupy()
        self._stream.wait_event(cp.cuda.get_current_stream().record())

    def set_weights(self, weight: Any, edge_ids: Any = None) -> None:
        """New weights (all, or those of ``edge_ids``), validated by the caller: the ranks are rebuilt.

        The topology stays on the device; a new dtype replaces the weight buffers.
        """
        cp = _cupy()
        try:
            self._after_caller()
            with cp.cuda.Device(self.device_id), self._stream:
                if edge_ids is not None:
                    self.weight[edge_ids] = cp.asarray(weight, dtype=self.weight.dtype)
                elif weight.dtype == self.weight.dtype:
                    self.weight[...] = cp.asarray(weight)
                else:
                    self.weight = cp.array(weight, copy=True)
                    self._forest_weights = cp.empty(max(self.num_vertices, 1), dtype=self.weight.dtype)
                self._pairs.clear()
                self._graph_exec.clear()  # plans and captured runs belong to the old weights
                self._prepared = None
                self.weight_bound = _weight_bound(self.weight)
                self._rerank(edge_order(cp, self.weight, "min"))
                self._objective = "min"
            self._stream.synchronize()
        except cp.cuda.memory.OutOfMemoryError as exc:
            raise DeviceMemoryError(f"out of device memory while re-ranking new weights: {exc}") from None
        except _device_errors() as exc:
            raise DeviceError(f"CUDA failed while re-ranking new weights: {exc}") from None

    def endpoints(self, edge_ids: Any) -> tuple[Any, Any]:
        """(src, dst) of the given (loop-free) edges, on the device, read off the CSR (smaller end first)."""
        cp = _cupy()
        self._after_caller()
        with cp.cuda.Device(self.device_id), self._stream:
            slots = 2 * self.num_loop_free
            slot = cp.arange(slots, dtype=self.row_ptr.dtype)
            row = cp.searchsorted(self.row_ptr[1:], slot, side="right").astype(cp.int32)
            col = self.adj[:, 0]
            once = row < col
            ranks = cp.ascontiguousarray(self.adj.view(cp.uint32)[:, 1][once])
            ids = _take_by_u32(cp, self.rank_to_id, ranks).astype(cp.int64)
            src = cp.zeros(self.num_edges, dtype=cp.int32)
            dst = cp.zeros(self.num_edges, dtype=cp.int32)
            src[ids] = row[once]
            dst[ids] = col[once]
            edge_ids = cp.asarray(edge_ids)
            ends = src[edge_ids], dst[edge_ids]
        self._stream.synchronize()  # the caller reads them on its own stream
        return ends

    # -- running ------------------------------------------------------------------------
    def _run_phase_stepwise(self, second_phase: bool, skip: Any, rank_end: int = 0) -> int:
        self._launch_init(second_phase, skip, rank_end)
        pairs = 0
        while True:
            self._launch_pair()
            pairs += 1
            counters = self._read_counters()
            if counters[SIZE_A] == 0 and counters[SIZE_B] == 0:
                return pairs

    def _run_stepwise(self, skip: Any = None) -> tuple[int, ...]:
        """Run with a read-back every two iterations; the iteration pairs of phase 1 and of each
        round of phase 2."""
        self._launch_reset()
        pairs = [self._run_phase_stepwise(False, skip)]
        for end in self.layout.phase_ends:
            pairs.append(self._run_phase_stepwise(True, skip, end))
        self._launch_extract()
        return tuple(pairs)

    def _capture(self, plan: tuple[int, ...]) -> Any:
        stream = self._stream
        ends = self.layout.phase_ends
        stream.begin_capture()
        try:
            self._launch_reset()
            self._launch_init(second_phase=False)
            for _ in range(plan[0]):
                self._launch_pair()
            # Remember what phase 1 left, so the run can confirm it ended where it was planned to.
            self._counter(PHASE1_LEFT).data.copy_from_device_async(self._counter(SIZE_A).data, 4, stream)
            for round_, (end, pairs) in enumerate(zip(ends, plan[1:], strict=True)):
                self._launch_init(second_phase=True, rank_end=end)
                for _ in range(pairs):
                    self._launch_pair()
                if round_ < len(ends) - 1:  # and what each round but the last left
                    kernel("note_leftover")(
                        (1,), (1,),
                        (self._counters, np.int32(SIZE_A), np.int32(SIZE_B), np.int32(PHASE1_LEFT)),
                    )  # fmt: skip
            self._launch_extract()
        finally:
            graph = stream.end_capture()
        return graph

    def _run_device(self, stop: Any, skip: Any) -> np.ndarray[Any, np.dtype[np.uint32]]:
        """Run ECL-MST and the extraction of the forest on the stream, record ``stop`` after them,
        and read the counters back (the one synchronization of a planned run).

        A run with ``skip`` (edges left out) is a one-off: stepwise, and it teaches no plan.
        """
        key = self._objective
        if skip is None:
            if key in self._pairs and key not in self._graph_exec:
                self.prepare(key)
            graph_exec = self._graph_exec.get(key)
            if graph_exec is not None:
                graph_exec.launch(self._stream)
                stop.record(self._stream)
                counters = self._read_counters()
                if counters[SIZE_A] == 0 and counters[SIZE_B] == 0 and counters[PHASE1_LEFT] == 0:
                    return counters
                del self._graph_exec[key]  # not as planned: fall back to the stepwise run below
        pairs = self._run_stepwise(skip)
        if skip is None:
            self._pairs[key] = pairs
        stop.record(self._stream)
        return self._read_counters()

    def prepare(self, objective: Objective = "min") -> None:
        """Run once and capture the run as a CUDA graph, so the next computation replays it."""
        self._ensure_order(objective)
        key = self._objective
        if key not in self._pairs and self.num_loop_free:
            ids, _, elapsed_ms = self.compute(objective)
            self._prepared = (key, int(ids.shape[0]), elapsed_ms)  # capturing below runs nothing
        if key not in self._graph_exec and key in self._pairs and self._can_capture:
            cp = _cupy()
            with cp.cuda.Device(self.device_id), self._stream:
                try:
                    self._graph_exec[key] = self._capture(self._pairs[key])
                except _device_errors():
                    self._can_capture = False

    def _skip_mask(self, exclude: Any) -> Any:
        """A bit set by rank of the (loop-free) edges among ``exclude``, for init_worklist."""
        cp = _cupy()
        k = self.num_loop_free
        gone = cp.zeros(self.num_edges, dtype=cp.bool_)
        gone[cp.asarray(exclude)] = True
        by_rank = _take_by_u32(cp, gone, self.rank_to_id)
        padded = cp.zeros(-(-k // 32) * 32, dtype=cp.bool_)
        padded[:k] = by_rank
        bits = cp.packbits(padded.reshape(-1, 8)[:, ::-1].ravel())  # little-endian bits in each byte
        return bits.view(cp.uint32)

    def take_prepared(self, objective: Objective) -> tuple[Any, Any, float] | None:
        """The forest :meth:`prepare` computed for ``objective``, once, if the buffers still hold it."""
        held, self._prepared = self._prepared, None
        if held is None or held[0] != objective or self._objective != objective:
            return None
        _, count, elapsed_ms = held
        return self._forest[:count], self._forest_weights[:count], elapsed_ms

    def compute(self, objective: Objective = "min", exclude: Any = None) -> tuple[Any, Any, float]:
        """Run on the device: (edge ids int64 ascending, their weights, milliseconds).

        The two arrays are views of this graph's device buffers, valid until its next computation.
        """
        cp = _cupy()
        self._prepared = None  # the buffers are about to hold this run's forest
        if self.num_loop_free == 0:
            return cp.empty(0, dtype=cp.int64), self.weight[:0], 0.0
        try:
            if exclude is not None:
                self._after_caller()
            with cp.cuda.Device(self.device_id), self._stream:
                self._ensure_order(objective)
                skip = None if exclude is None or not exclude.size else self._skip_mask(exclude)
                start, stop = self._events
                start.record(self._stream)
                count = int(self._run_device(stop, skip)[FOREST_SIZE])
                elapsed_ms = float(cp.cuda.get_elapsed_time(start, stop))
                return self._forest[:count], self._forest_weights[:count], elapsed_ms
        except cp.cuda.memory.OutOfMemoryError as exc:
            raise DeviceMemoryError(f"out of device memory while computing: {exc}") from None
        except _device_errors() as exc:
            raise DeviceError(f"CUDA failed while computing the forest: {exc}") from None

    @property
    def xp(self) -> Any:
        return _cupy()

    def to_host(self, *arrays: Any) -> list[np.ndarray[Any, Any]]:
        """Copy device arrays into page-locked host arrays: async copies on the stream, one sync.

        The host arrays share one block of CuPy's pinned pool (no allocation once warm) and copy at
        full bus speed; pageable ``get()``s would each synchronize and fault fresh pages in.
        """
        cp = _cupy()
        self._after_caller()  # the arrays may come from the caller's stream (labels, say)
        offsets, total = [], 0
        for a in arrays:
            offsets.append(total)
            total += -(-a.nbytes // 64) * 64  # each array 64-byte aligned
        block = cp.cuda.alloc_pinned_memory(max(total, 1))
        out = [np.frombuffer(block, a.dtype, a.size, at) for a, at in zip(arrays, offsets, strict=True)]
        try:
            with cp.cuda.Device(self.device_id):
                for device, host in zip(arrays, out, strict=True):
                    if host.nbytes:
                        device.data.copy_to_host_async(host.ctypes.data, host.nbytes, self._stream)
                self._stream.synchronize()
        except _device_errors() as exc:
            raise DeviceError(f"CUDA failed while copying the forest back: {exc}") from None
        return out
