"""uvicorn's HTTP protocol with a response's head and body sent in one write.

uvicorn writes a response's head when the app starts it and its body when the app sends it: two
``send()`` calls, two TCP segments and two wake-ups of the client for every answer. Here a small
write (a head) is held until the next write on the connection, which sends both at once
(``writelines``: one ``sendmsg`` from Python 3.12), or until the end of the event loop's turn; the
bytes and their order are unchanged. Why: docs/design/architecture.md (an API process's CPU per
request bounds the host's jobs per second).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: a write at most this long is held for the next one (a response's head, a small body)
HELD_BYTES = 16 << 10
#: before Python 3.12 ``writelines`` joins its pieces: a copy, not worth it for a body this large
_JOIN_BYTES = 1 << 62 if sys.version_info >= (3, 12) else 64 << 10


class OneWriteTransport:
    """A connection's transport whose small writes wait for the next one (see the module)."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is None:
            if len(data) <= HELD_BYTES:
                self._held = bytes(data)
                self._loop.call_soon(self.flush)
            else:
                self._transport.write(data)
            return
        self._held = None
        if len(data) <= _JOIN_BYTES:
            self._transport.writelines((held, data))
        else:
            self._transport.write(held)
            self._transport.write(data)

    def writelines(self, pieces: Any) -> None:
        for piece in pieces:
            self.write(piece)

    def flush(self) -> None:
        """Send what is held (at the end of the loop's turn, or before the connection closes)."""
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneWriteProtocol(HttpToolsProtocol):
    """:class:`HttpToolsProtocol` writing through a :class:`OneWriteTransport` (flow control, the
    addresses and the upgrade keep the socket's own transport)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = OneWriteTransport(transport, self.loop)  # type: ignore[assignment]
