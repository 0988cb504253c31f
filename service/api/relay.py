"""A streaming HTTP relay from a front process to the runtime process's Unix-socket listener.

Every request a front does not answer itself goes through :class:`Relay`:
method, path, query and headers (``Authorization`` included) as they came, the
body streamed as it arrives (uploads can be gigabytes: nothing is buffered
whole), and the answer's status, headers and body streamed back the same way.
Only hop-by-hop headers are left to each connection.

It is written on :mod:`h11` rather than an HTTP client because the runtime may
answer before the body is complete (a declared ``Content-Length`` over the cap
is a 413 at once): the body is sent by one task while the answer is read, and
an early answer is passed on at once. Each relayed request has a connection of
its own (a Unix socket costs no handshake; the relayed routes are not the hot
ones). A runtime that cannot be reached is a 503 problem with ``Retry-After``,
never a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from pathlib import Path

import h11
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from ..errors import RuntimeUnreachableError, error_response

log = logging.getLogger("service.front")

#: headers of one connection, not of the message (RFC 9110 7.6.1); Expect is answered by the front
HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding", b"upgrade"}
)
_REQUEST_ONLY = frozenset({b"expect"})
#: set by the front's own server on every answer (a second copy would be a list of two)
_SERVER_SET = frozenset({b"server", b"date"})
_READ_SIZE = 1 << 20


class Relay:
    """Relays requests to the runtime's HTTP listener on the Unix socket ``path``."""

    def __init__(self, path: Path, connect_timeout: float = 2.0) -> None:
        self.path = path
        self.connect_timeout = connect_timeout

    async def close(self) -> None:
        """Nothing held between requests (a connection per request)."""

    async def _unreachable(self, scope: Scope, receive: Receive, send: Send, why: object) -> None:
        log.warning("relay of %s %s failed: %s", scope["method"], scope["path"], why)
        problem = RuntimeUnreachableError("the service's runtime process does not answer; retry shortly.")
        response = await error_response(Request(scope, receive), problem)
        await response(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            try:
                async with asyncio.timeout(self.connect_timeout):
                    await loop.sock_connect(sock, str(self.path))
            except (OSError, TimeoutError) as exc:
                await self._unreachable(scope, receive, send, exc)
                return
            await self._relay(scope, receive, send, sock)
        finally:
            sock.close()

    async def _relay(self, scope: Scope, receive: Receive, send: Send, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        given = scope["headers"]
        chunked = any(k == b"transfer-encoding" for k, _ in given)
        headers = [(k, v) for k, v in given if k not in HOP_BY_HOP and k not in _REQUEST_ONLY]
        if chunked and not any(k == b"content-length" for k, _ in given):
            headers.append((b"transfer-encoding", b"chunked"))
        headers.append((b"connection", b"close"))
        if not any(k == b"host" for k, _ in headers):
            headers.append((b"host", b"runtime"))
        query = scope.get("query_string", b"")
        target = (scope.get("raw_path") or scope["path"].encode("latin-1")) + (b"?" + query if query else b"")
        conn = h11.Connection(h11.CLIENT)
        try:
            head = conn.send(h11.Request(method=scope["method"], target=target, headers=headers))
        except h11.LocalProtocolError as exc:  # nothing uvicorn accepted should be refused here
            await self._unreachable(scope, receive, send, exc)
            return
        # Plain socket calls, not streams: a stream raises a reset (the runtime closing with body
        # bytes unread, after an early answer) before handing over the answer it holds.
        pump = asyncio.ensure_future(self._pump(conn, head, receive, sock))
        started = False
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await loop.sock_recv(sock, _READ_SIZE))
                    continue
                if isinstance(event, h11.InformationalResponse):
                    continue
                if isinstance(event, h11.Response):
                    started = True
                    await send(
                        {
                            "type": "http.response.start",
                            "status": event.status_code,
                            "headers": [
                                (k, v)
                                for k, v in event.headers
                                if k not in HOP_BY_HOP and k not in _SERVER_SET
                            ],
                        }
                    )
                elif isinstance(event, h11.Data):
                    await send({"type": "http.response.body", "body": bytes(event.data), "more_body": True})
                elif isinstance(event, h11.EndOfMessage):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    return
                else:  # ConnectionClosed before the answer ended
                    raise h11.RemoteProtocolError("the runtime closed the connection mid-answer")
        except (OSError, h11.ProtocolError) as exc:
            if pump.done() and not pump.cancelled() and pump.exception() is None and pump.result():
                return  # the client is gone: nobody to answer
            if not started:
                await self._unreachable(scope, receive, send, exc)
            else:  # the answer is half sent: closing the client's connection is all that is left
                log.warning("relay of %s %s broke off: %s", scope["method"], scope["path"], exc)
        finally:
            pump.cancel()
            with contextlib.suppress(BaseException):
                await pump

    @staticmethod
    async def _pump(conn: h11.Connection, head: bytes, receive: Receive, sock: socket.socket) -> bool:
        """Send the request, its body as it arrives, to the runtime (whose answer may come first);
        True when the client went away before its body ended."""
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(sock, head)
        if conn.our_state is h11.SEND_BODY:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    # the client closed its side mid-body: so does the relay, and the runtime answers
                    # the short body as it would the client itself
                    sock.shutdown(socket.SHUT_WR)
                    return True
                chunk = message.get("body", b"")
                if chunk:
                    await loop.sock_sendall(sock, conn.send(h11.Data(data=chunk)))
                if not message.get("more_body", False):
                    break
            await loop.sock_sendall(sock, conn.send(h11.EndOfMessage()))
        return False
