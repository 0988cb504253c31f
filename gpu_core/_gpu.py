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

from ._forest import filter_threshold, weight_bound
from ._kernels import kernel
from ._order import Objective, edge_order
from ._validate import validate_edges
from .errors import DeviceError, DeviceMemoryError, GraphTooLargeError

INT32_MAX = 2**31 - 1
BLOCK = 256
BLOCKS_PER_SM = 8
#: rows with at least this many slots are cut into chunks of this many, one warp each
CHUNK_SLOTS = 256
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


class GpuGraph:
    """A graph resident on the current CUDA device, ready for ECL-MST."""

    backend = "gpu"

    def __init__(self, src: Any, dst: Any, weight: Any, num_vertices: int | None) -> None:
        cp = _cupy()
        self.device_id = int(cp.cuda.Device().id)
        self._stream = cp.cuda.Stream(non_blocking=True)
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
        self._pairs: dict[str, tuple[int, int]] = {}
        #: per order: the captured whole-run CUDA graph, once its plan is known
        self._graph_exec: dict[str, Any] = {}
        self._can_capture = True

    # -- building -----------------------------------------------------------------------
    def _build(self, cp: Any, src: Any, dst: Any, weight: Any, num_vertices: int | None) -> None:
        edges = validate_edges(cp, src, dst, weight, num_vertices)
        n = edges.num_vertices
        m = int(edges.weight.shape[0])
        if n > INT32_MAX:
            raise GraphTooLargeError(
                f"the GPU backend indexes vertices with 32 bits: at most {INT32_MAX} vertices, got {n}.",
                limit=INT32_MAX,
                actual=n,
            )
        if m > INT32_MAX:
            raise GraphTooLargeError(
                f"the GPU backend supports at most {INT32_MAX} edges, got {m}.", limit=INT32_MAX, actual=m
            )
        self.num_vertices = n
        self.num_edges = m
        # Input order, for the forest's weights; a copy, so the caller may reuse its own array.
        self.weight = edges.weight.copy() if edges.weight is weight else edges.weight

        # Rank edges by (weight, edge_id): CuPy's argsort is stable, so ties keep id order.
        order = edge_order(cp, edges.weight, "min")
        self.weight_bound = weight_bound(edges.weight, order)
        src_r = edges.src[order]
        dst_r = edges.dst[order]
        loop_free = src_r != dst_r
        self.rank_to_id = order[loop_free].astype(cp.int32)
        u = src_r[loop_free].astype(cp.int32)
        v = dst_r[loop_free].astype(cp.int32)
        del order, src_r, dst_r, loop_free
        k = int(u.shape[0])
        if 2 * k > INT32_MAX:
            limit = INT32_MAX // 2
            raise GraphTooLargeError(
                f"the GPU backend stores both directions of every edge with 32-bit slots: at most "
                f"{limit} edges that are not self-loops, got {k}.",
                limit=limit,
                actual=k,
            )
        self.num_loop_free = k

        # CSR of both directions. Slot 2r and 2r+1 are the two directions of rank r, so a
        # stable sort by row keeps every row in ascending rank order.
        rows = cp.stack([u, v], axis=1).ravel()
        cols = cp.stack([v, u], axis=1).ravel()
        by_row = cp.argsort(rows)
        self.adj = cp.empty((2 * k, 2), dtype=cp.int32)
        self.adj[:, 0] = cols[by_row]
        self.adj[:, 1] = (by_row // 2).astype(cp.int32)
        # Row starts by binary search in the sorted rows, not by cp.bincount: CuPy 14's bincount
        # takes about 3 KB of scratch per bin (3.2 GB for a graph of 10^6 vertices).
        sorted_rows = rows[by_row]
        del rows, cols, by_row, u, v
        vertices = cp.arange(n + 1, dtype=cp.int64)
        self.row_ptr = cp.searchsorted(sorted_rows, vertices).astype(cp.int32)
        self.threshold = filter_threshold(n, k)
        # split[v]: where the slots of row v with rank >= threshold start (the filter's second phase).
        light_rows = sorted_rows[self.adj[:, 1] < self.threshold]  # sorted too
        self.split = self.row_ptr[:-1] + cp.diff(cp.searchsorted(light_rows, vertices)).astype(cp.int32)
        del sorted_rows, light_rows, vertices
        self.heavy_chunks = self._heavy_chunks(cp)

        # Workspace, kept with the graph so a computation allocates nothing.
        capacity = max(self.threshold, k - self.threshold, 1)
        self._items_a = cp.empty(3 * capacity, dtype=cp.int32)
        self._items_b = cp.empty(3 * capacity, dtype=cp.int32)
        self._lightest0 = cp.empty(max(n, 1), dtype=cp.uint32)
        self._lightest1 = cp.empty(max(n, 1), dtype=cp.uint32)
        self._parent = cp.empty(max(n, 1), dtype=cp.int32)
        self._in_forest = cp.empty(max((m + 31) // 32, 1), dtype=cp.uint32)
        self._tile_counts = cp.empty(max(math.ceil(self._in_forest.size / TILE_WORDS), 1), dtype=cp.int32)
        self._forest = cp.empty(max(n, 1), dtype=cp.int64)  # written as the API's int64 edge ids
        self._forest_weights = cp.empty(max(n, 1), dtype=self.weight.dtype)
        self._counters = cp.zeros(NUM_COUNTERS, dtype=cp.int32)
        self._counters_host = cp.cuda.alloc_pinned_memory(4 * NUM_COUNTERS)
        self._events = (cp.cuda.Event(), cp.cuda.Event())  # around each computation

        sms = int(cp.cuda.Device().attributes["MultiProcessorCount"])
        self._max_blocks = sms * BLOCKS_PER_SM
        self._capacity = capacity

    def _heavy_chunks(self, cp: Any) -> Any:
        """{row, first slot} of every CHUNK_SLOTS-slot chunk of the rows with at least CHUNK_SLOTS slots."""
        degree = cp.diff(self.row_ptr)
        heavy = cp.flatnonzero(degree >= CHUNK_SLOTS).astype(cp.int32)
        per_row = (degree[heavy] + CHUNK_SLOTS - 1) // CHUNK_SLOTS
        ends = cp.cumsum(per_row)
        total = int(ends[-1]) if heavy.size else 0
        chunks = cp.empty((total, 2), dtype=cp.int32)
        if total:
            task = cp.arange(total, dtype=cp.int32)
            which = cp.searchsorted(ends, task, side="right")
            chunks[:, 0] = heavy[which]
            chunks[:, 1] = self.row_ptr[heavy[which]] + (task - (ends[which] - per_row[which])) * CHUNK_SLOTS
        return chunks

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

    def _launch_init(self, second_phase: bool, skip: Any = None) -> None:
        """Fill worklist A from the CSR; ``skip``: a bit set by rank of edges to leave out (what-if)."""
        n = self.num_vertices
        if second_phase:
            kernel("prepare_second_phase")(
                self._grid(n), (BLOCK,), (np.int32(n), self._parent, self._lightest0, self._lightest1)
            )
        name = "init_worklist<true>" if second_phase else "init_worklist<false>"
        kernel(name)(
            self._grid(n), (BLOCK,),
            (self.row_ptr, self.split, self.adj, np.int32(n), np.int32(CHUNK_SLOTS), self.heavy_chunks,
             np.int32(self.heavy_chunks.shape[0]), self._parent, self._items_a, self._counter(SIZE_A),
             NO_SKIP if skip is None else skip),
        )  # fmt: skip

    def _launch_pair(self) -> None:
        """Two iterations of Algorithm 2's loop: worklist A -> B, then B -> A."""
        grid = self._grid(self._capacity)
        select, link = kernel("select_lightest"), kernel("link_lightest")
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

    def _read_counters(self) -> np.ndarray[Any, np.dtype[np.int32]]:
        host = np.frombuffer(self._counters_host, dtype=np.int32, count=NUM_COUNTERS)
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
        nonloop[self.rank_to_id] = True
        upto = cp.cumsum(nonloop[order], dtype=cp.int32)  # non-loop edges up to each position
        rank_of_id = cp.empty(m, dtype=cp.int32)
        new_rank_to_id = cp.empty(k, dtype=cp.int32)
        kernel("assign_ranks")(
            self._grid(m), (BLOCK,), (order, upto, nonloop, np.int32(m), rank_of_id, new_rank_to_id)
        )
        del order, upto, nonloop
        slot_rank = rank_of_id[self.rank_to_id[self.adj[:, 1]]]  # every slot's new rank, one gather pass
        del rank_of_id
        moved = cp.empty_like(self.adj)
        kernel("partition_rows")(
            self._grid(n), (BLOCK,),
            (self.row_ptr, self.adj, slot_rank, np.int32(self.threshold), np.int32(n), moved, self.split),
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
                order = edge_order(cp, self.weight, "min")
                self.weight_bound = weight_bound(self.weight, order)
                self._rerank(order)
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
            slot = cp.arange(slots, dtype=cp.int32)
            row = cp.searchsorted(self.row_ptr[1:], slot, side="right").astype(cp.int32)
            col = self.adj[:, 0]
            once = row < col
            ids = self.rank_to_id[self.adj[:, 1][once]]
            src = cp.zeros(self.num_edges, dtype=cp.int32)
            dst = cp.zeros(self.num_edges, dtype=cp.int32)
            src[ids] = row[once]
            dst[ids] = col[once]
            edge_ids = cp.asarray(edge_ids)
            ends = src[edge_ids], dst[edge_ids]
        self._stream.synchronize()  # the caller reads them on its own stream
        return ends

    # -- running ------------------------------------------------------------------------
    def _run_phase_stepwise(self, second_phase: bool, skip: Any) -> int:
        self._launch_init(second_phase, skip)
        pairs = 0
        while True:
            self._launch_pair()
            pairs += 1
            counters = self._read_counters()
            if counters[SIZE_A] == 0 and counters[SIZE_B] == 0:
                return pairs

    def _run_stepwise(self, skip: Any = None) -> tuple[int, int]:
        """Run with a read-back every two iterations; the iteration pairs of both phases."""
        self._launch_reset()
        pairs1 = self._run_phase_stepwise(False, skip)
        pairs2 = 0
        if self.threshold < self.num_loop_free:
            pairs2 = self._run_phase_stepwise(True, skip)
        self._launch_extract()
        return pairs1, pairs2

    def _capture(self, pairs1: int, pairs2: int) -> Any:
        stream = self._stream
        stream.begin_capture()
        try:
            self._launch_reset()
            self._launch_init(second_phase=False)
            for _ in range(pairs1):
                self._launch_pair()
            # Remember what phase 1 left, so the run can confirm it ended where it was planned to.
            self._counter(PHASE1_LEFT).data.copy_from_device_async(self._counter(SIZE_A).data, 4, stream)
            if self.threshold < self.num_loop_free:
                self._launch_init(second_phase=True)
                for _ in range(pairs2):
                    self._launch_pair()
            self._launch_extract()
        finally:
            graph = stream.end_capture()
        return graph

    def _run_device(self, stop: Any, skip: Any) -> np.ndarray[Any, np.dtype[np.int32]]:
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
            self.compute(objective)
        if key not in self._graph_exec and key in self._pairs and self._can_capture:
            cp = _cupy()
            with cp.cuda.Device(self.device_id), self._stream:
                try:
                    self._graph_exec[key] = self._capture(*self._pairs[key])
                except _device_errors():
                    self._can_capture = False

    def _skip_mask(self, exclude: Any) -> Any:
        """A bit set by rank of the (loop-free) edges among ``exclude``, for init_worklist."""
        cp = _cupy()
        k = self.num_loop_free
        gone = cp.zeros(self.num_edges, dtype=cp.bool_)
        gone[cp.asarray(exclude)] = True
        by_rank = gone[self.rank_to_id]
        padded = cp.zeros(-(-k // 32) * 32, dtype=cp.bool_)
        padded[:k] = by_rank
        bits = cp.packbits(padded.reshape(-1, 8)[:, ::-1].ravel())  # little-endian bits in each byte
        return bits.view(cp.uint32)

    def compute(self, objective: Objective = "min", exclude: Any = None) -> tuple[Any, Any, float]:
        """Run on the device: (edge ids int64 ascending, their weights, milliseconds).

        The two arrays are views of this graph's device buffers, valid until its next computation.
        """
        cp = _cupy()
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
