"""An API process's connection to one worker: its requests from making to answer, and a worker's death.

Every request gets an id (ascending over the link's life, whichever worker process answers) and
the moment it was written (its stamp, :mod:`service.runtime.worker.protocol`), is written to the
worker's socket at once (without blocking the event loop: what the socket does not take waits
in the outbox), and is pending until its reply settles its future; a request whose handler works
on after its reply (a result file) then waits for its STORED note.

**A worker's death.** The connection closes. The board says which of this process's requests
the dead process was running (:meth:`~service.runtime.board.Board.running`). Each unanswered
request is then:

* **lost** (:class:`~service.errors.WorkerLostError`) when it ran alone: it may be what killed
  the worker, and must not kill the next one;
* kept and re-sent **suspect** when it ran with others (coalesced jobs, batched one-shots): which
  one killed the worker is unknown, so each runs alone next (the worker gives it a run of its
  own), and is lost if it was running when a second worker died;
* kept and re-sent, in the order it was made, when it had not started.

The link connects again as soon as the next process listens (its standby at once, or a new one),
sends what it kept (with the requests made meanwhile, which wait with them up to
``MST_WORKER_START_TIMEOUT_S``, then fail 503), each at its first stamp, and says it has
(``SYNCED``): the new process runs nothing before every API process has, so nothing sent later
overtakes what was sent before the death.

Design: docs/design/worker-protocol.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from ...errors import ServiceUnavailableError, WorkerLostError
from ..board import Board
from ..worker.protocol import HELLO, RESENT, STORED, SUSPECT, SYNCED, WELCOME, framed, unframed, widen

log = logging.getLogger("service.runtime.links")

#: bytes read from the socket at once
_READ_SIZE = 1 << 20
#: seconds between two tries to reach a worker that is not listening yet
_RECONNECT_S = 0.02
#: seconds a connected worker process has to welcome the link
_WELCOME_S = 2.0


@dataclass(eq=False)
class Pending:
    """A request of this process to the worker, from its making until its reply (or its loss)."""

    op: str
    args: tuple[Any, ...]
    future: asyncio.Future[Any]
    stamp: float
    #: the STORED note that follows its reply (None: none is awaited)
    note: asyncio.Future[None] | None = None
    #: it ran with others when a worker died: it runs alone from now on
    suspect: bool = False
    #: it is sent again, to the process that replaced the one it went to
    resent: bool = False
    req_id: int = 0
    made_at: float = field(default_factory=time.monotonic)

    def message(self) -> tuple[Any, ...]:
        flags = (RESENT if self.resent else 0) | (SUSPECT if self.suspect else 0)
        return (self.op, self.req_id, self.stamp, flags, *self.args)


def settle(fut: asyncio.Future[Any] | None, result: Any, error: BaseException | None) -> None:
    if fut is None or fut.done():
        return
    if error is None:
        fut.set_result(result)
    else:
        fut.set_exception(error)


def consume(fut: asyncio.Future[Any]) -> None:
    """Mark a future's error as seen (no 'exception was never retrieved' warning)."""
    if not fut.cancelled():
        fut.exception()


