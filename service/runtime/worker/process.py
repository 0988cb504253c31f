"""The worker process: its start-up, then its loop over the API processes' requests, until it is told to stop.

Spawned by the supervisor (:mod:`service.runtime.supervisor`) with the ``spawn`` start method:
its entry point (:func:`.entry.main`, which imports nothing of the engine) pins its GPU with
``CUDA_VISIBLE_DEVICES`` and only then imports this module and through it :mod:`gpu_core` (and
CuPy). :func:`main` warms up (:func:`~.startup.start`), says ``ready`` to the supervisor over
the pipe it was spawned with, and waits for ``serve`` (a standby process waits there until it
takes a dead worker's place); then it opens the store, takes the datasets placed on it and the
jobs its predecessor left (:mod:`.job_records`), listens on its socket and runs its loop
(:mod:`.loop`) until the supervisor says ``stop``, the supervisor is gone, or its device fails.

Once it serves, a heartbeat thread stamps ``time.monotonic()`` into the board every
``heartbeat_interval_s``; the supervisor restarts a worker whose stamp gets old. After a
:class:`gpu_core.errors.DeviceError` the worker answers and exits, so its replacement starts from
a fresh CUDA context; out of device memory (:class:`gpu_core.errors.DeviceMemoryError`) is
answered (507) and the worker carries on.
"""

from __future__ import annotations

import gc
import json
import signal
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ...storage.store import Store
from ..board import Board
from . import job_records
from .holdings import Holdings
from .loop import WorkerLoop
from .protocol import CONTROL, MST, WorkerConfig
from .server import Server
from .startup import start
from .state import Worker, portable
from .writer import writing

#: why the jobs a dead worker was running failed, when no API process sent them again
LOST = "The worker running the job was lost; submit again."
#: how long a new worker waits for the API processes to send again the jobs its predecessor began
ORPHAN_GRACE_S = 10.0
#: how long a replacement waits for every API process's word before it runs anything
SYNC_TIMEOUT_S = 2.0


def main(config: WorkerConfig, board: Board, supervisor: Connection, entered: float | None = None) -> None:
    """Run the worker process (started through :func:`.entry.main`); ``supervisor``: its pipe to
    the supervisor; ``entered``: ``time.monotonic()`` when the process reached its entry point."""
    modules_ms = 0.0 if entered is None else (time.monotonic() - entered) * 1e3
    entered = time.monotonic() if entered is None else entered
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the supervisor, which stops its workers
    try:
        worker = Worker(config)
        info = start(worker)
        info["entered_at"] = entered
        info["startup_ms"] = {"modules": round(modules_ms, 3), **info["startup_ms"]}
    except BaseException as exc:
        supervisor.send(("failed", portable(exc, for_operator=True)))
        supervisor.close()
        return
    gc.freeze()  # the engine and its warm-up state stay: no full collections walking them per job
    supervisor.send(("ready", info))
    try:
        order = supervisor.recv()  # a standby waits here until it takes over
    except (EOFError, OSError):
        return
    if order[0] != "serve":
        return
    serve(worker, board, supervisor, resume=bool(order[1].get("resume")) if len(order) > 1 else False)


def _heartbeat(board: Board, index: int, interval: float) -> None:
    while True:
        board.beat(index)
        time.sleep(interval)


def serve(worker: Worker, board: Board, supervisor: Connection, resume: bool = False) -> None:
    """Take this worker's datasets and jobs, listen on its socket and run the loop. ``resume``: it
    replaces a worker process that died (the API processes send again what they kept for it)."""
    config = worker.config
    board.beat(config.index)  # the serving process alone beats (a standby waiting beside it does not)
    beat = threading.Thread(
        target=_heartbeat,
        args=(board, config.index, config.heartbeat_interval_s),
        name="heartbeat",
        daemon=True,
    )
    beat.start()
    store = Store(Path(config.data_dir), checkpoint=False, result_dir=config.result_folder)
    holdings = Holdings(worker, store)
    holdings.adopt_placements()
    server = Server(config.socket_path)
    try:
        with writing() as writer:
            loop = WorkerLoop(worker, holdings, board, server, writer)
            queued, running = job_records.recover(store, list(holdings.status))
            now = time.monotonic()
            for job in queued:  # at their places in the queue (no later than now: after a reboot)
                result = str(store.result_path(job.id))
                args = [job.graph_id, result, job.task, json.loads(job.params), job_records.spec_of(job)]
                loop.add(server.made(MST, args, min(job.stamp or 0.0, now)))
            deadline = time.monotonic() + ORPHAN_GRACE_S
            loop.orphans = {job.id: deadline for job in running}
            if resume:
                loop.resume_after(config.api_slots, SYNC_TIMEOUT_S)
            board.set_state(config.index, "reloading")
            loop.publish_numbers(force=True)
            supervisor.send(("serving", {}))
            _run(loop, supervisor)
    finally:
        server.close()
        store.close()


def _run(loop: WorkerLoop, supervisor: Connection) -> None:
    """The loop (see :mod:`.loop`): read, answer the control requests, run one request or reload
    one dataset, until told to stop."""
    spin_s = loop.worker.config.spin_s
    control = supervisor.fileno()
    writer = loop.writer
    idle_since: float | None = None
    while True:
        busy = bool(loop.queue) or bool(loop.holdings.pending())
        timeout = _wait(busy, idle_since, spin_s, writer.busy())
        if not busy and idle_since is None:
            idle_since = time.monotonic()
        incoming, closed, ready = loop.server.poll(timeout, extra=[control, writer.drained_fd])
        if writer.drained_fd in ready:
            writer.take_drained()
        if control in ready and not _told(supervisor):
            return
        for conn in closed:
            loop.closed(conn)
        for request in sorted(incoming, key=lambda r: (r.stamp, r.seq)):
            if request.op in CONTROL:
                loop.control(request)
            else:
                loop.add(request)
        if incoming:
            idle_since = None
        if loop.queue:
            idle_since = None
            if not loop.run_next():
                return  # the device failed: a fresh process gets a fresh CUDA context
        elif loop.holdings.pending() and loop.synced():  # what is asked for first, then the rest
            loop.holdings.reload_next(loop.busy_datasets())
            loop.publish_numbers(force=True)
        if loop.orphans:
            loop.expire_orphans(LOST)
        loop.publish_numbers()


def _wait(busy: bool, idle_since: float | None, spin_s: float, writing: bool) -> float | None:
    """How long the next read may wait: not at all with work to do; polling for ``spin_s`` after the
    last request (the next one of a busy client finds the worker awake); else until something comes."""
    if busy:
        return 0.0
    if writing:
        return None  # the writer's word that it is done wakes the loop, which then polls
    if spin_s > 0 and (idle_since is None or time.monotonic() - idle_since < spin_s):
        return 0.0
    return None


def _told(supervisor: Connection) -> bool:
    """Read the supervisor's word; False when it says stop or is gone."""
    try:
        order: Any = supervisor.recv()
    except (EOFError, OSError):
        return False
    return bool(order and order[0] != "stop")
