"""A small RPC between the front processes and the runtime process, over a Unix socket.

Frames are a 4-byte big-endian length and a pickle (both ends are this
service, never a client: the socket lives in the data dir, mode 0600).
A call is ``(call_id, method, args)``; its answer is ``(call_id, ok, value)``,
where ``value`` is the exception raised when ``ok`` is false. Call ids let
many calls be in flight on one connection; the server runs each in its own
task and answers in the order they finish.

A lost or refused connection fails the calls it carried with
:class:`~service.errors.RuntimeUnreachableError` (503, Retry-After): a front
never hangs on a runtime that is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import pickle
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..errors import RuntimeUnreachableError

log = logging.getLogger("service.rpc")

_LENGTH = struct.Struct(">I")
#: frames above this are refused (a call or answer is a few kB: ids, headers, a JSON job record)
MAX_FRAME = 64 << 20

Handler = Callable[..., Awaitable[Any]]


async def read_frame(reader: asyncio.StreamReader) -> Any:
    """The next object on ``reader`` (IncompleteReadError at the end of the stream)."""
    (size,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    if size > MAX_FRAME:
        raise ConnectionError(f"an RPC frame of {size} bytes is larger than {MAX_FRAME}")
    return pickle.loads(await reader.readexactly(size))


def frame(value: Any) -> bytes:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(data)) + data


def _portable(exc: BaseException) -> BaseException:
    """``exc`` when it survives pickling (the service's and the engine's errors do), else a RuntimeError."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


class RpcServer:
    """Serves the calls of ``handlers`` (method name to coroutine function) on a Unix socket."""

    def __init__(self, path: Path, handlers: dict[str, Handler]) -> None:
        self.path = path
        self.handlers = handlers
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)
        old = os.umask(0o177)  # the socket is born 0600: no window where another user could connect
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=str(self.path))
        finally:
            os.umask(old)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            self._server = None
        self.path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lock = asyncio.Lock()
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                try:
                    call_id, method, args = await read_frame(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                call = asyncio.ensure_future(self._answer(writer, lock, call_id, method, args))
                self._tasks.add(call)
                call.add_done_callback(self._tasks.discard)
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _answer(
        self,
        writer: asyncio.StreamWriter,
        lock: asyncio.Lock,
        call_id: int,
        method: str,
        args: tuple[Any, ...],
    ) -> None:
        try:
            value, ok = await self.handlers[method](*args), True
        except Exception as exc:
            value, ok = _portable(exc), False
        try:
            data = frame((call_id, ok, value))
        except Exception as exc:  # an unpicklable answer: a bug of a handler, reported as such
            data = frame((call_id, False, RuntimeError(f"unpicklable answer to {method}: {exc}")))
        async with lock:
            with contextlib.suppress(ConnectionError):
                writer.write(data)
                await writer.drain()


class RpcClient:
    """Calls into an :class:`RpcServer` over one connection, made (again) on demand."""

    def __init__(self, path: Path, connect_timeout: float = 2.0) -> None:
        self.path = path
        self.connect_timeout = connect_timeout
        self._ids = itertools.count()
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._connecting: asyncio.Lock | None = None

    async def _connection(self) -> asyncio.StreamWriter:
        if self._writer is not None:
            return self._writer
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._writer is None:
                try:
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_unix_connection(str(self.path)), self.connect_timeout
                    )
                except (TimeoutError, OSError) as exc:
                    raise RuntimeUnreachableError(
                        "the service's runtime process does not answer "
                        f"({type(exc).__name__}); retry shortly."
                    ) from None
                self._writer = writer
                self._reader_task = asyncio.ensure_future(self._read(reader, writer))
            return self._writer

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                call_id, ok, value = await read_frame(reader)
                future = self._pending.pop(call_id, None)
                if future is None or future.done():
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)
        except (asyncio.IncompleteReadError, ConnectionError, OSError, pickle.UnpicklingError):
            pass
        finally:
            if self._writer is writer:
                self._writer = None
            writer.close()
            self._fail_pending("the connection to the service's runtime process was lost; retry shortly.")

    def _fail_pending(self, why: str) -> None:
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(RuntimeUnreachableError(why))

    async def call(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        """The value ``method(*args)`` returns in the runtime; what it raises is raised here."""
        writer = await self._connection()
        call_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        try:
            writer.write(frame((call_id, method, args)))
        except (ConnectionError, RuntimeError):
            self._pending.pop(call_id, None)
            raise RuntimeUnreachableError(
                "the connection to the service's runtime process was lost; retry shortly."
            ) from None
        deadline = asyncio.timeout(timeout)  # no task per call, unlike wait_for
        try:
            async with deadline:
                return await future
        except TimeoutError:
            if not deadline.expired():
                raise  # a TimeoutError the call itself raised in the runtime
            raise RuntimeUnreachableError(
                f"the service's runtime process did not answer {method} within {timeout:g} s; retry shortly."
            ) from None
        finally:
            self._pending.pop(call_id, None)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(BaseException):
                await self._reader_task
        self._fail_pending("the front is stopping.")
