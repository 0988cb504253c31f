"""The Ray worker pool (``MST_WORKER_POOL=ray``): each worker is a Ray actor, on any host of a cluster.

Imported only with that setting (it imports Ray, the optional extra ``mst-service[ray]``).

* :class:`MSTWorker`, the actor, holds a worker's state (:class:`~service.runtime.worker.state.Worker`)
  and runs each request with :func:`~service.runtime.worker.ops.handle`, as the worker process
  does, so the two transports share every line of op code. One actor holds one GPU
  (``num_gpus=1``; Ray sets its ``CUDA_VISIBLE_DEVICES``) or, on the CPU backend, one CPU.
* :class:`RayWorkerHandle` is the API side of one actor. It is a :class:`~.handle.WorkerHandle`
  whose transport is actor calls instead of a pipe: each request is one ``call`` whose
  ``ObjectRef`` is awaited on the event loop, and its answer is fed to the same message handling
  as a pipe's (replies, STORED notes, ``ready``), so placement, eviction, reloads, the job queue
  and restarts are the same as the local pool's.
* :class:`RayPool` plans the actors (one per GPU of the cluster) and leaves the cluster at the
  end: the :class:`~.interface.WorkerPool` of this pool.

Ordering: the pipe delivers requests in order, and a reload must run before the job behind it.
The actor also answers heartbeats in a concurrency group of its own (a threaded actor, for which
Ray does not promise the order of calls), so a handle keeps **one** request in flight and sends
the next when the answer is back.

Failure: a call on an actor that died (its process killed, its host lost) raises
:class:`ray.exceptions.RayActorError`; so does the heartbeat, sent every
``MST_HEARTBEAT_INTERVAL_S`` in the actor's ``health`` group, which also notices an idle actor's
death. Either way the handle kills what is left of the actor and runs the process transport's exit
path: requests in flight fail with :class:`~service.errors.WorkerLostError` (the running job ends
``worker_lost``), a new actor is started with the same back-off and reloads every graph placed on
it from the spool. A heartbeat that does not come back ages the stamp the supervisor's monitor
judges, as a stuck process's does. Actors are never restarted by Ray itself (``max_restarts=0``):
a restarted actor would have lost its graphs without the handle knowing.

Files: uploads and results travel as spool paths, as with local workers, so on a cluster of
several hosts ``MST_DATA_DIR`` must be on storage every host mounts at the same path (NFS, ...).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import socket
import threading
import time
from typing import Any

import ray
from ray.exceptions import RayActorError

from ...errors import WorkerInternalError
from ...settings import MiB, Settings
from ..worker import ops, startup
from ..worker.protocol import STORED, WorkerConfig
from ..worker.state import Worker
from .handle import WorkerHandle
from .interface import worker_config
from .residency import Sources

log = logging.getLogger("service.runtime.ray_pool")

#: the namespace of the service's actors in a shared cluster
NAMESPACE = "mst-service"
#: object store of a local cluster: only small answers travel through it
LOCAL_OBJECT_STORE_BYTES = 128 * MiB


@ray.remote(concurrency_groups={"health": 1})  # type: ignore[call-overload]
class MSTWorker:
    """One worker as a Ray actor: a worker's state and its resident graphs."""

    def __init__(self, config: WorkerConfig) -> None:
        # Ray chose this actor's GPU: name it as the process transport names its own
        config = dataclasses.replace(config, cuda_device=os.environ.get("CUDA_VISIBLE_DEVICES"))
        self._worker = Worker(config)

    def start(self) -> dict[str, Any]:
        """Warm up and compute the probe graph; the worker's ``ready`` info (on which host)."""
        info = startup.start(self._worker)
        info["host"] = socket.gethostname()
        info["device"] = f"{info['device']} on {info['host']}"
        return info

    def call(self, op: str, req_id: int, *args: Any) -> tuple[list[tuple[Any, ...]], bool]:
        """Run one request: (the messages a pipe would carry for it, whether the actor must end).

        A reply's ``after`` work (the result file) is done before the answer goes back, so its
        STORED note travels with the reply.
        """
        ok, payload, after, fatal = ops.handle(self._worker, op, args)
        messages: list[tuple[Any, ...]] = [(req_id, ok, payload)]
        if after is not None:
            messages.append((STORED, req_id, ops.run_after(after)))
        return messages, fatal

    @ray.method(concurrency_group="health")
    def beat(self) -> float:
        """The heartbeat: answered even while a request runs."""
        return time.time()


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
    """The cluster's total resources (``CPU``, ``GPU``, ...)."""
    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    return resources


