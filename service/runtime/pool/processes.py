"""A worker that is a process of this host: its start, its pipe, its death, its standby.

A :class:`ProcessHandle` is a :class:`~.handle.WorkerHandle` whose transport is one duplex
pipe to a process started with ``spawn`` (:func:`~.head_start.spawn_worker`; worker 0's may
have been spawned before the API was built, :mod:`.head_start`, and is adopted). The API's event
loop reads the pipe's replies as soon as they arrive (``add_reader``: no thread, no hop) and
writes requests without blocking (the rest of a large one waits until the pipe drains,
``add_writer``). Up to
:data:`MAX_IN_FLIGHT` requests are in the pipe at once; more wait in the outbox. Which requests
the process is computing is read, once it is gone, from the run stamp it shares
(:class:`~service.runtime.worker.protocol.RunStamp`); its heartbeat is a shared stamp too.

Standby (``MST_STANDBY_WORKER``, :class:`Spare`): a warmed-up spare process waits beside the
worker and takes its place at once when it dies (its requests go to the spare, its datasets
reload in the background); a new spare starts once the worker is ready again. A spare that dies
is replaced, the worker untouched; :data:`SPARE_ATTEMPTS` spares in a row that die before they
are warm switch the standby off.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from ...errors import WorkerLostError
from ...settings import Settings
from ..worker.protocol import MAX_COALESCED, STOP, RunStamp, WorkerConfig, framed, unframed, widen
from .handle import WorkerHandle
from .head_start import Spawned, spawn_worker
from .residency import Sources

log = logging.getLogger("service.runtime.supervisor")

#: requests in the pipe at once; more wait in the outbox, so a send never blocks the event loop
MAX_IN_FLIGHT = 2 * MAX_COALESCED
#: standby processes that may die in a row before they are warm before the worker gives up on one
SPARE_ATTEMPTS = 3
#: pause before a new standby after one died (doubled for each in a row that died cold)
SPARE_PAUSE_S = 1.0
#: bytes read from a worker's pipe at once
_READ_SIZE = 1 << 20


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


class ProcessHandle(WorkerHandle):
    """The API side of one worker process (see the module's docstring)."""

    def __init__(self, config: WorkerConfig, settings: Settings, sources: Sources) -> None:
        super().__init__(config, settings, sources)
        self._process: Any = None
        self._conn: Connection | None = None
        self._heartbeat: Any = None
        #: which requests the process computes now (read when it dies, see restarts.py)
        self._stamp = RunStamp()
        #: framed requests not yet written to the pipe (whole messages are appended, see _flush)
        self._unsent = bytearray()
        self._writing = False  # the loop waits for the pipe to drain (add_writer)
        #: where the pipe's bytes are read into first: os.read(fd, 1 MiB) allocated and gave back
        #: 1 MiB per read, two reads a job (the reply, then its STORED note)
        self._read_view = memoryview(bytearray(_READ_SIZE))
        #: numbers of the processes started (the worker's, the standby's): messages name theirs
        self._generations = itertools.count(1)
        #: the warm spare process (MST_STANDBY_WORKER), its start in progress, its failed starts
        self._spare: Spare | None = None
        self._spare_starting = False
        self._spare_failures = 0
        #: a process spawned for this worker before it started (worker 0's head start)
        self._adopted: Spawned | None = None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else int(self._process.pid)

    def heartbeat_age(self) -> float:
        return 0.0 if self._heartbeat is None else time.monotonic() - float(self._heartbeat.value)

    # -- the process --------------------------------------------------------------------------

    def adopt(self, spawned: Spawned) -> None:
        """Make ``spawned`` (a process spawned for this worker's config before the handle started,
        :mod:`.head_start`) the process its start takes, instead of spawning one."""
        self._adopted = spawned

    async def _spawn(self) -> None:
        spawned, self._adopted = self._adopted, None
        if spawned is None:
            spawned = await asyncio.to_thread(spawn_worker, self.config)
        process, conn = spawned.process, spawned.conn
        generation = next(self._generations)
        self._take(process, conn, spawned.heartbeat, spawned.running, generation, spawned.spawned_at)
        assert self._loop is not None
        self._loop.add_reader(conn.fileno(), self._readable, conn, process, generation, bytearray())
        log.info("worker %d started (pid %d, backend %s)", self.index, process.pid, self.config.backend)

    def _take(
        self, process: Any, conn: Connection, heartbeat: Any, running: Any, generation: int, spawned_at: float
    ) -> None:
        """Make ``process`` the worker's (a new one, or the standby taking over)."""
        self.generation = generation
        self._process, self._conn, self._heartbeat = process, conn, heartbeat
        widen(conn)  # a large request (a prediction's points) written at once
        self._stamp = RunStamp(running)
        self.state = "starting"
        self._served = False
        self.started_at = self._spawned_at = spawned_at
        self.requests.drop_outbox()
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
                    count = os.readv(fd, [self._read_view])
                except (BlockingIOError, InterruptedError):
                    break
                if not count:
                    raise EOFError
                inbox += self._read_view[:count]
                if count < _READ_SIZE:
                    break
        except (EOFError, OSError):  # the worker is gone
            self._loop.remove_reader(fd)
            self._background(self._reap(process, generation))
        for message in unframed(inbox):
            if isinstance(message, BaseException):  # an unpicklable reply: still a reply, say what it was
                log.error("worker %d sent a message that cannot be read: %r", self.index, message)
                continue
            self._on_message(generation, message)

    async def _reap(self, process: Any, generation: int) -> None:
        await asyncio.to_thread(process.join, 2.0)  # so its exit code is known
        self._on_exit(generation)

    def _flush(self) -> None:
        """Write the requests that may go to the pipe without blocking the event loop.

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
        while (request := self.requests.next_to_send(MAX_IN_FLIGHT)) is not None:
            self._unsent += framed(request.message())
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

    def _running_ids(self) -> range:
        """The ids of the requests the dead process was running (see restarts.py)."""
        return self._stamp.running()

    # -- death and stop -----------------------------------------------------------------------

    def _exit_code(self) -> int | None:
        return None if self._process is None else self._process.exitcode

    def _closed(self) -> None:
        self._stop_writing()
        self._unsent.clear()
        if self._conn is not None:
            self._conn.close()

    async def _joined(self) -> None:
        if self._process is not None:
            await asyncio.to_thread(self._process.join, 5)

    def kill(self, reason: str) -> None:
        """SIGKILL the process (a stale heartbeat, a start that takes too long); it is restarted."""
        if self._process is not None and self._process.is_alive():
            log.error("killing worker %d (pid %s): %s", self.index, self.pid, reason)
            self._kill_reason = reason
            self._process.kill()

    async def stop(self, timeout: float = 5.0) -> None:
        spare = self._stop_spare()
        await super().stop(timeout)
        if spare is not None:
            await asyncio.to_thread(spare.join, timeout)
            if spare.is_alive():
                spare.kill()

    async def _stop_worker(self, timeout: float) -> None:
        process = self._process
        if process is None:
            return
        if self.state in ("reloading", "ready") and self._conn is not None:
            self._unsent += framed((STOP, 0))  # after any request half written
            self._flush()
        await asyncio.to_thread(process.join, timeout)
        if process.is_alive():
            process.kill()
            await asyncio.to_thread(process.join, timeout)
        self.state = "stopped"
        self._sort_out_requests(WorkerLostError(f"worker {self.index} stopped with the service."))

    # -- standby: a warm spare process (MST_STANDBY_WORKER) -----------------------------------

    def _wants_spare(self) -> bool:
        setting = self._settings.standby_worker
        backend = self.info.get("backend", self.config.backend)  # a worker started as "auto" says
        wanted = setting == "on" or (setting == "auto" and backend == "gpu")
        return wanted and not self._stopping and self._spare_failures < SPARE_ATTEMPTS

    def _all_reloaded(self) -> None:
        self._ensure_spare()

    def _ensure_spare(self) -> None:
        """Start a spare process if the worker should have one and has none."""
        if self._wants_spare() and self._spare is None and not self._spare_starting:
            self._background(self._spawn_spare())

    async def _spawn_spare(self) -> None:
        self._spare_starting = True
        try:
            spawned = await asyncio.to_thread(spawn_worker, self.config)
        finally:
            self._spare_starting = False
        process, conn = spawned.process, spawned.conn
        generation = next(self._generations)
        spare = Spare(process, conn, spawned.heartbeat, spawned.running, generation, spawned.spawned_at)
        self._spare = spare
        assert self._loop is not None
        self._loop.add_reader(conn.fileno(), self._readable, conn, process, spare.generation, bytearray())
        log.info("worker %d: standby process started (pid %d)", self.index, process.pid)
        if self._stopping:
            process.kill()

    def _other_message(self, generation: int, message: tuple[Any, ...]) -> None:
        if self._spare is None or generation != self._spare.generation:
            return
        if message[0] == "ready":
            self._spare.info = message[1]
            self._spare_failures = 0
            log.info("worker %d: standby process (pid %d) warm", self.index, self._spare.process.pid)
        elif message[0] == "failed":
            log.error("worker %d: standby process failed to start: %s", self.index, message[1])

    def _other_exit(self, generation: int) -> bool:
        if self._spare is None or generation != self._spare.generation:
            return False
        spare, self._spare = self._spare, None
        spare.conn.close()
        if self._stopping:
            return True
        if spare.info is None:
            self._spare_failures += 1
        if self._spare_failures >= SPARE_ATTEMPTS:
            log.error(
                "worker %d: %d standby processes in a row died before they were warm; no standby "
                "from now on (see MST_STANDBY_WORKER)",
                self.index,
                SPARE_ATTEMPTS,
            )
            return True
        log.warning(
            "worker %d: standby process (pid %s) exited; starting another", self.index, spare.process.pid
        )

        async def later() -> None:
            await asyncio.sleep(SPARE_PAUSE_S * 2**self._spare_failures)
            if self.state == "ready":  # else it starts once the worker is ready again
                self._ensure_spare()

        self._background(later())
        return True

    def _take_over(self) -> bool:
        """The spare process takes the dead worker's place (warm: it takes requests at once)."""
        spare, self._spare = self._spare, None
        if spare is None:
            return False
        assert self._loop is not None
        self._take(
            spare.process, spare.conn, spare.heartbeat, spare.running, spare.generation, spare.spawned_at
        )
        log.info("worker %d: the standby process (pid %d) takes over", self.index, spare.process.pid)
        if spare.info is not None:
            self._on_ready(spare.info)
        # else its "ready" message comes as this worker's
        return True

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
            os.write(spare.conn.fileno(), framed((STOP, 0)))
        return spare.process

    def _standby(self) -> dict[str, Any] | None:
        if self._spare is None:
            return None
        return {"pid": self._spare.process.pid, "state": "warm" if self._spare.info else "starting"}
