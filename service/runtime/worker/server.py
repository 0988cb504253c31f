"""A worker's socket: the connections of the API processes, read together, written one message at a time.

The worker listens on a Unix socket in the service's private run folder (mode 0700: only the
service's own user reaches it). :meth:`Server.poll` accepts new connections and reads whatever
every connection has waiting, and hands back the whole requests it read, each an
:class:`Incoming`; the loop orders them by their senders' stamps (see :mod:`.protocol`).
Replies and notes are written whole under a connection's lock (the loop and the result writer's
thread both write), blocking: an API process reads its connections all the time.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
from collections.abc import Iterable
from typing import Any

from .protocol import HELLO, WELCOME, framed, unframed, widen

#: bytes read from a connection at once
_READ_SIZE = 1 << 20


class Connection:
    """One API process's connection to this worker."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        #: the API process's slot, from its HELLO (-1 until then)
        self.slot = -1
        self.inbox = bytearray()
        self.closed = False
        self._lock = threading.Lock()

    def send(self, message: tuple[Any, ...]) -> None:
        self.send_all([message])

    def send_all(self, messages: Iterable[tuple[Any, ...]]) -> None:
        """Write messages in one call; a connection that is gone is marked closed (its API process
        died: nobody waits for these answers)."""
        data = b"".join(framed(m) for m in messages)
        with self._lock:
            if self.closed:
                return
            try:
                self.sock.sendall(data)
            except OSError:
                self.closed = True


class Incoming:
    """A request read from a connection (or made by the worker itself: ``conn`` None)."""

    __slots__ = ("also", "args", "conn", "flags", "op", "req_id", "seq", "stamp")

    def __init__(
        self,
        conn: Connection | None,
        op: str,
        req_id: int,
        stamp: float,
        args: list[Any],
        seq: int,
        flags: int = 0,
    ):
        self.conn = conn
        self.op = op
        self.req_id = req_id
        self.stamp = stamp
        self.args = args
        self.seq = seq
        self.flags = flags
        #: other requests answered with this one's answer: (connection, request id)
        self.also: list[tuple[Connection, int]] = []

    def requesters(self) -> list[tuple[Connection, int]]:
        """Where this request's answer goes (the connections still open)."""
        first = [] if self.conn is None else [(self.conn, self.req_id)]
        return [(c, r) for c, r in first + self.also if not c.closed]


class Server:
    """The listening socket and the open connections of one worker."""

    def __init__(self, path: str) -> None:
        self.path = path
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # the socket of the process this one replaces
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(64)
        self._listener.setblocking(False)
        self.connections: dict[int, Connection] = {}
        self._seq = 0
        self._buffer = bytearray(_READ_SIZE)
        self._view = memoryview(self._buffer)

    def close(self) -> None:
        for conn in self.connections.values():
            with contextlib.suppress(OSError):
                conn.sock.close()
        self._listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def fds(self) -> list[int]:
        return [self._listener.fileno(), *self.connections]

    def poll(
        self, timeout: float | None, extra: Iterable[int] = ()
    ) -> tuple[list[Incoming], list[Connection], set[int]]:
        """Wait up to ``timeout`` seconds (None: until something comes) for connections or requests;
        (the requests read, the connections that closed, which of ``extra`` are readable)."""
        extra = list(extra)
        ready = set(select.select([*self.fds(), *extra], [], [], timeout)[0])
        if self._listener.fileno() in ready:
            # a new connection's first requests may be waiting already: read in this round too, so
            # that everything written before the round began is ordered together
            ready.update(self._accept())
        incoming: list[Incoming] = []
        closed: list[Connection] = []
        for fd, conn in list(self.connections.items()):
            if fd in ready and not self._read(conn, incoming):
                closed.append(conn)
                del self.connections[fd]
                with contextlib.suppress(OSError):
                    conn.sock.close()
        return incoming, closed, ready.intersection(extra)

    def _accept(self) -> list[int]:
        accepted: list[int] = []
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return accepted
            sock.setblocking(True)
            widen(sock)
            self.connections[sock.fileno()] = Connection(sock)
            accepted.append(sock.fileno())

    def _read(self, conn: Connection, out: list[Incoming]) -> bool:
        """Read what ``conn`` has waiting into ``out``; False when it has closed."""
        try:
            count = conn.sock.recv_into(self._view, _READ_SIZE, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            count = 0
        if not count:
            conn.closed = True
            return False
        conn.inbox += self._view[:count]
        for message in unframed(conn.inbox):
            if not isinstance(message, tuple) or not message:
                continue  # nothing a well-behaved API process sends
            if message[0] == HELLO and len(message) == 2:
                conn.slot = int(message[1])
                conn.send((WELCOME,))
                continue
            if len(message) < 4:
                continue
            op, req_id, stamp, flags, *args = message
            self._seq += 1
            out.append(Incoming(conn, op, int(req_id), float(stamp), args, self._seq, int(flags)))
        return True

    def made(self, op: str, args: list[Any], stamp: float = 0.0) -> Incoming:
        """A request of the worker's own (a job taken back from the store, at its place ``stamp``)."""
        self._seq += 1
        return Incoming(None, op, 0, stamp, args, self._seq)
