"""The supervisor: starts the worker processes, routes requests to them and restarts them when they die.

One worker per GPU (``MST_GPUS``, default all visible), or ``MST_CPU_WORKERS``
CPU workers (default one) where there is none. Each :class:`WorkerHandle` owns:

* the process (``spawn``), one duplex pipe whose replies the API's event
  loop reads as soon as they arrive (``add_reader``: no thread, no hop) and
  turns into resolved asyncio futures;
* the residency map of the graphs placed on it, and its job queue, dispatched
  by an asyncio task: a queued job can be cancelled until it is handed to the
  worker.

Pipelining (``MST_DISPATCH_DEPTH``): up to that many tasks are handed to the
worker at once, so its pipe holds the next jobs while it computes one and it
never waits for the API's event loop between jobs (the loop may be busy with
HTTP). The worker still runs them one at a time, in the order they were
queued: the dispatcher starts each handed task's coroutine in queue order and
each sends its request before its first wait (asyncio runs new tasks first in,
first out), and the pipe keeps that order. Only tasks that say so
(``pipelined = True``: a job or a lost result's recomputation on a graph
resident now, a one-shot computation) go ahead of an unfinished one; any other
(a weight update, an evicted graph's job that must load it first, a shard's
step) waits until everything handed before it has finished, and everything
after it waits for it. A handed job is ``running`` (no longer cancellable);
if the worker dies, only the request it was running fails (see Failure below).
Depth 1 is the old dispatch: one task at a time. One-shot computations (``batched = True``) are
handed up to :data:`BATCHED_DEPTH` at once whatever the depth: the worker computes those waiting
together in its pipe as one run, so the pipe must hold the next batch while it computes one
(with 16, a batch's members were all handed, the pipe was empty until their replies came back,
and the worker waited for the event loop between batches).

With ``MST_WORKER_POOL=ray`` each handle is a :class:`~.ray_pool.RayWorkerHandle` instead: the
same handle over Ray actor calls, the worker a Ray actor on any host of a Ray cluster; placement,
eviction, reloads, queues and restarts below are the same.

Placement: a new graph goes to the worker with the most free device memory
(as the worker last reported it, less what is being loaded); a job goes to
the worker that holds its graph. A sharded graph (see
:mod:`service.runtime.sharding`) is placed shard by shard on distinct workers,
each shard held under its own key (:func:`shard_key`) like a graph.

Eviction: when the worker answers a LOAD with 507 (the graph does not fit in
what is free, see ``worker._Worker._admit``), its idle graphs (no job queued
or running) are evicted, least recently used first (last upload, reload or
job), until the shortfall is freed, and the LOAD is sent again; with nothing
left to evict the 507 goes to the client. An evicted graph is dropped from the
worker but stays in the spool and the catalog (``residency.status =
"evicted"``); its next job loads it back first (:meth:`WorkerHandle.ensure_resident`,
evicting others the same way), in the worker's ordered pipe.

Failure: a worker that exits, whose heartbeat stamp is older than
``MST_HEARTBEAT_TIMEOUT_S`` once it is up, or that is not up within
``MST_WORKER_START_TIMEOUT_S`` (it is then SIGKILLed), is replaced: by its
standby, a warm spare process (``MST_STANDBY_WORKER``, :class:`Spare`), at
once, else by a new process after a back-off. **A death fails one request at
most**, the one the process was running (read from the run stamp it shares,
:class:`~.restarts.RunStamp`; the Ray pool's one request in flight): a job
ends **failed** with ``error.type = "worker_lost"`` and is not re-queued,
because a job that killed its worker would likely kill the next one too.
The requests it had not started keep their futures and go to the next
process in the order they were made (:meth:`WorkerHandle._sort_out_requests`);
those it was computing as one run (coalesced jobs, a batch of one-shots) go
too, each **suspect**: written to the pipe alone, and failed if a process dies
running it again. Rules and reasons: :mod:`.restarts`.

Reloads: a new process takes requests as soon as it has warmed up and answered
its probe computation (``/readyz`` is ready); the datasets placed on it come
back from the spool **in the background**, one LOAD at a time
(:meth:`WorkerHandle._reload_all`), those requests or queued tasks wait for
first, smallest first. A request on a dataset whose LOAD is not written yet is
held behind it (the pipe is ordered, so a job never overtakes its graph's
reload); the dispatcher leaves the tasks of a dataset being reloaded in the
queue and hands the others meanwhile, and lets the tasks of a dataset just
reloaded into the pipe before the next LOAD.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import logging
import multiprocessing
import os
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any, Literal, Protocol

from ..errors import InsufficientMemoryError, ServiceUnavailableError, WorkerLostError
from ..metrics import WorkerGauges
from ..settings import Settings
from . import worker as worker_module
from .restarts import Request, RunStamp, next_reload, triage
from .worker import WorkerConfig

log = logging.getLogger("service.runtime.supervisor")

WorkerState = Literal["starting", "reloading", "ready", "dead", "stopped"]
#: requests in the pipe at once; more wait in an outbox, so a send never blocks the event loop
MAX_IN_FLIGHT = 2 * worker_module.MAX_COALESCED
#: batched tasks (one-shots) handed at once, whatever MST_DISPATCH_DEPTH says: two batches' worth
BATCHED_DEPTH = 2 * worker_module.MAX_COALESCED
#: standby processes that may die in a row before they are warm before the worker gives up on one
SPARE_ATTEMPTS = 3
#: pause before a new standby after one died (doubled for each in a row that died cold)
SPARE_PAUSE_S = 1.0
_MP = multiprocessing.get_context("spawn")


class Task(Protocol):
    """A unit of work in a worker's queue (a job, a one-shot computation).

    A task with a true ``pipelined`` attribute may be handed to the worker while others are still
    unfinished (see the module's docstring: it sends its one request before its first wait).
    """

    task_id: str

    async def run(self, worker: WorkerHandle) -> None: ...

    def abandon(self, reason: str) -> None:
        """The task will never run (the service is stopping)."""


@dataclass
class Residency:
    graph_id: str
    status: Literal["loading", "resident", "evicted", "failed"]
    device_bytes: int
    error: str | None = None
    #: weight updates queued so far: the version a job submitted now computes on
    weights_version: int = 0
    #: time.monotonic() of the graph's last upload, reload or job: eviction takes the oldest first
    last_used: float = field(default_factory=time.monotonic)


@dataclass
class Spare:
    """A warmed-up worker process waiting to take the worker's place (``MST_STANDBY_WORKER``)."""

    process: Any
    conn: Connection
    heartbeat: Any
    #: its RunStamp's shared array
    running: Any
    generation: int
    spawned_at: float
    #: its ``ready`` info once it is warm
    info: dict[str, Any] | None = None


@dataclass(frozen=True)
class GraphSource:
    """Where a worker (re)loads a graph from: a spool file and the record's vertex count."""

    graph_id: str
    path: str
    num_vertices: int | None
    #: the weights that replaced the uploaded ones (``.npy``), if any
    weights_path: str | None = None
    #: how the worker reads the file: ``npz`` for a graph, ``points.npz`` for a point set
    fmt: str = "npz"


class WorkerHandle:
    """The API side of one worker process."""

    def __init__(
        self, config: WorkerConfig, settings: Settings, sources: Callable[[str], GraphSource | None]
    ):
        self.config = config
        self.index = config.index
        self._settings = settings
        self._sources = sources
        self.state: WorkerState = "starting"
        self.info: dict[str, Any] = {}
        #: why the worker last died or failed to start (kept after it is back, for /readyz)
        self.last_error: str | None = None
        self._kill_reason: str | None = None
        self.restarts = 0
        #: restarts in a row of processes that never answered a request: the crash-loop back-off
        self._failures_in_row = 0
        self._served = False
        self.generation = 0
        self.started_at = 0.0
        self.free_bytes = 0
        self.total_bytes = 0
        self.reserved_bytes = 0
        self.graphs: dict[str, Residency] = {}
        #: tasks handed to the worker and not finished (in the order they were handed)
        self.running: list[Task] = []
        self._tasks: deque[Task] = deque()
        #: set whenever a handed task finishes (the dispatcher may hand the next)
        self._slot: asyncio.Event | None = None
        #: set when the dispatcher has handed what it could and waits (see _reload_all)
        self._dispatched: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._accepting: asyncio.Event | None = None
        self._has_tasks: asyncio.Event | None = None
        self._process: Any = None
        self._conn: Connection | None = None
        self._heartbeat: Any = None
        #: which requests the process computes now (read when it dies, see restarts.RunStamp)
        self._stamp = RunStamp()
        #: requests written (or being written) to the pipe and not answered yet, by request id
        self._requests: dict[int, Request] = {}
        #: STORED notes awaited for answered requests, by request id (see :meth:`request_with_note`)
        self._notes: dict[int, asyncio.Future[None]] = {}
        self._outbox: deque[Request] = deque()
        self._in_flight = 0
        #: the id of a suspect request in the pipe: nothing is written behind it until it is answered
        self._alone: int | None = None
        #: requests of a dead worker that go to the next one (see restarts.triage)
        self._kept: list[Request] = []
        #: requests waiting for their dataset's reload to be written first, by dataset
        self._held: dict[str, list[Request]] = {}
        #: loads of placed datasets made before a death: answered by the dataset's reload
        self._parked: dict[str, list[Request]] = {}
        #: datasets the current process has not reloaded yet, and those of them not yet asked for
        self._reloading: set[str] = set()
        self._reload_unsent: set[str] = set()
        self._reloader: asyncio.Task[None] | None = None
        #: when the dispatcher first left a task in the queue for its dataset's reload, by task id
        self._held_tasks: dict[str, float] = {}
        #: how long handed tasks waited in the queue for their dataset's reload (ms), by task id
        self.reload_waits: dict[str, float] = {}
        #: requests re-sent to a new process after a death, and requests lost (running when it died)
        self.requests_resent = 0
        self.requests_lost = 0
        #: the last process that got ready (requests kept at a death wait for a later one)
        self._ready_generation = 0
        #: the last start's phases (ms), as the worker measured them (see worker._Worker.start)
        self.startup_ms: dict[str, float] = {}
        #: what deciding on the workers took at the service's start (ms; MST_BACKEND=auto probes GPUs)
        self.plan_ms: float | None = None
        #: framed requests not yet written to the pipe (whole messages are appended, see _flush)
        self._unsent = bytearray()
        self._writing = False  # the loop waits for the pipe to drain (add_writer)
        self._ids = itertools.count(1)
        #: numbers of the processes started (the worker's, the standby's): messages name theirs
        self._generations = itertools.count(1)
        self._spawned_at = 0.0
        #: time.monotonic() when the last death was seen (see last_restart_ms)
        self._died_at: float | None = None
        #: milliseconds from the last death seen to a process taking requests again
        self.last_restart_ms: float | None = None
        #: the warm spare process (MST_STANDBY_WORKER), its start in progress, its failed starts
        self._spare: Spare | None = None
        self._spare_starting = False
        self._spare_failures = 0
        self._stopping = False
        self._dispatcher: asyncio.Task[None] | None = None
        self._restart_task: asyncio.Task[None] | None = None
        self._tasks_bg: set[asyncio.Future[None]] = set()

    # -- life cycle ---------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return None if self._process is None else int(self._process.pid)

    @property
    def accepting(self) -> bool:
        return self.state in ("reloading", "ready")

    @property
    def started(self) -> bool:
        return self._loop is not None

    def heartbeat_age(self) -> float:
        return 0.0 if self._heartbeat is None else time.monotonic() - float(self._heartbeat.value)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._accepting = asyncio.Event()
        self._has_tasks = asyncio.Event()
        self._slot = asyncio.Event()
        self._dispatched = asyncio.Event()
        self._dispatcher = asyncio.create_task(self._dispatch_loop(), name=f"dispatch-{self.index}")
        await self._spawn()

    def _spawn_blocking(self) -> tuple[Any, Connection, Any, Any]:
        parent, child = _MP.Pipe(duplex=True)
        heartbeat = _MP.RawValue("d", time.monotonic())
        running = _MP.RawArray("q", 2)
        process = _MP.Process(
            target=worker_module.main,
            args=(child, heartbeat, self.config, running),
            name=f"mst-worker-{self.index}",
            daemon=True,
        )
        process.start()
        child.close()
        return process, parent, heartbeat, running

    async def _spawn(self) -> None:
        spawned_at = time.monotonic()
        process, conn, heartbeat, running = await asyncio.to_thread(self._spawn_blocking)
        generation = next(self._generations)
        self._take(process, conn, heartbeat, running, generation, spawned_at)
        assert self._loop is not None
        self._loop.add_reader(conn.fileno(), self._readable, conn, process, generation, bytearray())
        log.info("worker %d started (pid %d, backend %s)", self.index, process.pid, self.config.backend)

    def _take(
        self, process: Any, conn: Connection, heartbeat: Any, running: Any, generation: int, spawned_at: float
    ) -> None:
        """Make ``process`` the worker's (a new one, or the standby taking over)."""
        self.generation = generation
        self._process, self._conn, self._heartbeat = process, conn, heartbeat
        self._stamp = RunStamp(running)
        self.state = "starting"
        self._served = False
        self.started_at = self._spawned_at = spawned_at
        self._in_flight = 0
        self._alone = None
        self._outbox.clear()
        self._unsent.clear()
        self._writing = False

    def _readable(self, conn: Connection, process: Any, generation: int, inbox: bytearray) -> None:
        """The pipe has data: handle every whole message there.

        The bytes are read as they come into ``inbox`` and each message is taken once it is all
        there: a reply larger than the socket's buffer (a batch of one-shot forests) arrives in
        parts, and the loop's non-blocking socket would make ``Connection.recv`` fail midway.
        """
        assert self._loop is not None
        fd = conn.fileno()
        try:
            while True:
                try:
                    data = os.read(fd, _READ_SIZE)
                except (BlockingIOError, InterruptedError):
                    break
                if not data:
                    raise EOFError
                inbox += data
                if len(data) < _READ_SIZE:
                    break
        except (EOFError, OSError):  # the worker is gone
            self._loop.remove_reader(fd)
            self._background(self._reap(process, generation))
        for message in _messages(inbox):
            if isinstance(message, BaseException):  # an unpicklable reply: still a reply, say what it was
                log.error("worker %d sent a message that cannot be read: %r", self.index, message)
                continue
            self._on_message(generation, message)

    async def _reap(self, process: Any, generation: int) -> None:
        await asyncio.to_thread(process.join, 2.0)  # so its exit code is known
        self._on_exit(generation)

    def _on_message(self, generation: int, message: tuple[Any, ...]) -> None:
        if generation != self.generation:
            if self._spare is not None and generation == self._spare.generation:
                self._spare_message(message)
            return
        head = message[0]
        if head == "ready":
            self._on_ready(message[1])
            return
        if head == "failed":
            self._kill_reason = f"failed to start: {type(message[1]).__name__}: {message[1]}"
            log.error("worker %d %s", self.index, self._kill_reason)
            return  # the process exits next; _on_exit restarts it
        if head == worker_module.STORED:
            _, req_id, error = message
            _settle(self._notes.pop(req_id, None), None, error)
            return
        req_id, ok, payload = message
        self._served = True
        self._in_flight -= 1
        if req_id == self._alone:
            self._alone = None
        self._flush()
        request = self._requests.pop(req_id, None)
        if request is None:
            return
        if isinstance(payload, dict) and "free_bytes" in payload:
            self.free_bytes, self.total_bytes = int(payload["free_bytes"]), int(payload["total_bytes"])
        if request.note is not None:
            if ok:
                self._notes[req_id] = request.note
            else:  # no note follows a failed request
                _settle(request.note, None, payload)
        _settle(request.future, payload if ok else None, None if ok else payload)

    def _on_ready(self, info: dict[str, Any]) -> None:
        self.info = info
        self.free_bytes, self.total_bytes = int(info["free_bytes"]), int(info["total_bytes"])
        # the process's own start-up; "process": from the spawn to its entry point (interpreter and
        # the worker module's imports), on the system-wide monotonic clock both sides read
        self.startup_ms = {}
        if "entered_at" in info:  # a local process (a Ray actor's start is Ray's)
            self.startup_ms["process"] = round((info["entered_at"] - self._spawned_at) * 1e3, 3)
        self.startup_ms.update(info.get("startup_ms", {}))
        if self._died_at is not None:
            self.last_restart_ms = round((time.monotonic() - self._died_at) * 1e3, 3)
            self._died_at = None
        self.state = "reloading"
        self._ready_generation = self.generation
        self._begin_reloads()
        kept, self._kept = self._kept, []
        log.info(
            "worker %d ready on %s (start-up %s ms); reloading %d dataset(s) in the background%s",
            self.index,
            info.get("device"),
            self.startup_ms or round(info.get("warmup_ms", 0.0)),
            len(self._reloading),
            f", re-sending {len(kept)} request(s) of the worker it replaces" if kept else "",
        )
        for request in kept:  # in the order they were made, each behind its dataset's reload
            self._post_or_hold(request)
        self.requests_resent += len(kept)
        assert self._accepting is not None
        self._accepting.set()
        self._kick_reloader()

    # -- reloads (see restarts.py) ------------------------------------------------------------

    def _begin_reloads(self) -> None:
        """A new process holds nothing: every dataset placed here (not evicted, not failed) is reloaded."""
        self._reload_unsent = {g for g, r in self.graphs.items() if r.status == "loading"}
        self._reloading = set(self._reload_unsent)
        self._held_tasks.clear()
        lost = WorkerLostError(f"worker {self.index} was lost while loading the dataset; submit again.")
        for dataset in [d for d in self._parked if d not in self._reloading]:  # deleted or evicted since
            for request in self._parked.pop(dataset):
                _settle(request.future, None, lost)

    def want_reload(self, graph_id: str) -> None:
        """(Re)load a placed dataset in the background (placed at start-up, or its load was on a
        process that has died since)."""
        residency = self.graphs.get(graph_id)
        if residency is None:
            return
        residency.status = "loading"
        if self.accepting:  # else the next process's _begin_reloads takes it
            self._reload_unsent.add(graph_id)
            self._reloading.add(graph_id)
            self._kick_reloader()

    def _kick_reloader(self) -> None:
        if self._reload_unsent and (self._reloader is None or self._reloader.done()):
            name = f"reload-{self.index}"
            self._reloader = asyncio.create_task(self._reload_all(self.generation), name=name)
        elif not self._reloading and self.state == "reloading":
            self._reloaded()

    def _reloaded(self) -> None:
        """Every dataset placed here is back: the worker is ``ready``; a standby may start now."""
        self.state = "ready"
        self._ensure_spare()

    async def _reload_all(self, generation: int) -> None:
        """Reload the datasets of the current process one at a time (jobs for those already back
        go into the pipe between them), in :func:`~.restarts.next_reload` order."""
        while generation == self.generation and self.accepting:
            needed = itertools.chain(
                self._held, (getattr(t, "graph_id", None) for t in itertools.chain(self.running, self._tasks))
            )
            sizes = {g: r.device_bytes for g, r in self.graphs.items()}
            graph_id = next_reload(self._reload_unsent, (d for d in needed if d is not None), sizes)
            if graph_id is None:
                break
            await self._reload(graph_id)
            await self._let_dispatch()
        if generation == self.generation and self.state == "reloading" and not self._reloading:
            self._reloaded()

    async def _let_dispatch(self) -> None:
        """Let the dispatcher hand the queued tasks it can before the next reload goes into the pipe.

        It hands them, then sets ``_dispatched`` and waits; asyncio runs the handed tasks' first
        steps (each writes its request) before this coroutine wakes up.
        """
        assert self._dispatched is not None and self._slot is not None and self._has_tasks is not None
        if not self._tasks:
            return
        self._dispatched.clear()
        self._has_tasks.set()
        self._slot.set()
        await self._dispatched.wait()

    async def _reload(self, graph_id: str) -> None:
        """Load a placed dataset from the spool on the current process, and release what waits for it."""
        self._reload_unsent.discard(graph_id)
        generation = self.generation
        source = self._sources(graph_id)
        residency = self.graphs.get(graph_id)
        if source is None or residency is None:  # deleted meanwhile
            self.graphs.pop(graph_id, None)
            self._reload_done(graph_id, None, None)
            return
        residency.status = "loading"
        started = time.perf_counter()
        fut = self._send(
            worker_module.LOAD,
            graph_id,
            source.path,
            source.fmt,
            source.num_vertices,
            None,
            source.weights_path,
            reload=True,
        )
        for request in self._held.pop(graph_id, []):  # behind the load in the pipe
            self._post(request)
        try:
            summary = await fut
        except WorkerLostError:
            return  # the next process reloads it (and answers what waits for it)
        except InsufficientMemoryError as exc:
            if generation == self.generation and graph_id in self.graphs:
                self.graphs[graph_id].status = "evicted"  # no room now: loaded by its next job
            log.info("worker %d: no room to reload graph %s; left evicted", self.index, graph_id)
            self._reload_done(graph_id, None, exc)
            return
        except Exception as exc:
            if generation == self.generation and graph_id in self.graphs:
                self.graphs[graph_id].status = "failed"
                self.graphs[graph_id].error = str(exc)
            log.error("worker %d could not reload graph %s: %s", self.index, graph_id, exc)
            self._reload_done(graph_id, None, exc)
            return
        if generation == self.generation and graph_id in self.graphs:
            residency = self.graphs[graph_id]
            residency.status = "resident"
            residency.device_bytes = int(summary["device_bytes"])
            took_ms = (time.perf_counter() - started) * 1e3
            log.info(
                "worker %d reloaded %s in %.0f ms (%s)",
                self.index,
                graph_id,
                took_ms,
                summary.get("timings_ms"),
            )
        self._reload_done(graph_id, summary, None)

    def _reload_done(
        self, graph_id: str, summary: dict[str, Any] | None, error: BaseException | None
    ) -> None:
        """A dataset's reload has ended: answer the loads parked for it, wake the dispatcher."""
        self._reloading.discard(graph_id)
        for request in self._parked.pop(graph_id, []):
            _settle(request.future, summary, error)
        for request in self._held.pop(graph_id, []):  # it was deleted or failed: they fail on the worker
            self._post(request)
        assert self._slot is not None
        self._slot.set()

    # -- death --------------------------------------------------------------------------------

    def _running_ids(self) -> range:
        """The ids of the requests the dead process was running (see restarts.RunStamp)."""
        return self._stamp.running()

    def _on_exit(self, generation: int) -> None:
        if self._spare is not None and generation == self._spare.generation:
            self._spare_exited()
            return
        if generation != self.generation or self.state in ("dead", "stopped"):
            return
        self._died_at = time.monotonic()
        code = None if self._process is None else self._process.exitcode
        was = self.state
        self.state = "stopped" if self._stopping else "dead"
        assert self._accepting is not None
        self._accepting.clear()
        self.last_error = self._kill_reason or f"the process exited (exit code {code})"
        self._kill_reason = None
        lost = WorkerLostError(
            f"worker {self.index} (pid {self.pid}) was lost while handling the request ({self.last_error}); "
            "it is being restarted, submit again."
        )
        sorted_out = self._sort_out_requests(lost)
        for fut in self._notes.values():  # answered: their result files are computed again if asked for
            _settle(fut, None, lost)
        self._notes.clear()
        self._outbox.clear()
        self._in_flight = 0
        self._alone = None
        self._stop_writing()
        self._unsent.clear()
        if self._conn is not None:
            self._conn.close()
        for residency in self.graphs.values():
            if residency.status != "evicted":
                residency.status = "loading"
        self._reloading.clear()
        self._reload_unsent.clear()
        if self._reloader is not None:
            self._reloader.cancel()
        if self._stopping:
            return
        log.error(
            "worker %d died (state %s, exit code %s); restarting it. %s",
            self.index,
            was,
            code,
            sorted_out,
        )
        self._restart_task = asyncio.create_task(self._restart())

    def _sort_out_requests(self, lost: WorkerLostError) -> str:
        """Fail, keep or park the unreplied requests of the dead process (see restarts.triage);
        a line that says what became of them."""
        pending = [*self._requests.values(), *(r for rs in self._held.values() for r in rs)]
        self._requests.clear()
        self._held.clear()
        if self._stopping:
            for request in [*pending, *self._kept, *(r for rs in self._parked.values() for r in rs)]:
                _settle(request.future, None, lost)
                _settle(request.note, None, lost)
            self._kept.clear()
            self._parked.clear()
            return ""
        out = triage(pending, self._running_ids())
        for request in [*out.lost, *out.dropped]:
            _settle(request.future, None, lost)
            _settle(request.note, None, lost)
        self.requests_lost += len(out.lost)
        for request in out.kept:
            dataset = request.args[0] if request.op == worker_module.LOAD else None
            if dataset in self.graphs:  # an evicted dataset's load (ensure_resident): its reload answers it
                self._parked.setdefault(str(dataset), []).append(request)
            else:
                self._kept.append(request)
        self._kept.sort(key=lambda r: r.seq)
        if self._kept and self._loop is not None:  # they wait for the next process, up to the start timeout
            self._loop.call_later(
                self._settings.worker_start_timeout_s, self._expire_kept, self.generation, lost
            )
        suspects = sum(r.suspect for r in self._kept)
        return (
            f"Requests: {len(out.lost)} lost (running), {len(self._kept)} to re-send "
            f"({suspects} suspect), {len(self._parked)} dataset load(s) answered by reloads."
        )

    def _expire_kept(self, dead: int, lost: WorkerLostError) -> None:
        """No process took the requests of process ``dead`` within MST_WORKER_START_TIMEOUT_S: they fail."""
        if self._ready_generation > dead:
            return
        expired = [*self._kept, *(r for rs in self._parked.values() for r in rs)]
        self._kept.clear()
        self._parked.clear()
        for request in expired:
            _settle(request.future, None, lost)
            _settle(request.note, None, lost)

    async def _restart(self) -> None:
        if self._process is not None:
            await asyncio.to_thread(self._process.join, 5)
        if self._served or time.monotonic() - self.started_at > 60:
            self._failures_in_row = 0  # it was up and answered (or ran a while): not a crash loop
        else:
            self._failures_in_row += 1  # died before answering anything: back off
        delay = min(0.2 * 2 ** min(self._failures_in_row, 8), 30.0)
        self.restarts += 1
        if self._spare is not None and not self._stopping:
            self._promote()  # warm already: no pause, no start
            return
        await asyncio.sleep(delay)
        if not self._stopping:
            await self._spawn()

    def kill(self, reason: str) -> None:
        """SIGKILL the process (a stale heartbeat, a start that takes too long); it is restarted."""
        if self._process is not None and self._process.is_alive():
            log.error("killing worker %d (pid %s): %s", self.index, self.pid, reason)
            self._kill_reason = reason
            self._process.kill()

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop dispatching, let the running task finish (up to ``timeout`` s), stop the process.

        Queued jobs stay queued in the store (the next start runs them); a job still running after
        ``timeout`` is failed with ``worker_lost`` at the next start (``Store.recover``).
        """
        self._stopping = True
        if self._restart_task is not None:
            self._restart_task.cancel()
        spare = self._stop_spare()
        deadline = time.monotonic() + timeout
        while self.running and self.accepting and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._dispatcher
        for task in self._tasks:
            task.abandon("the service stopped before the job ran")
        self._tasks.clear()
        process = self._process
        if process is None:
            return
        if self.state in ("reloading", "ready") and self._conn is not None:
            self._unsent += worker_module.framed((worker_module.STOP, 0))  # after any request half written
            self._flush()
        await asyncio.to_thread(process.join, timeout)
        if process.is_alive():
            process.kill()
            await asyncio.to_thread(process.join, timeout)
        self.state = "stopped"
        self._sort_out_requests(WorkerLostError(f"worker {self.index} stopped with the service."))
        if spare is not None:
            await asyncio.to_thread(spare.join, timeout)
            if spare.is_alive():
                spare.kill()

    # -- standby: a warm spare process (MST_STANDBY_WORKER) -----------------------------------

    def _wants_spare(self) -> bool:
        setting = self._settings.standby_worker
        backend = self.info.get("backend", self.config.backend)  # a worker started as "auto" says
        wanted = setting == "on" or (setting == "auto" and backend == "gpu")
        return wanted and not self._stopping and self._spare_failures < SPARE_ATTEMPTS

    def _ensure_spare(self) -> None:
        """Start a spare process if the worker should have one and has none."""
        if self._wants_spare() and self._spare is None and not self._spare_starting:
            self._background(self._spawn_spare())

    async def _spawn_spare(self) -> None:
        self._spare_starting = True
        try:
            spawned_at = time.monotonic()
            process, conn, heartbeat, running = await asyncio.to_thread(self._spawn_blocking)
        finally:
            self._spare_starting = False
        spare = Spare(process, conn, heartbeat, running, next(self._generations), spawned_at)
        self._spare = spare
        assert self._loop is not None
        self._loop.add_reader(conn.fileno(), self._readable, conn, process, spare.generation, bytearray())
        log.info("worker %d: standby process started (pid %d)", self.index, process.pid)
        if self._stopping:
            process.kill()

    def _spare_message(self, message: tuple[Any, ...]) -> None:
        assert self._spare is not None
        if message[0] == "ready":
            self._spare.info = message[1]
            self._spare_failures = 0
            log.info("worker %d: standby process (pid %d) warm", self.index, self._spare.process.pid)
        elif message[0] == "failed":
            log.error("worker %d: standby process failed to start: %s", self.index, message[1])

    def _spare_exited(self) -> None:
        spare, self._spare = self._spare, None
        assert spare is not None
        spare.conn.close()
        if self._stopping:
            return
        if spare.info is None:
            self._spare_failures += 1
        if self._spare_failures >= SPARE_ATTEMPTS:
            log.error(
                "worker %d: %d standby processes in a row died before they were warm; no standby "
                "from now on (see MST_STANDBY_WORKER)",
                self.index,
                SPARE_ATTEMPTS,
            )
            return
        log.warning(
            "worker %d: standby process (pid %s) exited; starting another", self.index, spare.process.pid
        )

        async def later() -> None:
            await asyncio.sleep(SPARE_PAUSE_S * 2**self._spare_failures)
            if self.state == "ready":  # else it starts once the worker is ready again
                self._ensure_spare()

        self._background(later())

    def _promote(self) -> None:
        """The spare process takes the dead worker's place (warm: it takes requests at once)."""
        spare, self._spare = self._spare, None
        assert spare is not None and self._loop is not None
        self._take(
            spare.process, spare.conn, spare.heartbeat, spare.running, spare.generation, spare.spawned_at
        )
        log.info("worker %d: the standby process (pid %d) takes over", self.index, spare.process.pid)
        if spare.info is not None:
            self._on_ready(spare.info)
        # else its "ready" message comes as this worker's

    def check_spare(self, now: float) -> None:
        """Kill a spare whose heartbeat is stale, or that is not warm within the start timeout."""
        spare = self._spare
        if spare is None:
            return
        if spare.info is None and now - spare.spawned_at > self._settings.worker_start_timeout_s:
            log.error("worker %d: standby not warm within MST_WORKER_START_TIMEOUT_S; killing it", self.index)
            spare.process.kill()
        elif (
            spare.info is not None and now - float(spare.heartbeat.value) > self._settings.heartbeat_timeout_s
        ):
            log.error("worker %d: standby heartbeat stale; killing it", self.index)
            spare.process.kill()

    def _stop_spare(self) -> Any:
        """Stop the spare process (a warm one is asked to, a cold one is killed: it holds
        nothing); the process (to join), or None."""
        spare, self._spare = self._spare, None
        if spare is None:
            return None
        if spare.info is None:
            spare.process.kill()
        with contextlib.suppress(OSError):
            os.write(spare.conn.fileno(), worker_module.framed((worker_module.STOP, 0)))
        return spare.process

    def _background(self, work: Awaitable[None]) -> None:
        """Run ``work`` without awaiting it, keeping a reference until it is done."""
        task = asyncio.ensure_future(work)
        self._tasks_bg.add(task)
        task.add_done_callback(self._tasks_bg.discard)

    # -- requests -----------------------------------------------------------------------------

    def _send(
        self, op: str, *args: Any, note: asyncio.Future[None] | None = None, reload: bool = False
    ) -> asyncio.Future[Any]:
        """Queue a request for the pipe; the future of its reply (and ``note`` awaits its STORED note).

        ``reload``: the supervisor's reload of a dataset (never re-sent to a next process). An MST
        or weights request on a dataset whose reload is not written yet waits for it (held).
        """
        assert self._loop is not None
        fut: asyncio.Future[Any] = self._loop.create_future()
        if self.state not in ("reloading", "ready"):
            lost = WorkerLostError(f"worker {self.index} is not running; retry shortly.")
            _settle(fut, None, lost)
            _settle(note, None, lost)
            return fut
        needs = args[0] if op in (worker_module.MST, worker_module.WEIGHTS) and args else None
        dataset = needs if isinstance(needs, str) else None
        self._post_or_hold(Request(op, args, fut, note, dataset, reload))
        return fut

    def _post_or_hold(self, request: Request) -> None:
        """Write ``request`` to the pipe, or hold it until its dataset's reload is written."""
        if request.dataset is not None and request.dataset in self._reload_unsent:
            self._held.setdefault(request.dataset, []).append(request)
            return
        self._post(request)

    def _post(self, request: Request) -> None:
        """Give ``request`` its id in the pipe and queue it there (ids ascend in pipe order)."""
        request.req_id = next(self._ids)
        self._requests[request.req_id] = request
        self._outbox.append(request)
        self._flush()

    def _flush(self) -> None:
        """Write queued requests to the pipe without blocking the event loop.

        Once the loop watches the pipe its socket is non-blocking (uvloop makes it so), so a
        request larger than the room left in the socket's buffer (a one-shot's edges) is written
        in parts: the rest waits until the pipe drains (``add_writer``). Requests are framed
        whole into ``_unsent`` before any byte is written, so a part of one is never followed by
        another (``Connection.send`` raised midway there and left the stream corrupt).

        A suspect request (see :mod:`.restarts`) is written only when nothing is unanswered, and
        nothing after it until it is answered: it runs alone.
        """
        conn = self._conn
        if conn is None or conn.closed:
            return
        while self._outbox and self._in_flight < MAX_IN_FLIGHT and self._alone is None:
            if self._outbox[0].suspect and self._in_flight:
                break
            request = self._outbox.popleft()
            self._unsent += worker_module.framed(request.message())
            self._in_flight += 1
            if request.suspect:
                self._alone = request.req_id
        fd = conn.fileno()
        while self._unsent:
            try:
                written = os.write(fd, self._unsent)
            except BlockingIOError:
                if not self._writing and self._loop is not None:
                    self._loop.add_writer(fd, self._flush)
                    self._writing = True
                return
            except OSError:
                return  # the worker is gone; its reader reports it
            del self._unsent[:written]
        self._stop_writing()

    def _stop_writing(self) -> None:
        if self._writing and self._loop is not None and self._conn is not None and not self._conn.closed:
            self._loop.remove_writer(self._conn.fileno())
        self._writing = False

    async def wait_accepting(self, timeout: float) -> None:
        assert self._accepting is not None
        if self.state == "stopped":
            raise ServiceUnavailableError("the service is shutting down.")
        try:
            await asyncio.wait_for(self._accepting.wait(), timeout)
        except TimeoutError:
            raise ServiceUnavailableError(
                f"worker {self.index} is not ready ({self.state}: {self.last_error or 'starting'}); "
                "retry shortly."
            ) from None

    async def request(self, op: str, *args: Any) -> dict[str, Any]:
        """Send one request once the worker accepts them, and await its answer."""
        if not self.accepting:
            await self.wait_accepting(self._settings.worker_start_timeout_s)
        result: dict[str, Any] = await self._send(op, *args)
        return result

    async def request_with_note(self, op: str, *args: Any) -> tuple[dict[str, Any], asyncio.Future[None]]:
        """Like :meth:`request`, for a handler that works on after its reply (``worker.Reply``).

        Returns the answer and a future of the STORED note that follows it: done when that work
        is, failed with its error (or :class:`WorkerLostError` when the worker dies first).
        """
        if not self.accepting:
            await self.wait_accepting(self._settings.worker_start_timeout_s)
        assert self._loop is not None
        note: asyncio.Future[None] = self._loop.create_future()
        note.add_done_callback(_consume)  # its error is read where it matters, or not at all
        result: dict[str, Any] = await self._send(op, *args, note=note)
        return result, note

    async def load_new(
        self,
        graph_id: str,
        path: str,
        fmt: str,
        num_vertices: int | None,
        canonical: str | None,
        estimate: int,
    ) -> tuple[dict[str, Any], int]:
        """Load a new upload; (the worker's summary, the generation that holds it)."""
        self.reserved_bytes += estimate
        try:
            await self.wait_accepting(self._settings.worker_start_timeout_s)
            summary = await self._load_with_room(graph_id, path, fmt, num_vertices, canonical)
            generation = self.generation  # the process that answered (a load may go to the next one)
        finally:
            self.reserved_bytes -= estimate
        return summary, generation

    # -- eviction -----------------------------------------------------------------------------

    def touch(self, graph_id: str) -> None:
        """Mark a graph as just used (its eviction comes later)."""
        residency = self.graphs.get(graph_id)
        if residency is not None:
            residency.last_used = time.monotonic()

    def _busy(self) -> set[str]:
        """Graphs with a job queued or running here: never evicted."""
        tasks = [*self._tasks, *self.running]
        return {g for g in (getattr(t, "graph_id", None) for t in tasks) if isinstance(g, str)}

    async def evict(self, needed: int, keep: str | None = None) -> int:
        """Evict idle resident graphs, least recently used first, until ``needed`` bytes are freed
        (or none is left); the bytes freed. Evicting drops a graph from the worker; the spool keeps
        it, and its next job loads it again (:meth:`ensure_resident`)."""
        busy = self._busy()
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
                self.index,
                residency.graph_id,
                residency.device_bytes,
                time.monotonic() - residency.last_used,
            )
            await self._send(worker_module.DROP, residency.graph_id)
        return freed

    async def _load_with_room(
        self,
        graph_id: str,
        path: str,
        fmt: str,
        num_vertices: int | None,
        canonical: str | None,
        weights_path: str | None = None,
    ) -> dict[str, Any]:
        """LOAD; while the worker answers that it has no room (507), evict idle graphs and ask again."""
        while True:
            if not self.accepting:  # restarting: the load goes to the next process
                await self.wait_accepting(self._settings.worker_start_timeout_s)
            try:
                summary: dict[str, Any] = await self._send(
                    worker_module.LOAD, graph_id, path, fmt, num_vertices, canonical, weights_path
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
            summary = await self._load_with_room(
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
        """Record a graph loaded by :meth:`load_new` as placed here (reloaded if its worker restarted)."""
        self.graphs[graph_id] = Residency(graph_id, "resident", device_bytes)
        if generation != self.generation:  # loaded on a process that died since
            self.want_reload(graph_id)

    def forget(self, graph_id: str, *, loaded: bool = False) -> None:
        """Drop a graph from the device (after whatever is already in the pipe).

        ``loaded``: the worker holds it although it was never adopted (a create that failed late).
        """
        if (self.graphs.pop(graph_id, None) is not None or loaded) and self.accepting:
            fut = self._send(worker_module.DROP, graph_id)
            fut.add_done_callback(_consume)  # a lost worker drops it anyway

    # -- queue --------------------------------------------------------------------------------

    @property
    def queue_depth(self) -> int:
        return len(self._tasks)

    def enqueue(self, task: Task) -> None:
        assert self._has_tasks is not None and self._slot is not None
        self._tasks.append(task)
        self._has_tasks.set()
        if self._reloading:  # the tasks ahead may all wait for reloads: this one may not
            self._slot.set()

    def remove(self, task_id: str) -> Task | None:
        for task in self._tasks:
            if task.task_id == task_id:
                self._tasks.remove(task)
                return task
        return None

    def _may_pipeline(self, task: Task) -> bool:
        """Whether ``task`` may be handed while others are unfinished (see the module's docstring)."""
        if not getattr(task, "pipelined", False):
            return False
        graph_id = getattr(task, "graph_id", None)
        if graph_id is None:
            return True
        residency = self.graphs.get(graph_id)
        return residency is not None and residency.status == "resident"

    async def _dispatch_loop(self) -> None:
        assert self._has_tasks is not None and self._accepting is not None and self._slot is not None
        assert self._dispatched is not None
        depth = self._settings.dispatch_depth
        while True:
            while not self._tasks or self._stopping:
                self._has_tasks.clear()
                self._dispatched.set()
                await self._has_tasks.wait()
            await self._accepting.wait()
            if not self._tasks:
                continue
            self._slot.clear()
            head = self._next_task()
            if head is None or (
                self.running
                and (
                    len(self.running)
                    >= (max(depth, BATCHED_DEPTH) if getattr(head, "batched", False) else depth)
                    or not self._may_pipeline(head)
                    or not all(self._may_pipeline_running(t) for t in self.running)
                )
            ):
                self._dispatched.set()
                await self._slot.wait()
                continue
            if head is self._tasks[0]:
                self._tasks.popleft()
            else:
                self._tasks.remove(head)
            held_since = self._held_tasks.pop(head.task_id, None)
            if held_since is not None:
                self.reload_waits[head.task_id] = (time.monotonic() - held_since) * 1e3
            self.running.append(head)
            self._background(self._run(head))  # started in queue order: asyncio runs tasks FIFO

    def _next_task(self) -> Task | None:
        """The first queued task that does not wait for its dataset's reload (the tasks of a
        dataset keep their order: all of them wait while it reloads); None when all wait."""
        if not self._reloading:
            return self._tasks[0]
        now = time.monotonic()
        for task in self._tasks:
            if getattr(task, "graph_id", None) not in self._reloading:
                return task
            self._held_tasks.setdefault(task.task_id, now)
        return None

    @staticmethod
    def _may_pipeline_running(task: Task) -> bool:
        """Whether a handed task lets others be handed behind it (a barrier task does not)."""
        return bool(getattr(task, "pipelined", False))

    async def _run(self, task: Task) -> None:
        assert self._slot is not None
        try:
            await task.run(self)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("task %s failed unexpectedly", task.task_id)
        finally:
            self.running.remove(task)
            self.reload_waits.pop(task.task_id, None)
            self._slot.set()

    def gauges(self) -> WorkerGauges:
        """What the worker reports when the metrics are scraped."""
        return WorkerGauges(
            index=self.index,
            up=self.accepting,
            queue_depth=self.queue_depth,
            datasets=len(self.graphs),
            device_bytes=sum(r.device_bytes for r in self.graphs.values()),
            free_bytes=self.free_bytes,
            restarts=self.restarts,
            requests_lost=self.requests_lost,
            requests_resent=self.requests_resent,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "state": self.state,
            "pid": self.pid,
            "backend": self.info.get("backend", self.config.backend),
            "device": self.info.get("device"),
            "restarts": self.restarts,
            "heartbeat_age_s": round(self.heartbeat_age(), 3),
            "resident_graphs": sum(r.status != "evicted" for r in self.graphs.values()),
            "evicted_graphs": sum(r.status == "evicted" for r in self.graphs.values()),
            "device_bytes": sum(r.device_bytes for r in self.graphs.values() if r.status != "evicted"),
            "free_bytes": self.free_bytes,
            "total_bytes": self.total_bytes,
            "queue_depth": self.queue_depth,
            "handed": len(self.running),
            "last_error": self.last_error,
            "computing": len(self._running_ids()) if self.state in ("reloading", "ready") else 0,
            "reloads_pending": len(self._reloading),
            "requests_resent": self.requests_resent,
            "requests_lost": self.requests_lost,
            "startup_ms": self.startup_ms,
            "warm_up": self.info.get("warm_up"),
            "plan_ms": self.plan_ms,
            "last_restart_ms": self.last_restart_ms,
            "standby": None
            if self._spare is None
            else {"pid": self._spare.process.pid, "state": "warm" if self._spare.info else "starting"},
        }


#: bytes read from a worker's pipe at once
_READ_SIZE = 1 << 20


def _messages(inbox: bytearray) -> list[Any]:
    """The whole messages at the start of ``inbox`` (framed as ``Connection.send`` frames them),
    taken out of it; a message that cannot be unpickled comes as the exception."""
    out: list[Any] = []
    start = 0
    while len(inbox) - start >= 4:
        (size,) = struct.unpack_from("!i", inbox, start)
        head = 4
        if size == -1:
            if len(inbox) - start < 12:
                break
            (size,) = struct.unpack_from("!Q", inbox, start + 4)
            head = 12
        if len(inbox) - start - head < size:
            break
        payload = memoryview(inbox)[start + head : start + head + size]
        try:
            out.append(ForkingPickler.loads(payload))
        except Exception as exc:
            out.append(exc)
        finally:
            payload.release()
        start += head + size
    del inbox[:start]
    return out


def _settle(fut: asyncio.Future[Any] | None, result: Any, error: BaseException | None) -> None:
    """Resolve ``fut`` (if there is one still pending) with ``result``, or fail it with ``error``."""
    if fut is None or fut.done():
        return
    if error is None:
        fut.set_result(result)
    else:
        fut.set_exception(error)


async def settle_from(done: asyncio.Future[Any], work: Awaitable[Any]) -> None:
    """Await ``work`` and settle ``done`` (if still pending) with its answer or its error: how a
    queued task hands its outcome to the caller awaiting ``done``."""
    try:
        answer = await work
    except Exception as exc:
        _settle(done, None, exc)
    else:
        _settle(done, answer, None)


def _consume(fut: asyncio.Future[Any]) -> None:
    """Mark a future's error as seen (no 'exception was never retrieved' warning)."""
    if not fut.cancelled():
        fut.exception()


def _probe_child(conn: Connection, backend: str) -> None:
    """In a spawned child: resolve ``backend`` and count the CUDA devices."""
    try:
        import gpu_core

        chosen = gpu_core.resolve_backend(backend)
        count = 0
        if chosen == "gpu":
            import cupy

            count = int(cupy.cuda.runtime.getDeviceCount())
        conn.send((chosen, count, None))
    except Exception as exc:
        conn.send(("cpu", 0, f"{type(exc).__name__}: {exc}"))
    conn.close()


def _probe(backend: str, timeout: float) -> tuple[str, int]:
    """Which backend and how many GPUs, decided in a throw-away child so this process never loads CUDA."""
    if backend == "auto" and importlib.util.find_spec("cupy") is None:
        return "cpu", 0
    parent, child = _MP.Pipe(duplex=False)
    process = _MP.Process(target=_probe_child, args=(child, backend), name="mst-probe", daemon=True)
    process.start()
    child.close()
    try:
        if not parent.poll(timeout):
            raise ServiceUnavailableError(f"probing for GPUs took longer than {timeout} s.")
        chosen, count, error = parent.recv()
    finally:
        parent.close()
        process.join(5)
        if process.is_alive():
            process.kill()
    if error is not None:
        from gpu_core.errors import BackendUnavailableError

        raise BackendUnavailableError(f"MST_BACKEND={backend} cannot run here: {error}")
    return chosen, count


def _cuda_token(ordinal: int) -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        tokens = [t.strip() for t in visible.split(",") if t.strip()]
        if ordinal < len(tokens):
            return tokens[ordinal]
    return str(ordinal)


def plan_config(settings: Settings, index: int, backend: str, device: str | None) -> WorkerConfig:
    """The config of worker ``index`` (on ``backend``, CUDA_VISIBLE_DEVICES ``device``)."""
    return WorkerConfig(
        index=index,
        backend=backend,
        cuda_device=device,
        tmp_dir=str(settings.spool_dir / "tmp"),
        max_edges=settings.max_edges,
        memory_bytes=settings.worker_memory_bytes,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        spin_s=settings.worker_spin_ms / 1e3,
        max_vertices=settings.max_vertices,
        max_inflated_bytes=settings.max_inflated_bytes,
        max_compression_ratio=settings.max_compression_ratio,
        coalesce=settings.coalesce_jobs,
        oneshot_batch_edges=settings.oneshot_batch_edges,
        oneshot_inline_bytes=settings.oneshot_inline_bytes,
    )


def plan_workers(settings: Settings) -> list[WorkerConfig]:
    """One worker config per GPU to use, or ``MST_CPU_WORKERS`` CPU workers."""

    def config(index: int, backend: str, device: str | None) -> WorkerConfig:
        return plan_config(settings, index, backend, device)

    cpu = [config(i, "cpu", None) for i in range(settings.cpu_workers)]
    if settings.backend == "cpu":
        return cpu
    if settings.backend == "gpu" and settings.gpus is not None:
        return [config(i, "gpu", _cuda_token(g)) for i, g in enumerate(settings.gpus)]
    chosen, count = _probe(settings.backend, settings.worker_start_timeout_s)
    if chosen == "cpu":
        return cpu
    ordinals = settings.gpus if settings.gpus is not None else list(range(count))
    missing = [g for g in ordinals if g >= count]
    if missing:
        from gpu_core.errors import BackendUnavailableError

        raise BackendUnavailableError(f"MST_GPUS names GPU(s) {missing} but only {count} are visible.")
    return [config(i, "gpu", _cuda_token(g)) for i, g in enumerate(ordinals)]


def shard_key(graph_id: str, index: int) -> str:
    """The residency key of shard ``index`` of a sharded graph (what its worker holds it under)."""
    return f"{graph_id}.s{index}"


def parse_shard_key(key: str) -> tuple[str, int] | None:
    """``(graph id, shard index)`` of a :func:`shard_key`; None for a plain graph id."""
    graph_id, dot, index = key.rpartition(".s")
    if not dot or not index.isdigit():
        return None
    return graph_id, int(index)


class Supervisor:
    """All workers of the service, their placement and their health."""

    def __init__(self, settings: Settings, sources: Callable[[str], GraphSource | None]) -> None:
        self.settings = settings
        self._sources = sources
        self.workers: list[WorkerHandle] = []
        self._monitor: asyncio.Task[None] | None = None
        #: sharded graphs and their shard counts; shard i is placed as :func:`shard_key` ``(id, i)``
        self.sharded: dict[str, int] = {}

    async def start(self) -> None:
        if self.settings.worker_pool == "ray":  # each worker a Ray actor (service/runtime/ray_pool.py)
            from . import ray_pool

            self.workers = [
                ray_pool.RayWorkerHandle(c, self.settings, self._sources, options)
                for c, options in ray_pool.plan(self.settings)
            ]
        else:
            await self._start_local()
        for handle in self.workers:
            if not handle.started:  # (worker 0 may be, see _start_local)
                await handle.start()
        self._monitor = asyncio.create_task(self._watch(), name="heartbeat-monitor")

    async def _start_local(self) -> None:
        """Plan the local workers. With ``MST_BACKEND=auto`` that probes for GPUs in a child
        process (imports, CUDA's start: seconds on a GPU host), so worker 0 starts meanwhile with
        the backend left to itself (``auto``) on the first GPU the plan can name; it is kept if
        the plan's worker 0 is on that GPU (or on the CPU, where it resolves ``auto`` the same)."""
        first: WorkerHandle | None = None
        if self.settings.backend == "auto" and importlib.util.find_spec("cupy") is not None:
            token = _cuda_token(self.settings.gpus[0] if self.settings.gpus else 0)
            first = WorkerHandle(plan_config(self.settings, 0, "auto", token), self.settings, self._sources)
            await first.start()
        started = time.perf_counter()
        try:
            configs = await asyncio.to_thread(plan_workers, self.settings)
        except BaseException:
            if first is not None:
                await first.stop()
            raise
        self.workers = [WorkerHandle(c, self.settings, self._sources) for c in configs]
        if first is not None:
            planned = configs[0]
            if planned.backend == "cpu" or planned.cuda_device == first.config.cuda_device:
                self.workers[0] = first
            else:
                await first.stop()
        for handle in self.workers:
            handle.plan_ms = round((time.perf_counter() - started) * 1e3, 3)

    async def stop(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        await asyncio.gather(*(w.stop() for w in self.workers))
        if self.settings.worker_pool == "ray":
            from . import ray_pool

            await asyncio.to_thread(ray_pool.shutdown)

    async def _watch(self) -> None:
        interval = self.settings.heartbeat_interval_s
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for handle in self.workers:
                handle.check_spare(now)
                if handle.state in ("dead", "stopped"):
                    continue
                age = handle.heartbeat_age()
                # a starting worker is judged by MST_WORKER_START_TIMEOUT_S only: imports may be slow
                if handle.state != "starting" and age > self.settings.heartbeat_timeout_s:
                    handle.kill(f"no heartbeat for {age:.1f} s (MST_HEARTBEAT_TIMEOUT_S)")
                elif (
                    handle.state == "starting"
                    and now - handle.started_at > self.settings.worker_start_timeout_s
                ):
                    limit = self.settings.worker_start_timeout_s
                    handle.kill(f"not ready after {limit} s (MST_WORKER_START_TIMEOUT_S)")

    @property
    def ready(self) -> bool:
        return any(
            w.accepting and w.heartbeat_age() <= self.settings.heartbeat_timeout_s for w in self.workers
        )

    def place(self, estimate: int) -> WorkerHandle:
        """The worker for a new graph: the most free memory among those running (or starting)."""
        candidates = [w for w in self.workers if w.state != "stopped"]
        if not candidates:
            raise ServiceUnavailableError("no worker is running; the service is shutting down.")
        running = [w for w in candidates if w.accepting] or candidates
        return max(running, key=lambda w: (w.free_bytes - w.reserved_bytes, -w.queue_depth, -w.index))

    def holder(self, graph_id: str) -> WorkerHandle | None:
        for handle in self.workers:
            if graph_id in handle.graphs:
                return handle
        return None

    def place_shards(self, count: int) -> list[WorkerHandle]:
        """The workers for the ``count`` shards of a new graph: distinct workers, most free memory
        first (a worker takes a second shard only when there are more shards than workers)."""
        first = self.place(0)
        others = sorted(
            (w for w in self.workers if w is not first and w.state != "stopped"),
            key=lambda w: (-(w.free_bytes - w.reserved_bytes), w.queue_depth, w.index),
        )
        ordered = [first, *others]
        return [ordered[i % len(ordered)] for i in range(count)]

    def shard_holders(self, graph_id: str) -> list[tuple[str, WorkerHandle | None]] | None:
        """Each shard's key and the worker holding it, in edge order; None when the graph is not sharded."""
        count = self.sharded.get(graph_id)
        if count is None:
            return None
        return [(key, self.holder(key)) for key in (shard_key(graph_id, i) for i in range(count))]

    def place_existing_shards(self, graph_id: str, count: int, device_bytes: int) -> None:
        """Place a stored sharded graph at start-up, its shards on distinct workers (as far as there
        are workers), the least loaded first; each worker reloads its own when ready."""
        ranked = sorted(
            self.workers,
            key=lambda w: (sum(r.device_bytes for r in w.graphs.values()), len(w.graphs), w.index),
        )
        self.sharded[graph_id] = count
        for i in range(count):
            handle, key = ranked[i % len(ranked)], shard_key(graph_id, i)
            handle.graphs[key] = Residency(key, "loading", device_bytes // max(count, 1))
            handle.want_reload(key)

    def place_existing(self, graph_ids: Iterable[tuple[str, int, int]]) -> None:
        """Place stored graphs (id, device bytes, weights version) at start-up; each worker reloads
        its own when ready."""
        for graph_id, nbytes, version in graph_ids:
            handle = max(
                self.workers,
                key=lambda w: (-sum(r.device_bytes for r in w.graphs.values()), -len(w.graphs), -w.index),
            )
            handle.graphs[graph_id] = Residency(graph_id, "loading", nbytes, weights_version=version)
            handle.want_reload(graph_id)
