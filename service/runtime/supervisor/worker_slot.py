"""One worker as the supervisor keeps it: its process's life, its restarts, its warm standby.

A worker's life (on the board, :data:`~service.runtime.board.WORKER_STATES`): ``starting`` until
its process has warmed up and serves its socket, then ``reloading`` (it takes requests while
the datasets placed on it come back) and ``ready``; ``dead`` once its process is gone, until the
next one serves; ``stopped`` at the end.

A worker that exits, whose heartbeat is older than ``MST_HEARTBEAT_TIMEOUT_S`` once it is up, or
that is not up within ``MST_WORKER_START_TIMEOUT_S`` (it is then killed) is replaced: by its
warm standby at once where there is one (``MST_STANDBY_WORKER``), else by a new process after a
back-off that doubles while processes die before they serve anything. The API processes notice
the death themselves (their connection closes) and send the requests it had not started to the
next process; the next process takes back the datasets placed on the worker and the jobs left
in the store (:mod:`service.runtime.worker.process`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from ...settings import Settings
from ..board import Board
from ..worker.protocol import WorkerConfig
from .plan import Spawned, spawn_worker

log = logging.getLogger("service.runtime.supervisor")

#: standby processes that may die in a row before they are warm before the worker gives up on one
SPARE_ATTEMPTS = 3
#: pause before a new standby after one died (doubled for each in a row that died cold)
SPARE_PAUSE_S = 1.0


class Process:
    """A process of a worker (its current one, or its standby) and what it said at its start."""

    def __init__(self, spawned: Spawned, generation: int) -> None:
        self.process = spawned.process
        self.conn = spawned.conn
        self.spawned_at = spawned.spawned_at
        self.generation = generation
        #: its ``ready`` info once warm
        self.info: dict[str, Any] | None = None
        self.serving = False
        self.failure: str | None = None

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    def tell(self, *order: Any) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(order)


class WorkerSlot:
    """The supervisor's side of one worker (see the module's docstring)."""

    def __init__(
        self, config: WorkerConfig, settings: Settings, board: Board, changed: Callable[[], None]
    ) -> None:
        self.config = config
        self.index = config.index
        self._settings = settings
        self._board = board
        self._changed = changed
        self.current: Process | None = None
        self.spare: Process | None = None
        self._spare_starting = False
        self._spare_failures = 0
        self._generations = 0
        self.restarts = 0
        self._failures_in_row = 0
        self.last_error: str | None = None
        self._kill_reason: str | None = None
        self.started_at = 0.0
        self._died_at: float | None = None
        self.last_restart_ms: float | None = None
        self.plan_ms: float | None = None
        self.stopping = False
        self._restart_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Future[Any]] = set()
        self._adopted: Spawned | None = None

    # -- life ---------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        return self._board.state(self.index)

    def adopt(self, spawned: Spawned) -> None:
        """Make ``spawned`` (worker 0's head start) the process :meth:`start` takes."""
        self._adopted = spawned

    async def start(self) -> None:
        self._board.set_state(self.index, "starting")
        await self._spawn()

    async def _spawn(self) -> None:
        spawned, self._adopted = self._adopted, None
        if spawned is None:
            spawned = await asyncio.to_thread(spawn_worker, self.config, self._board)
        self._take(Process(spawned, self._next_generation()))
        log.info(
            "worker %d started (pid %d, backend %s)", self.index, spawned.process.pid, self.config.backend
        )

    def _next_generation(self) -> int:
        self._generations += 1
        return self._generations

    def _take(self, process: Process) -> None:
        self.current = process
        self.started_at = process.spawned_at
        self._board.set(self.index, "generation", process.generation)
        self._board.set(self.index, "pid", process.pid)
        self._board.set_state(self.index, "starting")
        self._watch(process)

    def _watch(self, process: Process) -> None:
        loop = asyncio.get_running_loop()
        loop.add_reader(process.conn.fileno(), self._readable, process)

    def _readable(self, process: Process) -> None:
        try:
            message = process.conn.recv()
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(process.conn.fileno())
            self._later(self._reap(process))
            return
        head = message[0]
        if head == "ready":
            process.info = message[1]
            if process is self.current:
                process.tell("serve", {"resume": self.restarts > 0})
            elif process is self.spare:
                self._spare_failures = 0
                log.info("worker %d: standby process (pid %d) warm", self.index, process.pid)
        elif head == "serving":
            process.serving = True
            self._serving(process)
        elif head == "failed":
            process.failure = f"failed to start: {type(message[1]).__name__}: {message[1]}"
            log.error("worker %d %s", self.index, process.failure)
        self._changed()

    def _serving(self, process: Process) -> None:
        if self._died_at is not None:
            self.last_restart_ms = round((time.monotonic() - self._died_at) * 1e3, 3)
            self._died_at = None
        info = process.info or {}
        log.info(
            "worker %d serving on %s (start-up %s ms)",
            self.index,
            info.get("device"),
            info.get("startup_ms") or round(info.get("warmup_ms", 0.0)),
        )
        if self._wants_spare():
            self._later(self._spawn_spare())

    async def _reap(self, process: Process) -> None:
        await asyncio.to_thread(process.process.join, 2.0)  # so its exit code is known
        process.conn.close()
        if process is self.spare:
            self._spare_exited(process)
        elif process is self.current:
            self._died(process)
        self._changed()

    def _died(self, process: Process) -> None:
        self._died_at = time.monotonic()
        code = process.process.exitcode
        self.current = None
        self._board.set_state(self.index, "stopped" if self.stopping else "dead")
        self.last_error = self._kill_reason or process.failure or f"the process exited (exit code {code})"
        self._kill_reason = None
        if self.stopping:
            return
        log.error("worker %d (pid %d) died: %s; restarting it", self.index, process.pid, self.last_error)
        if process.serving or time.monotonic() - self.started_at > 60:
            self._failures_in_row = 0  # it was up (or ran a while): not a crash loop
        else:
            self._failures_in_row += 1
        self.restarts += 1
        self._board.set(self.index, "restarts", self.restarts)
        self._restart_task = asyncio.create_task(self._restart())

    async def _restart(self) -> None:
        spare, self.spare = self.spare, None
        if spare is not None:  # warm already: no pause, no start
            log.info("worker %d: the standby process (pid %d) takes over", self.index, spare.pid)
            self._take(spare)
            if spare.info is not None:
                spare.tell("serve", {"resume": True})
            return
        await asyncio.sleep(min(0.2 * 2 ** min(self._failures_in_row, 8), 30.0))
        if not self.stopping:
            await self._spawn()

    def kill(self, reason: str) -> None:
        """SIGKILL the current process (a stale heartbeat, a start that takes too long)."""
        process = self.current
        if process is not None and process.process.is_alive():
            log.error("killing worker %d (pid %d): %s", self.index, process.pid, reason)
            self._kill_reason = reason
            process.process.kill()

    def check(self, now: float) -> None:
        """Kill a process whose heartbeat is stale once it serves, or that does not serve in time;
        the same for the standby."""
        process = self.current
        settings = self._settings
        if process is not None and process.process.is_alive():
            age = now - self._board.get(self.index, "heartbeat")
            if process.serving and age > settings.heartbeat_timeout_s:
                self.kill(f"no heartbeat for {age:.1f} s (MST_HEARTBEAT_TIMEOUT_S)")
            elif not process.serving and now - self.started_at > settings.worker_start_timeout_s:
                self.kill(f"not ready after {settings.worker_start_timeout_s} s (MST_WORKER_START_TIMEOUT_S)")
        spare = self.spare
        if (
            spare is not None
            and spare.info is None
            and now - spare.spawned_at > settings.worker_start_timeout_s
        ):
            log.error("worker %d: standby not warm within MST_WORKER_START_TIMEOUT_S; killing it", self.index)
            spare.process.kill()

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop the worker: it finishes the run in progress and writes the files of what it answered.

        Published jobs still queued stay queued in the store (the next start runs them); one still
        running after ``timeout`` fails ``worker_lost`` at the next start.
        """
        self.stopping = True
        if self._restart_task is not None:
            self._restart_task.cancel()
        for process in (self.spare, self.current):
            if process is not None:
                process.tell("stop")
        for process in (self.spare, self.current):
            if process is None:
                continue
            await asyncio.to_thread(process.process.join, timeout)
            if process.process.is_alive():
                process.process.kill()
                await asyncio.to_thread(process.process.join, timeout)
        self._board.set_state(self.index, "stopped")

    def _later(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- standby ------------------------------------------------------------------------------

    def _wants_spare(self) -> bool:
        setting = self._settings.standby_worker
        info = (self.current.info if self.current is not None else None) or {}
        backend = info.get("backend", self.config.backend)
        wanted = setting == "on" or (setting == "auto" and backend == "gpu")
        return (
            wanted
            and not self.stopping
            and self.spare is None
            and not self._spare_starting
            and self._spare_failures < SPARE_ATTEMPTS
        )

    async def _spawn_spare(self) -> None:
        self._spare_starting = True
        try:
            spawned = await asyncio.to_thread(spawn_worker, self.config, self._board)
        finally:
            self._spare_starting = False
        spare = Process(spawned, self._next_generation())
        self.spare = spare
        self._watch(spare)
        log.info("worker %d: standby process started (pid %d)", self.index, spare.pid)
        if self.stopping:
            spare.process.kill()

    def _spare_exited(self, spare: Process) -> None:
        self.spare = None
        if self.stopping:
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
        log.warning("worker %d: standby process (pid %d) exited; starting another", self.index, spare.pid)

        async def later() -> None:
            await asyncio.sleep(SPARE_PAUSE_S * 2**self._spare_failures)
            if self.current is not None and self.current.serving and self._wants_spare():
                await self._spawn_spare()

        self._later(later())

    # -- what it reports ----------------------------------------------------------------------

    def facts(self) -> dict[str, Any]:
        """What the API processes show of this worker beside the board's numbers (``/readyz``)."""
        process = self.current
        info = (process.info if process is not None else None) or {}
        startup_ms: dict[str, float] = {}
        if process is not None and "entered_at" in info:
            startup_ms["process"] = round((info["entered_at"] - process.spawned_at) * 1e3, 3)
        startup_ms.update(info.get("startup_ms", {}))
        spare = self.spare
        return {
            "index": self.index,
            "backend": info.get("backend", self.config.backend),
            "device": info.get("device"),
            "last_error": self.last_error,
            "startup_ms": startup_ms,
            "warm_up": info.get("warm_up"),
            "plan_ms": self.plan_ms,
            "last_restart_ms": self.last_restart_ms,
            "standby": None
            if spare is None
            else {"pid": spare.pid, "state": "warm" if spare.info is not None else "starting"},
        }
