"""The CuPy backend: ECL-MST on a graph that stays resident in device memory.

Building a :class:`GpuGraph` uploads the edge list once, validates it on the
device, ranks the edges by ``(weight, edge_id)`` and builds there a CSR holding each
edge once, in the row of its smaller endpoint. Each computation then only runs kernels (see
``kernels/ecl_mst.cu``) and copies the forest back.

Host round trips. The loop's control stays on the device: worklist sizes live
in device memory, and the whole run (ECL-MST's phases, each an iteration loop, and the
forest's extraction) is one CUDA graph built with the graph, whose loops are conditional
WHILE nodes (:mod:`gpu_core._backend.device_loops`) that a kernel ends when the worklists
are empty. A computation is one graph launch and one read-back, the first as fast as any
later one. A what-if (edges left out) and drivers without conditional nodes (before CUDA
12.4) loop on the host instead, reading the sizes back after every second iteration.

Design: docs/design/engine.md.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from .._backend import device_loops
from .._backend.kernels import kernel
from ..errors import DeviceError, DeviceMemoryError
from .gpu_csr import BLOCK, CHUNK_SLOTS, GpuCsr, cupy_module, device_errors, device_weight_bound, take_by_u32
from .order import Objective, edge_order

BLOCKS_PER_SM = 8
#: words of the forest bit set one thread of the compaction kernels reads (kernels/ecl_mst.cu)
TILE_WORDS = 256 * 8
#: counters on the device: worklist A size, worklist B size, forest size
SIZE_A, SIZE_B, FOREST_SIZE, NUM_COUNTERS = 0, 1, 2, 3
#: init_worklist's skip-set argument when no edge is left out (a null pointer)
NO_SKIP = np.uint64(0)


class GpuGraph(GpuCsr):
    """A graph resident on the current CUDA device (its CSR: :class:`GpuCsr`), ready for ECL-MST."""

    backend = "gpu"

    def __init__(self, src: Any, dst: Any, weight: Any, num_vertices: int | None) -> None:
        cp = cupy_module()
        self.device_id = int(cp.cuda.Device().id)
        self._stream = cp.cuda.Stream(non_blocking=True)
        sms = int(cp.cuda.Device().attributes["MultiProcessorCount"])
        self._max_blocks = sms * BLOCKS_PER_SM
        self._objective = "min"
        #: the whole run as one CUDA graph whose loops run on the device, built with the graph (its
        #: kernels' arguments are this graph's buffers, re-ranked in place for either order)
        self._run: device_loops.GraphExec | None = None
        self._loops = device_loops.loops_supported()
        #: the objective of a run started by :meth:`launch` and not yet collected by :meth:`compute`
        self._launched: Objective | None = None
        try:
            self._after_caller()  # device arrays given may still be being written on the caller's stream
            with self._stream:
                self._build(cp, src, dst, weight, num_vertices)
                if self.num_loop_free:
                    self._run_graph()
            self._stream.synchronize()
        except cp.cuda.memory.OutOfMemoryError as exc:
            raise DeviceMemoryError(
                f"the graph does not fit in free device memory on GPU {self.device_id}: {exc}"
            ) from None
        except device_errors() as exc:
            raise DeviceError(f"CUDA failed while building the graph: {exc}") from None

    # -- building -----------------------------------------------------------------------
    def _build(self, cp: Any, src: Any, dst: Any, weight: Any, num_vertices: int | None) -> None:
        """Validate, rank and build the CSR, then the workspace, holding little more than the
        finished graph at any time: the worklists, the largest part of the workspace, are
        allocated last, once every temporary of the CSR's build is gone."""
        self._build_csr(cp, src, dst, weight, num_vertices)
        self._allocate_workspace(cp)

    def _allocate_workspace(self, cp: Any) -> None:
        """The workspace, kept with the graph so a computation allocates nothing."""
        n, m = self.num_vertices, self.num_edges
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
        """Fill worklist B from the CSR and offer every item's rank to its sets' minima (``lightest0``):
        what the first iteration's select would do with the worklist, so the phase goes on with that
        iteration's link (:meth:`_launch_phase_start`). ``skip``: a bit set by rank of edges to leave
        out (what-if); ``rank_end``: the second phase takes the ranks below it (a round,
        ``SlotLayout.phase_ends``)."""
        n = self.num_vertices
        if second_phase:
            kernel("prepare_second_phase")(
                self._grid(n), (BLOCK,), (np.int32(n), self._parent, self._lightest0, self._lightest1)
            )
        name = f"init_worklist<{'true' if second_phase else 'false'}, {self.layout.slot}>"
        kernel(name)(
            self._grid(n), (BLOCK,),
            (self.row_ptr, self.split, self.adj, np.int32(n), np.int32(CHUNK_SLOTS), self.heavy_chunks,
             np.int32(self.heavy_chunks.shape[0]), self._parent, self._items_b, self._counter(SIZE_B),
             self._lightest0, NO_SKIP if skip is None else skip, np.uint32(rank_end)),
        )  # fmt: skip

    def _launch_phase_start(self, second_phase: bool, skip: Any = None, rank_end: int = 0) -> None:
        """A phase's worklist with its minima, then the rest of its first pair of iterations."""
        self._launch_init(second_phase, skip, rank_end)
        self._launch_pair(first_select=False)

    def _launch_pair(self, loop: int | None = None, first_select: bool = True) -> None:
        """Two iterations of Algorithm 2's loop: worklist A -> B, then B -> A. ``loop``: the handle of
        the device loop (:meth:`_append_loop`) whose body this is; its second link decides whether
        the loop goes on. ``first_select=False``: B and its minima come from the phase's fill."""
        grid = self._grid(self._capacity)
        slot = self.layout.slot
        handle, in_loop = np.uint64(loop or 0), loop is not None
        select, link = kernel(f"select_lightest<{slot}>"), kernel(f"link_lightest<{slot}>", loops=in_loop)
        size_a, size_b = self._counter(SIZE_A), self._counter(SIZE_B)
        for step, (items, size, next_items, next_size, lightest, lightest_next, ends_pair) in enumerate(
            (
                (self._items_a, size_a, self._items_b, size_b, self._lightest0, self._lightest1, False),
                (self._items_b, size_b, self._items_a, size_a, self._lightest1, self._lightest0, in_loop),
            )
        ):
            if step or first_select:
                select(grid, (BLOCK,), (items, size, next_items, next_size, self._parent, lightest))
            link(
                grid, (BLOCK,),
                (next_items, next_size, self._parent, lightest, lightest_next, size, self.rank_to_id,
                 self._in_forest, handle, np.int32(ends_pair)),
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
        view = cupy_module().uint32 if self.weight.dtype.itemsize == 4 else cupy_module().uint64
        kernel(f"gather_weights<{word}>")(
            self._grid(self.num_vertices), (BLOCK,),
            (self._forest, self._counter(FOREST_SIZE), self.weight.view(view),
             self._forest_weights.view(view)),
        )  # fmt: skip

    def _read_counters(self) -> np.ndarray[Any, np.dtype[np.uint32]]:
        host = np.frombuffer(self._counters_host, dtype=np.uint32, count=NUM_COUNTERS)
        self._counters.get(stream=self._stream, out=host)
        return host

    def _launched_counters(self) -> np.ndarray[Any, np.dtype[np.uint32]]:
        """The counters of the run :meth:`launch` started, once it has ended."""
        self._stream.synchronize()
        return np.frombuffer(self._counters_host, dtype=np.uint32, count=NUM_COUNTERS)

    # -- weights ------------------------------------------------------------------------
    def set_weights(self, weight: Any, edge_ids: Any = None) -> None:
        """New weights (all, or those of ``edge_ids``), validated by the caller: the ranks are rebuilt.

        The topology stays on the device; a new dtype replaces the weight buffers.
        """
        self._launched = None  # a run launched ahead computed the old weights: run again
        cp = cupy_module()
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
                    self._run = None  # its kernels read the old weight buffers: built again below
                self.weight_bound = device_weight_bound(self.weight)
                self._rerank(edge_order(cp, self.weight, "min"))
                self._objective = "min"
                if self.num_loop_free:
                    self._run_graph()
            self._stream.synchronize()
        except cp.cuda.memory.OutOfMemoryError as exc:
            raise DeviceMemoryError(f"out of device memory while re-ranking new weights: {exc}") from None
        except device_errors() as exc:
            raise DeviceError(f"CUDA failed while re-ranking new weights: {exc}") from None

    # -- running ------------------------------------------------------------------------
    def _run_phase_stepwise(self, second_phase: bool, skip: Any, rank_end: int = 0) -> None:
        self._launch_phase_start(second_phase, skip, rank_end)
        while True:
            counters = self._read_counters()
            if counters[SIZE_A] == 0 and counters[SIZE_B] == 0:
                return
            self._launch_pair()

    def _run_stepwise(self, skip: Any = None) -> None:
        """Run with a read-back every two iterations (a what-if, or a driver without device loops)."""
        self._launch_reset()
        self._run_phase_stepwise(False, skip)
        for end in self.layout.phase_ends:
            self._run_phase_stepwise(True, skip, end)
        self._launch_extract()

    def _append_loop(self, run: device_loops.LoopGraph) -> None:
        """Pairs of iterations for as long as the worklists hold items, decided on the device."""
        loop = run.append_while()
        loop.body(device_loops.capture(self._stream, lambda: self._launch_pair(loop.handle)))

    def _build_run(self) -> device_loops.GraphExec:
        """The whole run as one CUDA graph: reset, phase 1's worklist and first pair of iterations,
        its loop, each round of phase 2 (worklist, first pair, loop), the forest's extraction."""
        stream = self._stream
        run = device_loops.LoopGraph()

        def first_phase() -> None:
            self._launch_reset()
            self._launch_phase_start(second_phase=False)

        run.append(device_loops.capture(stream, first_phase))
        self._append_loop(run)
        for end in self.layout.phase_ends:
            run.append(
                device_loops.capture(stream, functools.partial(self._launch_phase_start, True, rank_end=end))
            )
            self._append_loop(run)
        run.append(device_loops.capture(stream, self._launch_extract))
        executable = run.instantiate()
        executable.upload(stream)
        return executable

    def _run_graph(self) -> device_loops.GraphExec | None:
        """The run's CUDA graph (built once), or None where the driver has no device loops."""
        if self._run is None and self._loops:
            try:
                self._run = self._build_run()
            except device_loops.DriverError:
                self._loops = False  # the host loop, with its read-backs, does the same work
        return self._run

    def _run_device(self, stop: Any, skip: Any) -> np.ndarray[Any, np.dtype[np.uint32]]:
        """Run ECL-MST and the extraction of the forest on the stream, record ``stop`` after them,
        and read the counters back (the one synchronization of a run on the device's loops).

        A run with ``skip`` (edges left out) is a one-off: stepwise.
        """
        run = self._run_graph() if skip is None else None
        if run is not None:
            run.launch(self._stream)
        else:
            self._run_stepwise(skip)
        stop.record(self._stream)
        return self._read_counters()

    def launch(self, objective: Objective = "min") -> bool:
        """Start a run on this graph's stream and return at once; whether one was started.

        The next :meth:`compute` of ``objective`` with nothing excluded collects it instead of
        running again (anything else computes after it on the same stream, its answer unused).
        A worker starts the runs of the jobs queued behind the one it answers, each on its own
        graph and stream, so the device runs them side by side and each job's own turn only waits
        for its run's end. Only a graph ranked for ``objective`` whose run is its CUDA graph is
        started; a failure here starts nothing (the job's own computation words the error).
        """
        if self._launched is not None or objective != self._objective or not self.num_loop_free:
            return False
        cp = cupy_module()
        try:
            with cp.cuda.Device(self.device_id), self._stream:
                run = self._run_graph()
                if run is None:
                    return False
                start, stop = self._events
                start.record(self._stream)
                run.launch(self._stream)
                stop.record(self._stream)
                host = self._counters_host
                self._counters.data.copy_to_host_async(host.ptr, 4 * NUM_COUNTERS, self._stream)
        except (cp.cuda.memory.OutOfMemoryError, *device_errors()):
            return False
        self._launched = objective
        return True

    def prepare(self, objective: Objective = "min") -> None:
        """Rank for ``objective`` and build the run's CUDA graph now, so no computation pays for them."""
        if objective != self._objective:
            self._launched = None  # a run launched ahead in the other order: not collected
        self._ensure_order(objective)
        if self.num_loop_free:
            cp = cupy_module()
            with cp.cuda.Device(self.device_id), self._stream:
                self._run_graph()

    def _skip_mask(self, exclude: Any) -> Any:
        """A bit set by rank of the (loop-free) edges among ``exclude``, for init_worklist."""
        cp = cupy_module()
        k = self.num_loop_free
        gone = cp.zeros(self.num_edges, dtype=cp.bool_)
        gone[cp.asarray(exclude)] = True
        by_rank = take_by_u32(cp, gone, self.rank_to_id)
        padded = cp.zeros(-(-k // 32) * 32, dtype=cp.bool_)
        padded[:k] = by_rank
        bits = cp.packbits(padded.reshape(-1, 8)[:, ::-1].ravel())  # little-endian bits in each byte
        return bits.view(cp.uint32)

    def compute(self, objective: Objective = "min", exclude: Any = None) -> tuple[Any, Any, float]:
        """Run on the device: (edge ids int64 ascending, their weights, milliseconds).

        The two arrays are views of this graph's device buffers, valid until its next computation.
        """
        cp = cupy_module()
        if self.num_loop_free == 0:
            return cp.empty(0, dtype=cp.int64), self.weight[:0], 0.0
        try:
            if exclude is not None:
                self._after_caller()
            with cp.cuda.Device(self.device_id), self._stream:
                launched, self._launched = self._launched, None
                self._ensure_order(objective)
                skip = None if exclude is None or not exclude.size else self._skip_mask(exclude)
                start, stop = self._events
                if launched == objective and skip is None:
                    counters = self._launched_counters()
                else:
                    start.record(self._stream)
                    counters = self._run_device(stop, skip)
                count = int(counters[FOREST_SIZE])
                elapsed_ms = float(cp.cuda.get_elapsed_time(start, stop))
                return self._forest[:count], self._forest_weights[:count], elapsed_ms
        except cp.cuda.memory.OutOfMemoryError as exc:
            raise DeviceMemoryError(f"out of device memory while computing: {exc}") from None
        except device_errors() as exc:
            raise DeviceError(f"CUDA failed while computing the forest: {exc}") from None

    @property
    def xp(self) -> Any:
        return cupy_module()

    def to_host(self, *arrays: Any) -> list[np.ndarray[Any, Any]]:
        """Copy device arrays into page-locked host arrays: async copies on the stream, one sync.

        The host arrays share one block of CuPy's pinned pool (no allocation once warm) and copy at
        full bus speed; pageable ``get()``s would each synchronize and fault fresh pages in.
        """
        cp = cupy_module()
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
        except device_errors() as exc:
            raise DeviceError(f"CUDA failed while copying the forest back: {exc}") from None
        return out