class WorkerLink:
    """This API process's connection to worker ``index`` (see the module's docstring)."""

    def __init__(self, index: int, path: str, board: Board, slot: int, start_timeout_s: float) -> None:
        self.index = index
        self._path = path
        self._board = board
        self._slot = slot
        self._start_timeout_s = start_timeout_s
        self._ids = itertools.count(1)
        self._sock: socket.socket | None = None
        self._inbox = bytearray()
        self._outbox = bytearray()
        self._writing = False
        self._drained: list[asyncio.Future[None]] = []
        #: requests written (or being written) and not answered, by id, in the order they were made
        self.pending: dict[int, Pending] = {}
        #: notes awaited for requests answered already, by id
        self.notes: dict[int, asyncio.Future[None]] = {}
        #: requests waiting for a connection (made while there was none, or kept at a death)
        self.held: list[Pending] = []
        self._connector: asyncio.Task[None] | None = None
        self._closing = False
        self.lost = 0
        self.resent = 0

    # -- requests -----------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def send(
        self, op: str, *args: Any, note: bool = False, stamp: float | None = None
    ) -> tuple[asyncio.Future[Any], asyncio.Future[None] | None]:
        """Make a request and write it (or hold it until the worker is reached); its reply's future,
        and with ``note`` the future of the STORED note that follows a successful reply. ``stamp``:
        its place in the worker's queue (``time.monotonic()`` now, by default)."""
        loop = asyncio.get_running_loop()
        request = Pending(op, args, loop.create_future(), time.monotonic() if stamp is None else stamp)
        if note:
            request.note = loop.create_future()
            request.note.add_done_callback(consume)
        if self._sock is None:
            self.held.append(request)
            self._connect()
        else:
            self._post(request)
        self._count()
        return request.future, request.note

    def _count(self) -> None:
        """Say on the board how many requests of this process the worker has not answered."""
        self._board.outstanding(self.index, self._slot, len(self.pending) + len(self.held))

    async def call(self, op: str, *args: Any) -> Any:
        """Send a request and await its answer."""
        future, _ = self.send(op, *args)
        return await future

    async def written(self) -> None:
        """Wait until every request made so far is in the worker's socket (or held for the next
        worker: then the store, not the socket, keeps a job's place)."""
        if not self._outbox or self._sock is None:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._drained.append(done)
        await done

    def _post(self, request: Pending) -> None:
        request.req_id = next(self._ids)
        self.pending[request.req_id] = request
        self._outbox += framed(request.message())
        self._flush()

    def _flush(self) -> None:
        sock = self._sock
        if sock is None:
            return
        while self._outbox:
            try:
                sent = sock.send(self._outbox)
            except BlockingIOError:
                if not self._writing:
                    asyncio.get_running_loop().add_writer(sock.fileno(), self._flush)
                    self._writing = True
                return
            except OSError:
                return  # the worker is gone: its reader says so
            del self._outbox[:sent]
        if self._writing:
            asyncio.get_running_loop().remove_writer(sock.fileno())
            self._writing = False
        for done in self._drained:
            settle(done, None, None)
        self._drained.clear()

    # -- replies ------------------------------------------------------------------------------

    def _readable(self) -> None:
        sock = self._sock
        assert sock is not None
        gone = False
        while True:
            try:
                chunk = sock.recv(_READ_SIZE)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                chunk = b""
            if not chunk:
                gone = True
                break
            self._inbox += chunk
            if len(chunk) < _READ_SIZE:
                break
        for message in unframed(self._inbox):
            if isinstance(message, BaseException):
                log.error("worker %d sent a message that cannot be read: %r", self.index, message)
                continue
            self._on_message(message)
        if gone:
            self._lost_worker()

    def _on_message(self, message: tuple[Any, ...]) -> None:
        if message[0] == STORED:
            _, req_id, error = message
            settle(self.notes.pop(req_id, None), None, error)
            return
        req_id, ok, payload = message
        request = self.pending.pop(req_id, None)
        if request is None:
            return
        if ok and request.note is not None:
            self.notes[req_id] = request.note
        elif request.note is not None:
            settle(request.note, None, payload if isinstance(payload, BaseException) else None)
        settle(request.future, payload if ok else None, None if ok else payload)
        self._count()

    # -- the connection -----------------------------------------------------------------------

    def _connect(self) -> None:
        if self._sock is None and (self._connector is None or self._connector.done()) and not self._closing:
            self._connector = asyncio.ensure_future(self._connecting())

    async def _connecting(self) -> None:
        deadline = time.monotonic() + self._start_timeout_s
        while not self._closing:
            sock = await self._greeted()
            if sock is None:
                if time.monotonic() > deadline:
                    self._expire_held()
                    deadline = time.monotonic() + self._start_timeout_s
                await asyncio.sleep(_RECONNECT_S)
                continue
            self._sock = sock
            self._outbox.clear()
            asyncio.get_running_loop().add_reader(sock.fileno(), self._readable)
            self._send_held()
            return

    async def _greeted(self) -> socket.socket | None:
        """A connection the worker process has welcomed, or None. A connection the kernel took
        into the listening socket of a process that is dying (or stopped) is never welcomed: the
        link waits for the next process rather than take that one's end for a second death."""
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self._path)
            sock.setblocking(False)
            widen(sock)
            await loop.sock_sendall(sock, framed((HELLO, self._slot)))
            data = await asyncio.wait_for(loop.sock_recv(sock, _READ_SIZE), _WELCOME_S)
        except (OSError, TimeoutError):
            sock.close()
            return None
        self._inbox = bytearray(data)
        messages = unframed(self._inbox)
        if not messages or messages[0] != (WELCOME,):
            sock.close()
            return None
        for message in messages[1:]:  # nothing else comes first; kept for the reader all the same
            self._on_message(message)
        return sock

    def _send_held(self) -> None:
        """Write the requests held for this connection, in order (a suspect runs alone: the worker
        sees to that); then say so, so that a new worker process may begin (``SYNCED``)."""
        held, self.held = self.held, []
        for request in held:
            if not request.future.done():  # else its caller gave up
                self._post(request)
        self._outbox += framed((SYNCED, 0, time.monotonic(), 0))
        self._flush()

    def _expire_held(self) -> None:
        """No worker process listened within MST_WORKER_START_TIMEOUT_S: the held requests fail."""
        error = ServiceUnavailableError(
            f"worker {self.index} is not running (restarting: see /readyz); retry shortly."
        )
        for request in self.held:
            settle(request.future, None, error)
            settle(request.note, None, error)
        self.held.clear()
        self._count()

    def _drop_transport(self) -> None:
        """Let go of the dead worker's connection (and what waited to be written to it)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            loop = asyncio.get_running_loop()
            loop.remove_reader(sock.fileno())
            if self._writing:
                loop.remove_writer(sock.fileno())
            sock.close()
        self._writing = False
        self._outbox.clear()
        for done in self._drained:
            settle(done, None, None)
        self._drained.clear()

    def _running_ids(self) -> set[int]:
        """The ids of this process's requests the dead worker was running (the board's stamp)."""
        return set(self._board.running(self.index, self._slot))

    def _lost_worker(self) -> None:
        """The worker's process is gone: sort out the unanswered requests (see the module's docstring)."""
        running = self._running_ids()
        self._drop_transport()
        lost = WorkerLostError(
            f"worker {self.index} was lost while handling the request; it is being restarted, submit again."
        )
        for note in self.notes.values():  # their files may be missing: a request for one computes it again
            settle(note, None, lost)
        self.notes.clear()
        ordered = sorted(self.pending.values(), key=lambda r: r.req_id)
        self.pending.clear()
        ran = [r for r in ordered if r.req_id in running]
        kept: list[Pending] = []
        lost_now = 0
        for request in ordered:
            if request in ran and (len(ran) == 1 or request.suspect):
                settle(request.future, None, lost)
                settle(request.note, None, lost)
                lost_now += 1
            else:
                request.suspect = request.suspect or request in ran
                request.resent = True
                kept.append(request)
        self.held[:0] = kept
        self.lost += lost_now
        self.resent += len(kept)
        self._board.count(self.index, self._slot, "lost", lost_now)
        self._board.count(self.index, self._slot, "resent", len(kept))
        self._count()
        if self._closing:
            self._expire_held()
            return
        if lost_now or kept:
            log.warning(
                "worker %d died: %d request(s) lost, %d to re-send (%s)",
                self.index,
                lost_now,
                len(kept),
                [r.op for r in kept],
            )
        self._connect()

    def open(self) -> None:
        """Reach the worker now (the first requests then find the connection made)."""
        self._connect()

    async def close(self) -> None:
        self._closing = True
        if self._connector is not None:
            self._connector.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._connector
        with contextlib.suppress(Exception):
            self._drop_transport()
        error = ServiceUnavailableError("the service is shutting down.")
        for request in [*self.pending.values(), *self.held]:
            request.future.add_done_callback(consume)  # a caller that no longer waits for it
            settle(request.future, None, error)
            settle(request.note, None, error)
        for note in self.notes.values():
            settle(note, None, error)
        self.pending.clear()
        self.held.clear()
        self.notes.clear()
