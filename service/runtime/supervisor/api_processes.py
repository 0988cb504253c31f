"""Several API processes on one port: spawned on the supervisor's listening socket, replaced when they die.

The supervisor binds the service's address once and hands the listening socket to every API
process it spawns; each serves HTTP with uvicorn on it (the kernel gives each new connection to
one of them) and reaches every worker directly over the workers' sockets, so no request is ever
relayed by a second process. An API process that dies is replaced after a short pause; what it
held goes with it: its connections (their clients see them close), the ``?wait=`` jobs whose ids
it had not given out, its quota tokens (released here); the jobs on sharded graphs it
coordinated and that were running fail, those still queued are taken up by its replacement.
Everything it acknowledged is in the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...settings import Settings
from ...storage.store import Store
from ..board import Board

log = logging.getLogger("service.runtime.supervisor")

MP = multiprocessing.get_context("spawn")

#: what runs an API process: (settings, slot, board, run folder, listening sockets)
ApiMain = Callable[[Settings, int, Board, Path, list[socket.socket]], None]


def api_entry(
    target: str,
    settings: Settings,
    slot: int,
    board: Board,
    run_dir: Path,
    sockets: list[socket.socket],
    supervisor: int,
) -> None:
    """An API process's entry point: import ``target`` (``module:function``, an :data:`ApiMain`) in
    the child and run it, so the supervisor never imports the web framework itself. It ends with
    its ``supervisor`` (pid), whatever ends that (:func:`end_with_supervisor`)."""
    import importlib

    end_with_supervisor(supervisor)
    module, _, name = target.partition(":")
    main: ApiMain = getattr(importlib.import_module(module), name)
    main(settings, slot, board, run_dir, sockets)


#: how often an API process looks whether its supervisor is still its parent
PARENT_CHECK_S = 0.5


def end_with_supervisor(supervisor: int) -> None:
    """Stop this process (SIGTERM: uvicorn's graceful shutdown) once ``supervisor`` is no longer its
    parent: a SIGKILLed supervisor runs no shutdown, and an API process left behind would keep
    serving on the service's port (a restarted service could not bind it) with no worker to reach."""

    def watch() -> None:
        while os.getppid() == supervisor:
            time.sleep(PARENT_CHECK_S)
        log.warning("API process %d: its supervisor (pid %d) is gone; stopping", os.getpid(), supervisor)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="supervisor-watch", daemon=True).start()


#: the pause before a dead API process is replaced (doubled while they die young)
RESPAWN_PAUSE_S = 0.2


def listen(host: str, port: int) -> socket.socket:
    """The service's listening socket (shared by every API process)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class ApiProcesses:
    """The API processes of a service (see the module's docstring)."""

    def __init__(
        self, settings: Settings, board: Board, run_dir: Path, store: Store, target: str, sock: socket.socket
    ) -> None:
        self._settings = settings
        self._board = board
        self._run_dir = run_dir
        self._store = store
        self._target = target
        self._sock = sock
        self.processes: list[Any] = []
        self._started: list[float] = []
        self._young_deaths = [0] * board.api_slots
        self.stopping = False
        self._tasks: set[asyncio.Future[Any]] = set()

    def start(self) -> None:
        for slot in range(self._board.api_slots):
            self.processes.append(None)
            self._started.append(0.0)
            self._spawn(slot)

    def _spawn(self, slot: int) -> None:
        process = MP.Process(
            target=api_entry,
            args=(self._target, self._settings, slot, self._board, self._run_dir, [self._sock], os.getpid()),
            name=f"mst-api-{slot}",
            daemon=True,
        )
        process.start()
        self.processes[slot] = process
        self._started[slot] = time.monotonic()
        asyncio.get_running_loop().add_reader(process.sentinel, self._exited, slot, process)
        log.info("API process %d started (pid %d)", slot, process.pid)

    def _exited(self, slot: int, process: Any) -> None:
        asyncio.get_running_loop().remove_reader(process.sentinel)
        process.join(0)
        if self.stopping or self.processes[slot] is not process:
            return
        log.error("API process %d (pid %d) exited with %s; replacing it", slot, process.pid, process.exitcode)
        self.release(slot)
        young = time.monotonic() - self._started[slot] < 10
        self._young_deaths[slot] = self._young_deaths[slot] + 1 if young else 0
        pause = min(RESPAWN_PAUSE_S * 2 ** min(self._young_deaths[slot], 8), 30.0)
        task = asyncio.ensure_future(self._respawn(slot, pause))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _respawn(self, slot: int, pause: float) -> None:
        await asyncio.sleep(pause)
        if not self.stopping:
            self._spawn(slot)

    def release(self, slot: int) -> None:
        """What a dead API process held: its quota tokens, its running sharded jobs (failed)."""
        self._store.release_holder(f"api-{slot}")
        now = time.time()
        for job in self._store.coordinated_by(slot, "running"):
            self._store.transition(
                job.id,
                frozenset({"running"}),
                status="failed",
                finished_at=now,
                error_type="worker_lost",
                error_message="The API process coordinating the job's shards was lost; submit again.",
            )

    async def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM every API process (uvicorn's graceful stop), then wait; kill those still there."""
        self.stopping = True
        for process in self.processes:
            if process is not None and process.is_alive():
                with contextlib.suppress(OSError):
                    process.terminate()  # SIGTERM: uvicorn stops gracefully
        deadline = time.monotonic() + timeout
        for process in self.processes:
            if process is None:
                continue
            await asyncio.to_thread(process.join, max(deadline - time.monotonic(), 0.1))
            if process.is_alive():
                process.kill()
                await asyncio.to_thread(process.join, 5)
