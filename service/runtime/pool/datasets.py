"""The datasets placed on one worker: where each stands, how it gets onto the worker, how it comes back.

Each has a :class:`~.residency.Residency`. A new upload is loaded with room made for it
(:meth:`Datasets.load_with_room`): when the worker answers a LOAD with 507 (the graph does not
fit in what is free, see :meth:`service.runtime.worker.state.Worker.admit`), its idle graphs (no
job queued or running) are evicted, least recently used first (last upload, reload or job),
until the shortfall is freed, and the LOAD is sent again; with nothing left to evict the 507
goes to the client. An evicted graph is dropped from the worker but stays in the spool and the
catalog (``residency.status = "evicted"``); its next job loads it back first
(:meth:`Datasets.ensure_resident`, evicting others the same way), in the worker's ordered pipe.

Reloads: a new process (after a restart, or at the service's start) takes requests as soon as it has
warmed up; every dataset placed on its worker (neither evicted nor failed) is then loaded back,
one LOAD at a time, in the order :func:`~.restarts.next_reload` picks: those that requests or
queued tasks wait for first, smallest first. A request on a dataset whose LOAD is not written
yet is held behind it (the pipe is ordered, so a job never overtakes its graph's reload); the
dispatcher leaves the tasks of a dataset being reloaded in the queue and hands the others
meanwhile, and lets the tasks of a dataset just reloaded into the pipe before the next LOAD.
Once every dataset is back the worker is ``ready``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any, Protocol

from ...errors import InsufficientMemoryError, WorkerLostError
from ..worker.protocol import DROP, LOAD
from .dispatch import Dispatcher
from .requests import Requests, consume
from .residency import Residency, Sources, WorkerState
from .restarts import Request, next_reload

log = logging.getLogger("service.runtime.supervisor")


class HoldingWorker(Protocol):
    """What the datasets use of the handle of the worker that holds them (:class:`~.handle.WorkerHandle`)."""

    index: int
    generation: int
    requests: Requests
    dispatch: Dispatcher

    @property
    def state(self) -> WorkerState: ...

    @property
    def accepting(self) -> bool: ...

    def send(self, op: str, *args: Any, reload: bool = False) -> asyncio.Future[Any]: ...

    def post(self, request: Request) -> None: ...

    async def wait_accepting(self, timeout: float) -> None: ...

    def all_back(self) -> None:
        """Every dataset placed on the worker is back: it is ``ready``."""


class Datasets:
    """The datasets placed on one worker (see the module's docstring).

    ``start_timeout_s``: how long a load waits for a restarting worker (MST_WORKER_START_TIMEOUT_S).
    """

    def __init__(self, worker: HoldingWorker, sources: Sources, start_timeout_s: float) -> None:
        self._worker = worker
        self._sources = sources
        self._start_timeout_s = start_timeout_s
        #: every dataset placed on the worker, by key (a graph's or point set's id, a shard's key)
        self.graphs: dict[str, Residency] = {}
        #: datasets the current process has not reloaded yet, and those of them not yet asked for
        self.pending: set[str] = set()
        self.unsent: set[str] = set()
        self._reloader: asyncio.Task[None] | None = None

    # -- residency and eviction ---------------------------------------------------------------

    def resident(self, graph_id: str) -> bool:
        residency = self.graphs.get(graph_id)
        return residency is not None and residency.status == "resident"

    def touch(self, graph_id: str) -> None:
        """Mark a graph as just used (its eviction comes later)."""
        residency = self.graphs.get(graph_id)
        if residency is not None:
            residency.last_used = time.monotonic()

    async def evict(self, needed: int, keep: str | None = None) -> int:
        """Evict idle resident graphs, least recently used first, until ``needed`` bytes are freed
        (or none is left); the bytes freed. Evicting drops a graph from the worker; the spool keeps
        it, and its next job loads it again (:meth:`ensure_resident`)."""
        busy = self._worker.dispatch.datasets()
        idle = sorted(
            (r for r in self.graphs.values() if r.status == "resident" and r.graph_id not in busy | {keep}),
            key=lambda r: r.last_used,
        )
        freed = 0
        for residency in idle:
            if freed >= needed:
                break
            residency.status = "evicted"
            freed += residency.device_bytes
            log.info(
                "worker %d: evicted graph %s (%d bytes, idle %.1f s)",
                self._worker.index,
                residency.graph_id,
                residency.device_bytes,
                time.monotonic() - residency.last_used,
            )
            await self._worker.send(DROP, residency.graph_id)
        return freed

    async def load_with_room(
        self,
        graph_id: str,
        path: str,
        fmt: str,
        num_vertices: int | None,
        canonical: str | None,
        weights_path: str | None = None,
    ) -> dict[str, Any]:
        """LOAD; while the worker answers that it has no room (507), evict idle graphs and ask again."""
        worker = self._worker
        while True:
            if not worker.accepting:  # restarting: the load goes to the next process
                await worker.wait_accepting(self._start_timeout_s)
            try:
                summary: dict[str, Any] = await worker.send(
                    LOAD, graph_id, path, fmt, num_vertices, canonical, weights_path
                )
                return summary
            except InsufficientMemoryError as exc:
                shortfall = (exc.needed_bytes or 0) - (exc.available_bytes or 0)
                if await self.evict(max(shortfall, 1), keep=graph_id) == 0:
                    raise

    async def ensure_resident(self, graph_id: str) -> None:
        """Load an evicted graph back from the spool before a job on it (the pipe keeps the order)."""
        residency = self.graphs.get(graph_id)
        if residency is None or residency.status != "evicted":
            return
        source = self._sources(graph_id)
        if source is None:
            return  # deleted meanwhile: the job's MST request fails with graph not resident
        residency.status = "loading"
        try:
            summary = await self.load_with_room(
                graph_id, source.path, source.fmt, source.num_vertices, None, source.weights_path
            )
        except BaseException:
            if self.graphs.get(graph_id) is residency:
                residency.status = "evicted"
            raise
        residency.status = "resident"
        residency.device_bytes = int(summary["device_bytes"])
        residency.last_used = time.monotonic()

    def adopt(self, graph_id: str, device_bytes: int, generation: int) -> None:
        """Record a graph loaded by :meth:`~.handle.WorkerHandle.load_new` as placed here (reloaded
        if its worker restarted since)."""
        self.graphs[graph_id] = Residency(graph_id, "resident", device_bytes)
        if generation != self._worker.generation:  # loaded on a process that died since
            self.want_reload(graph_id)

    def forget(self, graph_id: str, *, loaded: bool = False) -> None:
        """Drop a graph from the device (after whatever is already in the pipe).

        ``loaded``: the worker holds it although it was never adopted (a create that failed late).
        """
        if (self.graphs.pop(graph_id, None) is not None or loaded) and self._worker.accepting:
            fut = self._worker.send(DROP, graph_id)
            fut.add_done_callback(consume)  # a lost worker drops it anyway

    def place(self, graph_id: str, device_bytes: int, weights_version: int = 0) -> None:
        """Place a stored dataset at start-up: it is reloaded once the worker is ready."""
        self.graphs[graph_id] = Residency(graph_id, "loading", device_bytes, weights_version=weights_version)
        self.want_reload(graph_id)

    # -- reloads ------------------------------------------------------------------------------

    def lost_process(self) -> None:
        """The process is gone: what it held is loading again (with the next one), but the evicted."""
        for residency in self.graphs.values():
            if residency.status != "evicted":
                residency.status = "loading"
        self.pending.clear()
        self.unsent.clear()
        if self._reloader is not None:
            self._reloader.cancel()

    def begin_reloads(self) -> None:
        """A new process holds nothing: every dataset placed here (not evicted, not failed) is reloaded."""
        worker = self._worker
        self.unsent = {g for g, r in self.graphs.items() if r.status == "loading"}
        self.pending = set(self.unsent)
        worker.dispatch.reloads_begin()
        lost = WorkerLostError(f"worker {worker.index} was lost while loading the dataset; submit again.")
        worker.requests.fail_parked(keep=self.pending, lost=lost)  # deleted or evicted since

    def want_reload(self, graph_id: str) -> None:
        """(Re)load a placed dataset in the background (placed at start-up, or its load was on a
        process that has died since)."""
        residency = self.graphs.get(graph_id)
        if residency is None:
            return
        residency.status = "loading"
        if self._worker.accepting:  # else the next process's begin_reloads() takes it
            self.unsent.add(graph_id)
            self.pending.add(graph_id)
            self.kick_reloads()

    def kick_reloads(self) -> None:
        """Start the loop of reloads if there is something to reload; say ``ready`` if nothing is left."""
        worker = self._worker
        if self.unsent and (self._reloader is None or self._reloader.done()):
            name = f"reload-{worker.index}"
            self._reloader = asyncio.create_task(self._reload_all(worker.generation), name=name)
        elif not self.pending and worker.state == "reloading":
            worker.all_back()

    async def _reload_all(self, generation: int) -> None:
        """Reload the datasets of the current process one at a time (jobs for those already back
        go into the pipe between them), in :func:`~.restarts.next_reload` order."""
        worker = self._worker
        while generation == worker.generation and worker.accepting:
            needed = itertools.chain(worker.requests.held_datasets(), worker.dispatch.needed())
            sizes = {g: r.device_bytes for g, r in self.graphs.items()}
            graph_id = next_reload(self.unsent, needed, sizes)
            if graph_id is None:
                break
            await self._reload(graph_id)
            await worker.dispatch.hand_over()
        if generation == worker.generation and worker.state == "reloading" and not self.pending:
            worker.all_back()

    async def _reload(self, graph_id: str) -> None:
        """Load a placed dataset from the spool on the current process, and release what waits for it."""
        worker = self._worker
        self.unsent.discard(graph_id)
        generation = worker.generation
        source = self._sources(graph_id)
        residency = self.graphs.get(graph_id)
        if source is None or residency is None:  # deleted meanwhile
            self.graphs.pop(graph_id, None)
            self._done(graph_id, None, None)
            return
        residency.status = "loading"
        started = time.perf_counter()
        fut = worker.send(
            LOAD,
            graph_id,
            source.path,
            source.fmt,
            source.num_vertices,
            None,
            source.weights_path,
            reload=True,
        )
        for request in worker.requests.release(graph_id):  # behind the load in the pipe
            worker.post(request)
        try:
            summary = await fut
        except WorkerLostError:
            return  # the next process reloads it (and answers what waits for it)
        except InsufficientMemoryError as exc:
            if generation == worker.generation and graph_id in self.graphs:
                self.graphs[graph_id].status = "evicted"  # no room now: loaded by its next job
            log.info("worker %d: no room to reload graph %s; left evicted", worker.index, graph_id)
            self._done(graph_id, None, exc)
            return
        except Exception as exc:
            if generation == worker.generation and graph_id in self.graphs:
                self.graphs[graph_id].status = "failed"
                self.graphs[graph_id].error = str(exc)
            log.error("worker %d could not reload graph %s: %s", worker.index, graph_id, exc)
            self._done(graph_id, None, exc)
            return
        if generation == worker.generation and graph_id in self.graphs:
            residency = self.graphs[graph_id]
            residency.status = "resident"
            residency.device_bytes = int(summary["device_bytes"])
            took_ms = (time.perf_counter() - started) * 1e3
            log.info(
                "worker %d reloaded %s in %.0f ms (%s)",
                worker.index,
                graph_id,
                took_ms,
                summary.get("timings_ms"),
            )
        self._done(graph_id, summary, None)

    def _done(self, graph_id: str, summary: dict[str, Any] | None, error: BaseException | None) -> None:
        """A dataset's reload has ended: answer the loads parked for it, wake the dispatcher."""
        worker = self._worker
        self.pending.discard(graph_id)
        worker.requests.answer_parked(graph_id, summary, error)
        for request in worker.requests.release(graph_id):  # it was deleted or failed: they fail on the worker
            worker.post(request)
        worker.dispatch.wake()
