"""One worker as the API process sees it: its life, its requests, the datasets placed on it, its queue.

A :class:`WorkerHandle` is the same for every kind of worker; what differs (a local process and
its pipe, a Ray actor and its calls) is its transport, a subclass of it in the pool that makes
it (:mod:`.processes`, :mod:`.ray_pool`). It holds:

* the worker's life: ``starting`` until the worker says ``ready``, then ``reloading`` (it takes
  requests while its datasets come back), ``ready``, and ``dead`` when its process is gone, until
  the next one (its standby, or a new process after a back-off) is ready; ``stopped`` at the end;
* its requests (:class:`~.requests.Requests`), whose replies arrive as messages;
* the datasets placed on it (:class:`~.datasets.Datasets`): where each stands, eviction when a
  load finds no room, loading an evicted one back before its next job, reloads after a restart;
* its task queue and dispatcher (:class:`~.dispatch.Dispatcher`).

Failure: a worker that exits, whose heartbeat stamp is older than ``MST_HEARTBEAT_TIMEOUT_S``
once it is up, or that is not up within ``MST_WORKER_START_TIMEOUT_S`` (it is then killed), is
replaced. **A death fails one request at most**, the one the process was running (read from the
run stamp it shares, or the Ray pool's one request in flight): a job ends **failed** with
``error.type = "worker_lost"`` and is not re-queued, because a job that killed its worker would
likely kill the next one too. The requests it had not started keep their futures and go to the
next process in the order they were made; those it was computing as one run (coalesced jobs, a
batch of one-shots) go too, each **suspect**: written to the pipe alone, and failed if a process
dies running it again. Rules and reasons: :mod:`.restarts`.

A new process takes requests as soon as it has warmed up; the datasets placed on its worker
come back in the background (:mod:`.datasets`).

About 500 lines on purpose: one worker's handle keeps its pipe, its requests ledger and its
restart rules together, since a death is judged against what the ledger says was in flight.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import Any

from ...errors import ServiceUnavailableError, WorkerLostError
from ...metrics import WorkerGauges
from ...settings import Settings
from ..worker.protocol import MST, STORED, WEIGHTS, WorkerConfig
from .datasets import Datasets
from .dispatch import Dispatcher, Task
from .requests import Requests, consume, settle
from .residency import Residency, Sources, WorkerState
from .restarts import Request

log = logging.getLogger("service.runtime.supervisor")


class WorkerHandle:
    """The API side of one worker; a pool's subclass gives it its transport (see the module's docstring).

    The transport's part: :meth:`_spawn` (start a worker process or actor), :meth:`_flush` (write
    the requests :class:`~.requests.Requests` lets go), :meth:`_running_ids` (what the dead worker
    was running), :meth:`kill`, :meth:`_stop_worker`, :attr:`pid`, :meth:`heartbeat_age`; and,
    where it has them, the hooks around a death (:meth:`_closed`, :meth:`_exit_code`,
    :meth:`_joined`, :meth:`_take_over`) and a standby (:meth:`_other_message`,
    :meth:`_other_exit`, :meth:`_all_reloaded`, :meth:`_standby`, :meth:`check_spare`).
    """

    def __init__(self, config: WorkerConfig, settings: Settings, sources: Sources) -> None:
        self.config = config
        self.index = config.index
        self._settings = settings
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
        self.requests = Requests()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._accepting = asyncio.Event()
        self.dispatch = Dispatcher(
            self,
            settings.dispatch_depth,
            self._accepting,
            reloading=lambda: self.datasets.pending,
            resident=lambda graph_id: self.datasets.resident(graph_id),
            stopping=lambda: self._stopping,
            name=f"dispatch-{self.index}",
        )
        #: the datasets placed on the worker: where each stands, loads, eviction, reloads
        self.datasets = Datasets(self, sources, settings.worker_start_timeout_s)
        #: requests re-sent to a new process after a death, and requests lost (running when it died)
        self.requests_resent = 0
        self.requests_lost = 0
        #: the last process that got ready (requests kept at a death wait for a later one)
        self._ready_generation = 0
        #: the last start's phases (ms), as the worker measured them (see worker.startup.start)
        self.startup_ms: dict[str, float] = {}
        #: what deciding on the workers took at the service's start (ms; MST_BACKEND=auto probes GPUs)
        self.plan_ms: float | None = None
        #: time.monotonic() of the current process's spawn (its "process" start-up phase)
        self._spawned_at = 0.0
        #: time.monotonic() when the last death was seen (see last_restart_ms)
        self._died_at: float | None = None
        #: milliseconds from the last death seen to a process taking requests again
        self.last_restart_ms: float | None = None
        self._stopping = False
        self._restart_task: asyncio.Task[None] | None = None
        self._tasks_bg: set[asyncio.Future[None]] = set()

    # -- the transport's part -----------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        raise NotImplementedError

    def heartbeat_age(self) -> float:
        raise NotImplementedError

    async def _spawn(self) -> None:
        """Start a new worker (a process, an actor); its ``ready`` message makes it accept requests."""
        raise NotImplementedError

    def _flush(self) -> None:
        """Write the requests :attr:`requests` lets go (:meth:`~.requests.Requests.next_to_send`)."""
        raise NotImplementedError

    def _running_ids(self) -> range:
        """The ids of the requests the dead worker was running."""
        raise NotImplementedError

    def kill(self, reason: str) -> None:
        """Kill the worker (a stale heartbeat, a start that takes too long); it is restarted."""
        raise NotImplementedError

    async def _stop_worker(self, timeout: float) -> None:
        """Stop the worker at the service's end (the queue is stopped already)."""
        raise NotImplementedError

    def _closed(self) -> None:
        """The worker is dead: let go of its transport."""

    def _exit_code(self) -> int | None:
        return None

    async def _joined(self) -> None:
        """Wait for the dead worker to be gone for good, before its replacement starts."""

    def _take_over(self) -> bool:
        """Replace the dead worker at once, with a warm spare (True), if there is one."""
        return False

    def _other_message(self, generation: int, message: tuple[Any, ...]) -> None:
        """A message from a process that is not the worker's current one (its standby's)."""

    def _other_exit(self, generation: int) -> bool:
        """True when ``generation`` is not the worker's (its standby's exit, handled there)."""
        return False

    def _all_reloaded(self) -> None:
        """The worker is ``ready`` with every dataset back (a standby may start now)."""

    def _standby(self) -> dict[str, Any] | None:
        """The standby's description in /readyz, if there is one."""
        return None

    def check_spare(self, now: float) -> None:
        """Kill a standby whose heartbeat is stale, or that is not warm in time (if there is one)."""

    # -- life cycle ---------------------------------------------------------------------------

    @property
    def accepting(self) -> bool:
        return self.state in ("reloading", "ready")

    @property
    def started(self) -> bool:
        return self._loop is not None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.dispatch.start()
        await self._spawn()

    def _on_message(self, generation: int, message: tuple[Any, ...]) -> None:
        if generation != self.generation:
            self._other_message(generation, message)
            return
        head = message[0]
        if head == "ready":
            self._on_ready(message[1])
            return
        if head == "failed":
            self._kill_reason = f"failed to start: {type(message[1]).__name__}: {message[1]}"
            log.error("worker %d %s", self.index, self._kill_reason)
            return  # the process exits next; _on_exit restarts it
        if head == STORED:
            _, req_id, error = message
            self.requests.stored(req_id, error)
            return
        req_id, ok, payload = message
        self._served = True
        request = self.requests.replied(req_id)
        self._flush()
        if request is None:
            return
        if isinstance(payload, dict) and "free_bytes" in payload:
            self.free_bytes, self.total_bytes = int(payload["free_bytes"]), int(payload["total_bytes"])
        self.requests.answer(request, ok, payload)

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
        self.datasets.begin_reloads()
        kept = self.requests.take_kept()
        log.info(
            "worker %d ready on %s (start-up %s ms); reloading %d dataset(s) in the background%s",
            self.index,
            info.get("device"),
            self.startup_ms or round(info.get("warmup_ms", 0.0)),
            len(self.datasets.pending),
            f", re-sending {len(kept)} request(s) of the worker it replaces" if kept else "",
        )
        for request in kept:  # in the order they were made, each behind its dataset's reload
            self._post_or_hold(request)
        self.requests_resent += len(kept)
        self._accepting.set()
        self.datasets.kick_reloads()

    def all_back(self) -> None:
        """Every dataset placed here is back (:mod:`.reloads`): the worker is ``ready``."""
        self.state = "ready"
        self._all_reloaded()

    # -- death --------------------------------------------------------------------------------

    def _on_exit(self, generation: int) -> None:
        if self._other_exit(generation):
            return
        if generation != self.generation or self.state in ("dead", "stopped"):
            return
        self._died_at = time.monotonic()
        code = self._exit_code()
        was = self.state
        self.state = "stopped" if self._stopping else "dead"
        self._accepting.clear()
        self.last_error = self._kill_reason or f"the process exited (exit code {code})"
        self._kill_reason = None
        lost = WorkerLostError(
            f"worker {self.index} (pid {self.pid}) was lost while handling the request ({self.last_error}); "
            "it is being restarted, submit again."
        )
        sorted_out = self._sort_out_requests(lost)
        self.requests.lose_notes(lost)
        self.requests.drop_outbox()
        self._closed()
        for residency in self.graphs.values():
            if residency.status != "evicted":
                residency.status = "loading"
        self.datasets.lost_process()
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
        out = self.requests.sort_out(lost, self._running_ids(), self._stopping, self.graphs)
        if out is None:
            return ""
        self.requests_lost += out.lost
        if out.kept and self._loop is not None:  # they wait for the next process, up to the start timeout
            self._loop.call_later(
                self._settings.worker_start_timeout_s, self._expire_kept, self.generation, lost
            )
        return (
            f"Requests: {out.lost} lost (running), {out.kept} to re-send "
            f"({out.suspects} suspect), {out.parked} dataset load(s) answered by reloads."
        )

    def _expire_kept(self, dead: int, lost: WorkerLostError) -> None:
        """No process took the requests of process ``dead`` within MST_WORKER_START_TIMEOUT_S: they fail."""
        if self._ready_generation > dead:
            return
        self.requests.expire(lost)

    async def _restart(self) -> None:
        await self._joined()
        if self._served or time.monotonic() - self.started_at > 60:
            self._failures_in_row = 0  # it was up and answered (or ran a while): not a crash loop
        else:
            self._failures_in_row += 1  # died before answering anything: back off
        delay = min(0.2 * 2 ** min(self._failures_in_row, 8), 30.0)
        self.restarts += 1
        if not self._stopping and self._take_over():
            return  # warm already: no pause, no start
        await asyncio.sleep(delay)
        if not self._stopping:
            await self._spawn()

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop dispatching, let the running task finish (up to ``timeout`` s), stop the worker.

        Queued jobs stay queued in the store (the next start runs them); a job still running after
        ``timeout`` is failed with ``worker_lost`` at the next start (``Store.recover``).
        """
        self._stopping = True
        if self._restart_task is not None:
            self._restart_task.cancel()
        deadline = time.monotonic() + timeout
        while self.dispatch.running and self.accepting and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await self.dispatch.stop()
        await self._stop_worker(timeout)

    def _background(self, work: Awaitable[None]) -> None:
        """Run ``work`` without awaiting it, keeping a reference until it is done."""
        task = asyncio.ensure_future(work)
        self._tasks_bg.add(task)
        task.add_done_callback(self._tasks_bg.discard)

    # -- requests -----------------------------------------------------------------------------

    def _send(
        self, op: str, *args: Any, note: asyncio.Future[None] | None = None, reload: bool = False
    ) -> asyncio.Future[Any]:
        """Queue a request for the worker; the future of its reply (and ``note`` awaits its STORED note).

        ``reload``: the handle's reload of a dataset (never re-sent to a next process). An MST or
        weights request on a dataset whose reload is not written yet waits for it (held).
        """
        assert self._loop is not None
        fut: asyncio.Future[Any] = self._loop.create_future()
        if self.state not in ("reloading", "ready"):
            lost = WorkerLostError(f"worker {self.index} is not running; retry shortly.")
            settle(fut, None, lost)
            settle(note, None, lost)
            return fut
        needs = args[0] if op in (MST, WEIGHTS) and args else None
        dataset = needs if isinstance(needs, str) else None
        self._post_or_hold(Request(op, args, fut, note, dataset, reload))
        return fut

    def send(self, op: str, *args: Any, reload: bool = False) -> asyncio.Future[Any]:
        """Queue a request for the worker now, whatever its state; the future of its reply."""
        return self._send(op, *args, reload=reload)

    def _post_or_hold(self, request: Request) -> None:
        """Send ``request``, or hold it until its dataset's reload is sent."""
        if request.dataset is not None and request.dataset in self.datasets.unsent:
            self.requests.hold(request)
            return
        self.post(request)

    def post(self, request: Request) -> None:
        """Give ``request`` its id and write it (as far as the transport lets it go)."""
        self.requests.post(request)
        self._flush()

    async def wait_accepting(self, timeout: float) -> None:
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
        """Like :meth:`request`, for a handler that works on after its reply (``protocol.Reply``).

        Returns the answer and a future of the STORED note that follows it: done when that work
        is, failed with its error (or :class:`WorkerLostError` when the worker dies first).
        """
        if not self.accepting:
            await self.wait_accepting(self._settings.worker_start_timeout_s)
        assert self._loop is not None
        note: asyncio.Future[None] = self._loop.create_future()
        note.add_done_callback(consume)  # its error is read where it matters, or not at all
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
            summary = await self.datasets.load_with_room(graph_id, path, fmt, num_vertices, canonical)
            generation = self.generation  # the process that answered (a load may go to the next one)
        finally:
            self.reserved_bytes -= estimate
        return summary, generation

    # -- what tasks ask of it (pool.dispatch.WorkerCalls) ---------------------------------------

    @property
    def graphs(self) -> dict[str, Residency]:
        """The datasets placed on the worker, by key."""
        return self.datasets.graphs

    def touch(self, graph_id: str) -> None:
        self.datasets.touch(graph_id)

    async def evict(self, needed: int, keep: str | None = None) -> int:
        return await self.datasets.evict(needed, keep)

    async def ensure_resident(self, graph_id: str) -> None:
        await self.datasets.ensure_resident(graph_id)

    # -- queue --------------------------------------------------------------------------------

    @property
    def queue_depth(self) -> int:
        return self.dispatch.queue_depth

    @property
    def reload_waits(self) -> dict[str, float]:
        """How long handed tasks waited in the queue for their dataset's reload (ms), by task id."""
        return self.dispatch.reload_waits

    def enqueue(self, task: Task) -> None:
        self.dispatch.enqueue(task)

    def remove(self, task_id: str) -> Task | None:
        return self.dispatch.remove(task_id)

    # -- what it reports ----------------------------------------------------------------------

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
            "handed": len(self.dispatch.running),
            "last_error": self.last_error,
            "computing": len(self._running_ids()) if self.state in ("reloading", "ready") else 0,
            "reloads_pending": len(self.datasets.pending),
            "requests_resent": self.requests_resent,
            "requests_lost": self.requests_lost,
            "startup_ms": self.startup_ms,
            "warm_up": self.info.get("warm_up"),
            "plan_ms": self.plan_ms,
            "last_restart_ms": self.last_restart_ms,
            "standby": self._standby(),
        }
