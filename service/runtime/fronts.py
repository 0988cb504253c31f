"""The front processes of ``MST_API_PROCESSES`` > 1: sockets, start, restart, stop.

``python -m service`` then runs the app (workers, jobs, SQLite) in the
**runtime process**, serving HTTP only on a Unix socket of the data dir
(``run/api.sock``, mode 0600), and N **front processes** (spawned by the app's
lifespan once it is ready) that take the public traffic: each binds
``MST_HOST:MST_PORT`` itself with ``SO_REUSEPORT``, so the kernel spreads the
connections over them. The fronts reach the runtime over ``run/rpc.sock``
(:mod:`service.runtime.rpc`) and relay what they do not answer to
``run/api.sock``. A front that dies is started again; SIGTERM of the runtime
process stops the fronts first (they finish their requests), then the workers.
A front whose runtime process is gone stops by itself. ``run/fronts.pid``
lists the fronts' process ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from ..settings import Settings
from .rpc import Handler, RpcServer

log = logging.getLogger("service.fronts")

#: the longest path a Unix socket can have (sun_path, with its NUL)
_MAX_SOCKET_PATH = 100
#: a front that dies sooner than this after its start is started again only after a pause
_QUICK_DEATH_S = 2.0


@dataclass(frozen=True)
class RunPaths:
    """Where the runtime process listens: its HTTP (``api``) and RPC (``rpc``) Unix sockets."""

    folder: Path
    api: Path
    rpc: Path
    pids: Path

    @classmethod
    def make(cls, settings: Settings) -> RunPaths:
        """``<data_dir>/run`` (mode 0700); a private temporary folder where that path is too long for
        a Unix socket. The pid file stays in ``<data_dir>/run`` either way."""
        run = settings.data_dir.resolve() / "run"
        run.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(run, 0o700)
        folder = run
        if len(str(run / "api.sock")) > _MAX_SOCKET_PATH:
            folder = Path(tempfile.mkdtemp(prefix="mst-run-"))  # 0700, this user's
        return cls(folder, folder / "api.sock", folder / "rpc.sock", run / "fronts.pid")


def bind_unix(path: Path) -> socket.socket:
    """A listening Unix socket at ``path``, mode 0600 from its creation."""
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    sock.listen(2048)
    return sock


def bind_shared(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` that other processes can bind too (``SO_REUSEPORT``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def run_front(settings: Settings, paths: RunPaths, index: int, runtime_pid: int) -> None:
    """The body of a front process (spawned): serve the public port until SIGTERM, or until the
    runtime process ``runtime_pid`` is no longer its parent."""
    from ..api.front import Front

    logging.basicConfig(
        level=settings.log_level.upper(),
        format=f"%(asctime)s %(levelname)s front{index} %(name)s: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per relayed request otherwise
    front = Front(settings, paths.rpc, paths.api, runtime_pid)
    if os.getppid() != runtime_pid:
        return  # the runtime died while this front started
    sock = bind_shared(settings.host, settings.port)
    config = uvicorn.Config(
        front,
        log_level=settings.log_level,
        access_log=settings.log_level == "debug",
        timeout_graceful_shutdown=10,
    )
    FrontServer(config).run(sockets=[sock])


class FrontServer(uvicorn.Server):
    """uvicorn's server, deaf to SIGINT: Ctrl-C reaches the whole process group, and the runtime
    process stops its fronts in order (with SIGTERM) rather than racing them."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig != signal.SIGINT:
            super().handle_exit(sig, frame)


class RuntimeServer(uvicorn.Server):
    """uvicorn's server of the runtime process: on SIGTERM or SIGINT it stops the fronts at once
    (``fronts()`` gives them once the app has started them), so they stop taking connections while
    this process finishes its own requests, rather than after."""

    def __init__(self, config: uvicorn.Config, fronts: Callable[[], Fronts | None]) -> None:
        super().__init__(config)
        self.fronts = fronts

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        fronts = self.fronts()
        if fronts is not None:
            fronts.interrupt()
        super().handle_exit(sig, frame)


class Fronts:
    """The RPC server of the runtime process and the front processes it serves."""

    def __init__(self, settings: Settings, paths: RunPaths, calls: dict[str, Handler]) -> None:
        self.settings = settings
        self.paths = paths
        self.rpc = RpcServer(paths.rpc, calls)
        self._context = multiprocessing.get_context("spawn")
        self._procs: list[Any] = [None] * settings.api_processes
        self._started: list[float] = [0.0] * settings.api_processes
        self._monitor: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> None:
        await self.rpc.start()
        for index in range(len(self._procs)):
            self._spawn(index)
        self._write_pids()
        self._monitor = asyncio.ensure_future(self._watch())

    def _spawn(self, index: int) -> None:
        proc = self._context.Process(
            target=run_front,
            args=(self.settings, self.paths, index, os.getpid()),
            name=f"mst-front-{index}",
            daemon=False,
        )
        proc.start()
        self._procs[index] = proc
        self._started[index] = time.monotonic()
        log.info("front %d started (pid %d)", index, proc.pid)

    def _write_pids(self) -> None:
        text = "".join(f"{p.pid}\n" for p in self._procs if p is not None)
        tmp = self.paths.pids.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.paths.pids)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs if p is not None]

    async def _watch(self) -> None:
        while not self._stopping:
            await asyncio.sleep(0.2)
            for index, proc in enumerate(self._procs):
                if self._stopping or proc is None or proc.exitcode is None:
                    continue
                log.warning(
                    "front %d (pid %d) ended with %s; starting it again", index, proc.pid, proc.exitcode
                )
                proc.close()
                if time.monotonic() - self._started[index] < _QUICK_DEATH_S:
                    await asyncio.sleep(_QUICK_DEATH_S)  # e.g. the port is taken: no busy loop
                    if self._stopping:
                        return
                self._spawn(index)
                self._write_pids()

    def interrupt(self) -> None:
        """SIGTERM every front now, so they stop taking connections (safe in a signal handler)."""
        self._stopping = True
        for proc in self._procs:
            if proc is not None and proc.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)

    async def stop(self) -> None:
        """SIGTERM the fronts and wait for them (they finish their requests), then close the RPC."""
        self._stopping = True
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        live = [p for p in self._procs if p is not None and p.exitcode is None]
        for proc in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
        for proc in live:
            await asyncio.to_thread(proc.join, 15)
            if proc.exitcode is None:
                log.warning("front pid %d did not stop in 15 s; killing it", proc.pid)
                proc.kill()
                await asyncio.to_thread(proc.join, 5)
        self.paths.pids.unlink(missing_ok=True)
        await self.rpc.close()
        # uvicorn ends the process by raising the SIGTERM it caught again: clean up now
        self.paths.api.unlink(missing_ok=True)
        if self.paths.folder != self.paths.pids.parent:
            with contextlib.suppress(OSError):
                self.paths.folder.rmdir()