class RayWorkerHandle(WorkerHandle):
    """The API side of one worker actor (see the module's docstring)."""

    def __init__(
        self,
        config: WorkerConfig,
        settings: Settings,
        sources: Sources,
        actor_options: dict[str, Any],
    ) -> None:
        super().__init__(config, settings, sources)
        self._actor_options = actor_options
        self._actor: Any = None
        self._beat_at = time.monotonic()
        #: the id of the request in flight (see _running_ids)
        self._calling = 0

    @property
    def pid(self) -> int | None:
        """The actor's process id (on its host, ``info["host"]``) once it is up."""
        pid = self.info.get("pid") if self._actor is not None else None
        return None if pid is None else int(pid)

    def heartbeat_age(self) -> float:
        return 0.0 if self._actor is None else time.monotonic() - self._beat_at

    async def _spawn(self) -> None:
        actor = MSTWorker.options(**self._actor_options).remote(self.config)  # type: ignore[attr-defined]
        self.generation += 1
        self._actor = actor
        self.info = {}
        self.state = "starting"
        self._served = False
        self.started_at = self._beat_at = time.monotonic()
        self.requests.drop_outbox()
        self._background(self._start_actor(actor, self.generation))
        log.info("worker %d: Ray actor created (backend %s)", self.index, self.config.backend)

    async def _start_actor(self, actor: Any, generation: int) -> None:
        try:
            info = await actor.start.remote()
        except RayActorError as exc:
            self._lost(generation, f"the Ray actor died while starting: {_first_line(exc)}")
            return
        except Exception as exc:  # start() raised: Ray wraps the worker's error
            cause = getattr(exc, "cause", None) or exc
            self._lost(generation, f"failed to start: {type(cause).__name__}: {cause}")
            return
        # the start's answer is a sign of life: the heartbeat's age counts from it, not from the
        # spawn (a start is judged by MST_WORKER_START_TIMEOUT_S, however long its imports took)
        self._beat_at = time.monotonic()
        self._on_message(generation, ("ready", info))
        self._background(self._beat_loop(actor, generation))

    async def _beat_loop(self, actor: Any, generation: int) -> None:
        while generation == self.generation and self._actor is actor:
            try:
                await actor.beat.remote()
            except RayActorError as exc:
                self._lost(generation, f"the Ray actor died: {_first_line(exc)}")
                return
            except Exception as exc:  # not an answer: the stamp ages, the monitor judges it
                log.warning("worker %d: heartbeat failed: %s", self.index, _first_line(exc))
            else:
                self._beat_at = time.monotonic()
            await asyncio.sleep(self._settings.heartbeat_interval_s)

    def _flush(self) -> None:
        while self._actor is not None:
            request = self.requests.next_to_send(1)
            if request is None:
                return
            ref = self._actor.call.remote(*request.message())
            self._calling = request.req_id
            self._background(self._answer(ref, request.req_id, self.generation))

    def _running_ids(self) -> range:
        """The request in flight (one at a time): the actor was running it, or about to."""
        return range(self._calling, self._calling + 1) if self.requests.in_flight else range(0)

    async def _answer(self, ref: Any, req_id: int, generation: int) -> None:
        try:
            messages, fatal = await ref
        except RayActorError as exc:
            self._lost(generation, f"the Ray actor died: {_first_line(exc)}")
            return
        except Exception as exc:  # the answer could not be brought back (e.g. it does not unpickle)
            error = WorkerInternalError(f"the worker's answer was lost in Ray: {type(exc).__name__}: {exc}")
            messages, fatal = [(req_id, False, error)], False
        for message in messages:
            self._on_message(generation, message)
        if fatal:  # a device error: a fresh actor gets a fresh CUDA context
            self._lost(generation, "the worker hit a device error and is replaced")

    def _lost(self, generation: int, reason: str) -> None:
        """The actor of ``generation`` is gone (or must go): kill what is left, then the exit path."""
        if generation != self.generation or self.state in ("dead", "stopped"):
            return
        self._kill_reason = self._kill_reason or reason
        if self._actor is not None:
            ray.kill(self._actor, no_restart=True)
        self._on_exit(generation)  # names the actor's pid in the errors of the requests it fails
        self._actor = None

    def kill(self, reason: str) -> None:
        """Kill the actor (a stale heartbeat, a start that takes too long); it is restarted."""
        if self._actor is not None and self.state not in ("dead", "stopped"):
            log.error("killing worker %d (Ray actor, pid %s): %s", self.index, self.pid, reason)
            self._kill_reason = reason
            self._lost(self.generation, reason)

    async def _stop_worker(self, timeout: float) -> None:
        actor, self._actor = self._actor, None
        if actor is not None:
            ray.kill(actor, no_restart=True)
        self.state = "stopped"
        for task in list(self._tasks_bg):
            task.cancel()
        self.dispatch.cancel_handed()


class RayPool:
    """Ray actors on the hosts of a cluster (``MST_WORKER_POOL=ray``): a :class:`~.interface.WorkerPool`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def start(self, sources: Sources) -> list[WorkerHandle]:
        """Join (or start) the cluster, then create and start one actor per planned worker."""
        workers: list[WorkerHandle] = [
            RayWorkerHandle(c, self.settings, sources, options) for c, options in plan(self.settings)
        ]
        for handle in workers:
            await handle.start()
        return workers

    async def stop(self) -> None:
        """Leave the cluster (and stop it, if this process started it)."""
        await asyncio.to_thread(shutdown)


def plan(settings: Settings) -> list[tuple[WorkerConfig, dict[str, Any]]]:
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
    return [(worker_config(settings, index, backend, None), options) for index in range(count)]


def shutdown() -> None:
    """Leave the cluster (and stop it, if this process started it)."""
    if ray.is_initialized():
        ray.shutdown()


def _first_line(exc: BaseException) -> str:
    """The first line of a Ray error (the rest is advice about OOM killers and logs)."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
