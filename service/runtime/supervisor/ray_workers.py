"""The Ray pool (``MST_WORKER_POOL=ray``): each worker is a Ray actor, on any host of a cluster.

Imported only with that setting (it imports Ray, the optional extra ``mst-service[ray]``); the
service then runs one API process, which reaches each actor through actor calls
(:mod:`service.runtime.links.ray_link`) instead of a socket.

* :class:`MSTWorker`, the actor, holds a worker's state and runs the worker's own queue
  (:class:`~service.runtime.worker.loop.WorkerLoop`: holdings, job records, coalescing, weights),
  one call at a time: every line of the work is the worker process's. One actor holds one GPU
  (``num_gpus=1``; Ray sets its ``CUDA_VISIBLE_DEVICES``) or, on the CPU backend, one CPU. A
  reply's work behind it (the result file) is done before the call returns, so its STORED note
  travels with the reply.
* :class:`RaySlot` is the supervisor's side of one actor: its start, its heartbeat (an actor call
  in a concurrency group of its own, answered beside a running request, which also brings the
  actor's numbers for the board), its death (a call that raises ``RayActorError``, or a stale
  heartbeat: the actor is killed) and its replacement, which takes back the datasets placed on it
  from the spool. Actors are never restarted by Ray itself (``max_restarts=0``).

Files: uploads and results travel as spool paths, as with local workers, so on a cluster of
several hosts ``MST_DATA_DIR`` must be on storage every host mounts at the same path (NFS, ...).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError

from ...settings import MiB, Settings
from ...storage.store import Store
from ..board import Board
from ..worker import job_records, startup
from ..worker.holdings import Holdings
from ..worker.loop import WorkerLoop
from ..worker.protocol import CONTROL, MST, WorkerConfig
from ..worker.server import Incoming
from ..worker.state import Worker
from ..worker.writer import Writer
from .plan import worker_config

log = logging.getLogger("service.runtime.ray_pool")

#: the namespace of the service's actors in a shared cluster
NAMESPACE = "mst-service"
#: object store of a local cluster: only small answers travel through it
LOCAL_OBJECT_STORE_BYTES = 128 * MiB


class _Collected:
    """The actor's one "connection": what the loop sends is collected and returned by the call."""

    slot = 0
    closed = False

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._messages: list[tuple[Any, ...]] = []

    def send(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            self._messages.append(message)

    def send_all(self, messages: list[tuple[Any, ...]]) -> None:
        with self._lock:
            self._messages.extend(messages)

    def take(self) -> list[tuple[Any, ...]]:
        with self._lock:
            taken, self._messages = self._messages, []
        return taken


@ray.remote(concurrency_groups={"health": 1})  # type: ignore[call-overload]
class MSTWorker:
    """One worker as a Ray actor (see the module's docstring)."""

    def __init__(self, config: WorkerConfig) -> None:
        # Ray chose this actor's GPU: name it as a worker process names its own
        config = dataclasses.replace(config, cuda_device=os.environ.get("CUDA_VISIBLE_DEVICES"))
        self._worker = Worker(config)
        self._conn = _Collected()
        self._loop: WorkerLoop | None = None
        self._seq = 0

    def start(self, resume: bool = False) -> dict[str, Any]:
        """Warm up, take the datasets placed on this worker and (at the service's start) the jobs left
        queued on them; the worker's ``ready`` info (on which host). ``resume``: it replaces an actor
        that died: the one API process sends again what it kept for it (and fails what it ran)."""
        info = startup.start(self._worker)
        info["host"] = socket.gethostname()
        info["device"] = f"{info['device']} on {info['host']}"
        config = self._worker.config
        store = Store(Path(config.data_dir), checkpoint=False, result_dir=config.result_folder)
        holdings = Holdings(self._worker, store)
        holdings.adopt_placements()
        board = Board.create(self._worker.config.index + 1, 1)  # its own numbers (the slot brings them over)
        self._loop = WorkerLoop(self._worker, holdings, board, None, Writer())  # type: ignore[arg-type]
        if resume:
            return info
        queued, _ = job_records.recover(store, list(holdings.status))
        for job in queued:
            args = [
                job.graph_id,
                str(store.result_path(job.id)),
                job.task,
                _params(job.params),
                job_records.spec_of(job),
            ]
            self._loop.add(Incoming(None, MST, 0, 0.0, args, self._next()))
        return info

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def call(
        self, op: str, req_id: int, stamp: float, flags: int, *args: Any
    ) -> tuple[list[tuple[Any, ...]], bool, dict[str, int]]:
        """Run one request (and what the queue held before it): the messages a socket would carry
        for it, whether the actor must end (its device failed), and its numbers for the board."""
        loop = self._loop
        assert loop is not None
        request = Incoming(self._conn, op, req_id, stamp, list(args), self._next(), flags)  # type: ignore[arg-type]
        fatal = False
        if op in CONTROL:
            loop.control(request)
        else:
            loop.add(request)
            while loop.queue and not fatal:
                fatal = not loop.run_next()
        while loop.writer.busy():  # the result files: their notes go back with the reply
            time.sleep(0.0005)
        return self._conn.take(), fatal, self.beat_numbers()

    def reload_next(self) -> bool:
        """Reload the smallest dataset placed here not loaded yet (between requests: calls run one
        at a time); False when none is left."""
        loop = self._loop
        assert loop is not None
        return loop.holdings.reload_next(loop.busy_datasets())

    @ray.method(concurrency_group="health")
    def beat(self) -> dict[str, int]:
        """The heartbeat, answered even while a request runs: the numbers the board shows."""
        return self.beat_numbers()

    def beat_numbers(self) -> dict[str, int]:
        loop = self._loop
        if loop is None:
            return {}
        free, total = self._worker.memory()
        holdings = loop.holdings
        return {
            "free_bytes": free,
            "total_bytes": total,
            "queue_depth": len(loop.queue),
            "datasets": len(self._worker.graphs) + len(self._worker.points),
            "held_bytes": holdings.held_bytes(),
            "evicted": sum(s == "evicted" for s in holdings.status.values()),
            "reloads_pending": len(holdings.pending()),
        }


def _params(text: str) -> Any:
    import json

    return json.loads(text)


def connect(settings: Settings) -> None:
    """Join the cluster at ``MST_RAY_ADDRESS``, or start a local one."""
    if ray.is_initialized():
        return
    options: dict[str, Any] = {
        "namespace": NAMESPACE,
        "include_dashboard": False,
        "logging_level": logging.WARNING,
    }
    if settings.ray_address is None:
        # the host's CPUs and one more per actor: a replacement can start while Ray still reaps the
        # actor it replaces (a stuck process holds its CPU until Ray's kill has ended it)
        cpus = (os.cpu_count() or 1) + max(settings.ray_workers, 1)
        options.update(num_cpus=cpus, object_store_memory=LOCAL_OBJECT_STORE_BYTES)
    else:
        options["address"] = settings.ray_address
    # Ray's driver would take SIGTERM over (sys.exit; and a handler that dumps and dies): uvicorn's
    # graceful stop must keep it, so the workers stop and the local cluster with them
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    sigterm = signal.getsignal(signal.SIGTERM)
    ray.init(**options)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, sigterm)
    log.info("Ray cluster: %s", {k: v for k, v in _resources().items() if k in ("CPU", "GPU")})


