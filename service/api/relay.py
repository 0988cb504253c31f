"""A streaming HTTP relay from a front process to the runtime process's Unix-socket listener.

Every request a front does not answer itself goes through :class:`Relay`:
method, path, query and headers (``Authorization`` included) as they came, the
body streamed as it arrives (uploads can be gigabytes: nothing is buffered
whole), and the answer's status, headers and body streamed back the same way.
Only hop-by-hop headers are left to each connection. A runtime that cannot
be reached is a 503 problem with ``Retry-After``, never a hang.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from starlette.requests import ClientDisconnect, Request
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


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


class Relay:
    """Relays requests to the runtime's HTTP listener on the Unix socket ``path``."""

    def __init__(self, path: Path, connect_timeout: float = 2.0) -> None:
        self.client = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=str(path), retries=1),
            timeout=httpx.Timeout(None, connect=connect_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )

    async def close(self) -> None:
        await self.client.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(k, v) for k, v in scope["headers"] if k not in HOP_BY_HOP and k not in _REQUEST_ONLY]
        has_body = any(k in (b"content-length", b"transfer-encoding") for k, _ in scope["headers"])
        query = scope.get("query_string", b"")
        target = scope.get("raw_path") or scope["path"].encode("latin-1")
        url = httpx.URL(scheme="http", host="runtime", raw_path=target + (b"?" + query if query else b""))
        request = self.client.build_request(
            scope["method"], url, headers=headers, content=_body(receive) if has_body else None
        )
        try:
            upstream = await self.client.send(request, stream=True)
        except ClientDisconnect:
            return  # the client left mid-body: nobody to answer
        except httpx.TransportError as exc:
            log.warning("relay of %s %s failed: %s", scope["method"], scope["path"], exc)
            problem = RuntimeUnreachableError("the service's runtime process does not answer; retry shortly.")
            response = await error_response(Request(scope, receive), problem)
            await response(scope, receive, send)
            return
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": upstream.status_code,
                    "headers": [
                        (k.lower(), v)
                        for k, v in upstream.headers.raw
                        if k.lower() not in HOP_BY_HOP and k.lower() not in _SERVER_SET
                    ],
                }
            )
            async for chunk in upstream.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except httpx.HTTPError as exc:  # the runtime went away mid-answer: the connection is closed
            log.warning("relay of %s %s broke off: %s", scope["method"], scope["path"], exc)
        finally:
            with contextlib.suppress(httpx.HTTPError):
                await upstream.aclose()
