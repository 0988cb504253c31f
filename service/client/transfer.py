"""Large bodies over HTTP, fast: sent in views, received in large reads into one buffer.

httpx is right for everything but the speed of bodies of tens or hundreds of megabytes: it
copies a ``bytes`` body quadratically when sending it, reads 64 KiB per socket read and copies
every received byte several times. These helpers, used by :class:`service.client.Client`, send a
body in 4 MiB views and receive one straight into a buffer (off the socket, where the response
allows it), with the same answers.
"""

from __future__ import annotations

import mmap
import socket
import ssl
from collections.abc import Iterator
from typing import Any, cast

import httpx

from . import progress as bars
from .progress import ProgressBar

OCTET = "application/octet-stream"


#: pieces a binary body is sent in. httpx sends one ``bytes`` body with ``sock.send`` and
#: ``buffer = buffer[n:]`` after each partial send, a copy of the rest every time: quadratic.
#: Views of 4 MiB go as fast as the socket.
_PIECE = 4 << 20


def body_pieces(body: bytes, progress: ProgressBar | None = None) -> Iterator[bytes]:
    view = memoryview(body)
    try:
        for start in range(0, len(view), _PIECE):
            piece = view[start : start + _PIECE]
            yield cast(bytes, piece)  # a view: httpx sends any bytes-like piece
            if progress is not None:
                progress.update(len(piece))
    finally:
        if progress is not None:
            progress.close()


#: bytes per socket read of httpx's connections (its default, 64 KiB, is slow for large bodies)
_READ_PIECE = 1 << 20

#: bodies from this size on are received into memory the kernel may back with 2 MiB pages
_HUGE_BODY = 8 << 20


def _large_socket_reads() -> None:
    """Let httpx's HTTP/1.1 connections read up to :data:`_READ_PIECE` per socket read.

    httpcore reads 64 KiB at a time (``HTTP11Connection.READ_NUM_BYTES``, a class attribute), and
    each read goes through the HTTP parser and the stream's generators, so fewer, larger reads
    bring a large body in faster (a read returns what has arrived, so small bodies are
    unaffected). The whole process's httpx connections read this way afterwards.
    """
    try:
        from httpcore._sync.http11 import HTTP11Connection
    except ImportError:  # another httpcore layout: its own default
        return
    if getattr(HTTP11Connection, "READ_NUM_BYTES", _READ_PIECE) < _READ_PIECE:
        HTTP11Connection.READ_NUM_BYTES = _READ_PIECE


def receive_buffer(size: int) -> memoryview:
    """A writable buffer for a response body of ``size`` bytes.

    Fresh memory is faulted in one 4 KiB page at a time as the body lands in it, which caps a
    large download well below what the service sends. A large buffer is therefore an anonymous
    map advised to use transparent huge pages (Linux), as fast as a buffer used before
    (docs/performance.md).
    """
    if size >= _HUGE_BODY and hasattr(mmap, "MADV_HUGEPAGE"):
        region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        region.madvise(mmap.MADV_HUGEPAGE)
        return memoryview(region)
    return memoryview(bytearray(size))


def read_response(
    http: httpx.Client, method: str, url: str, *, progress: bool = False, **kwargs: Any
) -> tuple[httpx.Response, bytes | memoryview]:
    """Send a request and read its body in large pieces into one buffer: (the response, the body).

    A large plain-HTTP body is read straight off the connection's socket into that buffer once
    the parser has handed over what it already holds (:func:`_socket_of`): httpx's parser copies
    every byte four times on the way, slower than the service sends. The connection is then
    closed, not reused (its parser never saw the rest of the body).

    ``progress``: a bar on stderr while a body of :data:`service.client.progress.MIN_BYTES` or more comes in.
    """
    _large_socket_reads()
    with http.stream(method, url, **kwargs) as response:
        size = int(response.headers.get("content-length", "0") or 0)
        if response.status_code >= 400 or size <= 0:
            return response, response.read()
        body = receive_buffer(size)
        filled = 0
        bar = ProgressBar("download", size) if progress and size >= bars.MIN_BYTES else None
        for piece in response.iter_raw():
            body[filled : filled + len(piece)] = piece
            filled += len(piece)
            if bar is not None:
                bar.update(len(piece))
            sock = _socket_of(response) if filled < size and size >= _DIRECT_BODY else None
            if sock is not None:
                filled = _receive_into(sock, body, filled, http.timeout.read, bar)
                break
        if bar is not None:
            bar.close()
        if filled != size:
            raise httpx.RemoteProtocolError(f"the body has {filled} bytes, Content-Length said {size}")
        return response, body


#: bodies from this size on are read straight off the socket (:func:`read_response`)
_DIRECT_BODY = 4 << 20

#: bytes per ``recv_into``: larger reads were slower on loopback (the copy leaves the cache)
_SOCKET_PIECE = 1 << 16


def _socket_of(response: httpx.Response) -> socket.socket | None:
    """The plain TCP socket under an HTTP/1.1 response whose body comes as it is sent (no TLS,
    no transfer or content coding), or None (then httpx reads the body)."""
    headers = response.headers
    if (
        response.url.scheme != "http"
        or response.http_version != "HTTP/1.1"
        or headers.get("content-encoding", "identity").lower() != "identity"
        or "transfer-encoding" in headers
    ):
        return None
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if not isinstance(sock, socket.socket) or isinstance(sock, ssl.SSLSocket):
        return None
    return sock


def _receive_into(
    sock: socket.socket, body: memoryview, filled: int, timeout: float | None, bar: ProgressBar | None
) -> int:
    """Fill ``body[filled:]`` from ``sock``; the number of bytes then in ``body`` (short: the peer closed)."""
    sock.settimeout(timeout)
    size = len(body)
    while filled < size:
        try:
            got = sock.recv_into(body[filled:], min(_SOCKET_PIECE, size - filled))
        except TimeoutError:
            raise httpx.ReadTimeout(f"no body bytes for {timeout} s") from None
        except OSError as exc:
            raise httpx.ReadError(f"reading the body failed: {exc}") from None
        if not got:
            break
        filled += got
        if bar is not None:
            bar.update(got)
    return filled


def binary_headers(body: bytes, accept: str | None = None) -> dict[str, str]:
    """Content-Length given, so the pieces go as one plain body (not chunked transfer encoding)."""
    headers = {"content-type": OCTET, "content-length": str(len(body))}
    if accept is not None:
        headers["accept"] = accept
    return headers