def _resources() -> dict[str, float]:
    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    return resources


def plan(settings: Settings, run_dir: Any) -> list[tuple[WorkerConfig, dict[str, Any]]]:
    """One (worker config, actor options) per actor: one per GPU of the cluster (or
    ``MST_RAY_WORKERS``), CPU actors with ``MST_BACKEND=cpu`` or where the cluster has no GPU."""
    from gpu_core.errors import BackendUnavailableError

    connect(settings)
    gpus = int(_resources().get("GPU", 0))
    backend = settings.backend if settings.backend != "auto" else ("gpu" if gpus else "cpu")
    if backend == "gpu" and gpus == 0:
        raise BackendUnavailableError(
            "MST_BACKEND=gpu with MST_WORKER_POOL=ray, but the Ray cluster has no GPU resource."
        )
    count = settings.ray_workers or (gpus if backend == "gpu" else 1)
    resources: dict[str, Any] = {"num_cpus": 1, "num_gpus": 1 if backend == "gpu" else 0}
    options = {**resources, "max_restarts": 0, "max_task_retries": 0, "scheduling_strategy": "SPREAD"}
    return [(worker_config(settings, run_dir, 1, index, backend, None), options) for index in range(count)]


def shutdown() -> None:
    """Leave the cluster (and stop it, if this process started it)."""
    if ray.is_initialized():
        ray.shutdown()


