"""One keep-alive connection that reads a binary answer straight into its buffer.

httpx parses every body through h11, which copies each received byte about five times (its
receive buffer is appended to, sliced twice and copied into ``bytes``; httpcore copies once
more), which a single job's latency shows (docs/performance.md). A
:class:`DirectConnection` sends a request without a body (a job's submission with ``?wait=``,
a result's ``GET``) over :mod:`http.client` and reads the answer's body with ``readinto``, one
copy into one buffer, then keeps the connection for the next request.

It is built from the :class:`httpx.Client` beside it (base URL, headers, timeouts), so a request
says the same either way; it serves plain ``http://`` without a proxy only (:meth:`serves`), the
rest goes through httpx. Failures are raised as httpx's exceptions, so callers handle one kind.
"""

from __future__ import annotations

import http.client
import select
import socket
import threading
import urllib.request
from typing import Any

import httpx

from . import progress as bars
from .progress import ProgressBar
from .transfer import receive_buffer

#: bytes per ``readinto`` while a progress bar is shown (otherwise one call reads the whole body)
_BAR_PIECE = 1 << 20


class DirectConnection:
    """A keep-alive ``http.client`` connection to an httpx client's server (see the module)."""

    def __init__(self, client: httpx.Client) -> None:
        self._http = client
        url = client.base_url
        self._enabled = url.scheme == "http" and not _proxied(url.host) and bool(url.host)
        self._host, self._port = url.host, url.port or 80
        self._where = f"{self._host}:{self._port}"
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()
        #: connections opened so far (one while the server keeps it)
        self.opened = 0

    def close(self) -> None:
        with self._lock:
            self._drop()

    def serves(self, kwargs: dict[str, Any]) -> bool:
        """Whether a request with these httpx arguments can go this way: no body to send, plain
        HTTP without a proxy, and no other thread using the connection now (then httpx serves it)."""
        return self._enabled and set(kwargs) <= {"params", "headers"} and not self._lock.locked()

    def request(
        self, method: str, url: str, *, progress: bool = False, **kwargs: Any
    ) -> tuple[httpx.Response, bytes | memoryview]:
        """Send a bodyless request (``kwargs``: httpx's ``params`` and ``headers``); (the response,
        its body). A successful body of known length lands in one :func:`receive_buffer`; an
        error's comes with the response too (``response.json()`` reads it). ``progress``: a bar on
        stderr while a body of :data:`service.client.progress.MIN_BYTES` or more comes in."""
        request = self._http.build_request(method, url, **kwargs)
        with self._lock:
            try:
                return self._exchange(request, progress)
            except BaseException:
                self._drop()  # what it holds is unknown now: the next request starts afresh
                raise

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self) -> http.client.HTTPConnection:
        """The kept connection, unless the server closed it while idle (its socket then reads
        as ready: an end of file); else a new one."""
        conn = self._conn
        if conn is not None and conn.sock is not None and not select.select([conn.sock], [], [], 0)[0]:
            return conn
        self._drop()
        timeout = self._http.timeout
        conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout.connect)
        try:
            conn.connect()
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {self._where} timed out") from None
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {self._where}: {exc}") from None
        assert conn.sock is not None
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sock.settimeout(timeout.read)
        self._conn = conn
        self.opened += 1
        return conn

    def _exchange(self, request: httpx.Request, progress: bool) -> tuple[httpx.Response, bytes | memoryview]:
        conn = self._connection()
        try:
            conn.putrequest(request.method, request.url.raw_path.decode("ascii"), skip_host=True,
                            skip_accept_encoding=True)  # fmt: skip
            for name, value in request.headers.raw:
                if name.lower() != b"accept-encoding":  # the body as sent: this reader decodes nothing
                    conn.putheader(name, value)
            conn.endheaders()
            answer = conn.getresponse()
            headers = answer.getheaders()
            size = answer.length
            if answer.status >= 400 or not size or answer.chunked:  # an error's, or one of unknown size
                body: bytes | memoryview = answer.read()
            else:
                bar = ProgressBar("download", size) if progress and size >= bars.MIN_BYTES else None
                body = _read_into(answer, receive_buffer(size), bar)
        except TimeoutError:
            raise httpx.ReadTimeout(f"no answer from {self._where} in time", request=request) from None
        except (http.client.HTTPException, ConnectionError) as exc:
            message = f"{self._where} broke off its answer: {exc!r}"
            raise httpx.RemoteProtocolError(message, request=request) from None
        except OSError as exc:
            raise httpx.ReadError(f"reading the answer failed: {exc}", request=request) from None
        if answer.will_close:
            self._drop()
        content = body if isinstance(body, bytes) else None  # a large body stays where it landed
        return httpx.Response(answer.status, headers=headers, content=content, request=request), body


def _read_into(answer: http.client.HTTPResponse, body: memoryview, bar: ProgressBar | None) -> memoryview:
    """Read an answer's whole body into ``body`` (its exact size); short: the server closed early."""
    filled, size = 0, len(body)
    try:
        while filled < size:
            stop = size if bar is None else min(size, filled + _BAR_PIECE)
            got = answer.readinto(body[filled:stop])
            if not got:
                raise http.client.IncompleteRead(bytes(0), size - filled)
            filled += got
            if bar is not None:
                bar.update(got)
    finally:
        if bar is not None:
            bar.close()
    return body


def _proxied(host: str) -> bool:
    """Whether httpx would send a request to ``host`` through a proxy of the environment."""
    proxies = urllib.request.getproxies_environment()
    if not (proxies.get("http") or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(host)  # NO_PROXY's hosts (the environment's, on Linux)
