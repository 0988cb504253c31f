"""Files of the spool: uploads being received, removals off the event loop.

A body is written into ``spool/tmp`` (:class:`SpoolFile`), handed on as an :class:`Upload`,
then published into place by the :class:`~service.storage.store.Store` or removed.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

#: removals of files in threads, in flight (the references keep the tasks alive)
_removals: set[asyncio.Future[None]] = set()


def remove_files(*paths: Path) -> None:
    """Remove files (those already gone too). Blocking: from the event loop, run it in a thread
    (``asyncio.to_thread``) or use :func:`remove_later`; unlinking a large file, or a dozen small
    ones a second, on a disk holds the caller for milliseconds each."""
    for path in paths:
        path.unlink(missing_ok=True)


def remove_later(*paths: Path) -> None:
    """:func:`remove_files` in a thread, without waiting for it (without a running event loop,
    a synchronous caller: at once)."""
    try:
        removal = asyncio.ensure_future(asyncio.to_thread(remove_files, *paths))
    except RuntimeError:  # no running event loop
        remove_files(*paths)
        return
    _removals.add(removal)
    removal.add_done_callback(_removals.discard)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class TmpPaths(Protocol):
    """Makes paths in the spool's tmp folder (a :class:`Store`)."""

    def tmp_path(self, suffix: str = ".part") -> Path: ...


#: with write-behind, the kernel is asked to start writing a body back every this many bytes
WRITE_BEHIND_BYTES = 16 << 20
_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start write-out of the range's dirty pages, do not wait


@functools.cache
def start_write_out() -> Callable[[int, int, int], int] | None:
    """Linux's ``sync_file_range(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE)``; None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    call.restype = ctypes.c_int
    return lambda fd, offset, nbytes: int(call(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE))


class SpoolFile:
    """A file being written into the spool's tmp folder: write, then :meth:`finish` (fsync).

    Used as a context manager, the temporary file is removed unless it was
    handed on with :meth:`detach` or published.

    ``write_behind``: a body that will be fsynced is handed to the disk while it arrives (every
    :data:`WRITE_BEHIND_BYTES`, without waiting; Linux), so that the fsync after its last byte
    waits for the tail only, not for the whole body. Durability still comes from :meth:`sync`
    alone.
    """

    def __init__(self, store: TmpPaths, suffix: str = ".part", *, write_behind: bool = False) -> None:
        self.path = store.tmp_path(suffix)
        self._file: BinaryIO = open(self.path, "xb")  # noqa: SIM115 - closed in finish/close
        self.size = 0
        self._keep = False
        self._write_out = start_write_out() if write_behind else None
        self._written_out = 0  # bytes already handed to the disk

    def write(self, chunk: bytes) -> None:
        self._file.write(chunk)
        self.size += len(chunk)
        if self._write_out is not None and self.size - self._written_out >= WRITE_BEHIND_BYTES:
            self._file.flush()
            if self._write_out(self._file.fileno(), self._written_out, self.size - self._written_out) != 0:
                self._write_out = None  # not supported here (e.g. some network file systems)
            self._written_out = self.size

    def close(self) -> None:
        """Flush and close; the file is complete (not yet durable: see :meth:`sync`)."""
        self._file.close()

    def sync(self) -> None:
        """fsync the closed file (may run in a thread while a worker already reads it)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return  # discarded meanwhile
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def detach(self) -> Path:
        """Keep the file when the context ends; the caller now owns it."""
        self._keep = True
        return self.path

    def __enter__(self) -> SpoolFile:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._file.closed:
            self._file.close()
        if not self._keep:
            self.path.unlink(missing_ok=True)


@dataclass
class Upload:
    """A received file in the spool's tmp folder, and the format a worker reads it with (the caller
    removes or publishes it)."""

    path: Path
    format: str
    size: int
    #: what the client sent: "json" or the binary format
    source: str
    #: done once the file is durable (its fsync may run while a worker already reads it)
    synced: asyncio.Future[None]

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)