def first_line(exc: BaseException) -> str:
    """The first line of a Ray error (the rest is advice about OOM killers and logs)."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


class RaySlot:
    """The supervisor's side of one worker actor (see the module's docstring)."""

    def __init__(
        self,
        config: WorkerConfig,
        options: dict[str, Any],
        settings: Settings,
        board: Board,
        changed: Callable[[], None],
    ) -> None:
        self.config = config
        self.index = config.index
        self._options = options
        self._settings = settings
        self._board = board
        self._changed = changed
        self.actor: Any = None
        self.info: dict[str, Any] = {}
        #: set while the actor takes calls
        self.serving = asyncio.Event()
        self.generation = 0
        self.restarts = 0
        self.last_error: str | None = None
        self.started_at = 0.0
        self.plan_ms: float | None = None
        self.last_restart_ms: float | None = None
        self._died_at: float | None = None
        self._failures_in_row = 0
        self.stopping = False
        self._tasks: set[asyncio.Future[Any]] = set()

    @property
    def state(self) -> str:
        return self._board.state(self.index)

    async def start(self) -> None:
        self._spawn()

    def _spawn(self) -> None:
        self.generation += 1
        self.actor = MSTWorker.options(**self._options).remote(self.config)  # type: ignore[attr-defined]
        self.info = {}
        self.serving.clear()
        self.started_at = time.monotonic()
        self._board.set_state(self.index, "starting")
        self._board.set(self.index, "generation", self.generation)
        self._later(self._start(self.actor, self.generation))
        log.info("worker %d: Ray actor created (backend %s)", self.index, self.config.backend)

    async def _start(self, actor: Any, generation: int) -> None:
        try:
            info = await actor.start.remote(self.restarts > 0)
        except Exception as exc:
            cause = getattr(exc, "cause", None) or exc
            self.lost(generation, f"failed to start: {type(cause).__name__}: {first_line(cause)}")
            return
        if generation != self.generation:
            return
        self.info = info
        self._board.set(self.index, "pid", int(info.get("pid", 0)))
        self._board.beat(self.index)  # a start's answer is a sign of life: its heartbeat counts from it
        self._board.set_state(self.index, "ready")
        self._failures_in_row = 0
        if self._died_at is not None:
            self.last_restart_ms = round((time.monotonic() - self._died_at) * 1e3, 3)
            self._died_at = None
        self.serving.set()
        self._changed()
        self._later(self._beat(actor, generation))
        self._later(self._reload(actor, generation))

    async def _reload(self, actor: Any, generation: int) -> None:
        """The datasets placed on the worker come back in the background, one call at a time."""
        with contextlib.suppress(Exception):  # a dead actor: its replacement reloads them
            while generation == self.generation and not self.stopping and await actor.reload_next.remote():
                pass

    async def _beat(self, actor: Any, generation: int) -> None:
        while generation == self.generation and not self.stopping:
            try:
                numbers = await actor.beat.remote()
            except RayActorError as exc:
                self.lost(generation, f"the Ray actor died: {first_line(exc)}")
                return
            except Exception as exc:  # not an answer: the stamp ages, the check judges it
                log.warning("worker %d: heartbeat failed: %s", self.index, first_line(exc))
            else:
                self._board.beat(self.index)
                self.publish(numbers)
            await asyncio.sleep(self._settings.heartbeat_interval_s)

    def publish(self, numbers: dict[str, int]) -> None:
        """The actor's numbers (from a heartbeat or a call's answer) on the board."""
        for name, value in numbers.items():
            self._board.set(self.index, name, value)
        if numbers and self.state in ("reloading", "ready"):
            self._board.set_state(self.index, "reloading" if numbers.get("reloads_pending", 0) else "ready")

    def lost(self, generation: int, reason: str) -> None:
        """The actor of ``generation`` is gone (or must go): kill what is left, start another."""
        if generation != self.generation or self.stopping or self.state in ("dead", "stopped"):
            return
        self.last_error = reason
        self.serving.clear()
        ray.kill(self.actor, no_restart=True)
        self._board.set_state(self.index, "dead")
        self._died_at = time.monotonic()
        log.error("worker %d (Ray actor) died: %s; restarting it", self.index, reason)
        if time.monotonic() - self.started_at < 60 and not self.info:
            self._failures_in_row += 1
        self.restarts += 1
        self._board.set(self.index, "restarts", self.restarts)
        self._changed()
        self._later(self._restart())

    async def _restart(self) -> None:
        await asyncio.sleep(min(0.2 * 2 ** min(self._failures_in_row, 8), 30.0))
        if not self.stopping:
            self._spawn()

    def check(self, now: float) -> None:
        """Kill an actor whose heartbeat is stale once it serves, or that does not start in time."""
        if self.stopping or self.state in ("dead", "stopped"):
            return
        if self.serving.is_set():
            age = now - self._board.get(self.index, "heartbeat")
            if age > self._settings.heartbeat_timeout_s:
                self.lost(self.generation, f"no heartbeat for {age:.1f} s (MST_HEARTBEAT_TIMEOUT_S)")
        elif now - self.started_at > self._settings.worker_start_timeout_s:
            limit = self._settings.worker_start_timeout_s
            self.lost(self.generation, f"not ready after {limit} s (MST_WORKER_START_TIMEOUT_S)")

    async def stop(self, timeout: float = 10.0) -> None:
        self.stopping = True
        if self.actor is not None:
            ray.kill(self.actor, no_restart=True)
        for task in list(self._tasks):
            task.cancel()
        self._board.set_state(self.index, "stopped")

    def _later(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def facts(self) -> dict[str, Any]:
        info = self.info
        return {
            "index": self.index,
            "backend": info.get("backend", self.config.backend),
            "device": info.get("device"),
            "last_error": self.last_error,
            "startup_ms": info.get("startup_ms", {}),
            "warm_up": info.get("warm_up"),
            "plan_ms": self.plan_ms,
            "last_restart_ms": self.last_restart_ms,
            "standby": None,
        }
