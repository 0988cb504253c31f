"""Result files handed to the disk on a thread of their own, after their answers.

A worker's result files are not fsynced (a result can be computed again from its graph), but
left to the kernel's write-back a stream of large ones piles up gigabytes of dirty pages, and
every fsync on the file system (an upload's durable step, SQLite's commit) then waits behind
them. So each finished file is handed to the disk (``sync_file_range``, which starts the write
and does not wait for it), but **not on the answer's path**: that call blocks once the disk's
queue is full, and a file's answer (its STORED note) would then wait for the disk. Measured on a
two-GPU H200 host whose disk writes 1.6 GB/s: 2,278 jobs/s (p99 94 ms) with the hand-off before
the note, 3,319 (p99 34 ms) without it (RMAT 2^16, 786 KB results; docs/performance.md).

:class:`WriteOut` takes files in their order and hands them over one by one. While the disk
keeps up, every file is handed over within moments of being written (what keeps fsyncs short).
When it falls behind by more than :data:`BACKLOG_BYTES`, further files are left to the kernel's
write-back (counted in :attr:`WriteOut.skipped`) rather than making answers wait for the disk.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from collections.abc import Callable

from .spool import start_write_out

#: bytes of finished files waiting to be handed to the disk, beyond which files are left to the
#: kernel's write-back (a quarter of a second of a 1 GB/s disk)
BACKLOG_BYTES = 256 << 20


def hand_to_disk(path: str) -> None:
    """Start writing ``path``'s dirty pages to the disk (``sync_file_range``); a file removed
    meanwhile (evicted, its job deleted) is passed over."""
    start = start_write_out()
    if start is None:
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        start(fd, 0, 0)  # 0 bytes: to the end of the file
    finally:
        os.close(fd)


class WriteOut:
    """A thread handing finished files to the disk, behind their answers (see the module)."""

    def __init__(
        self, backlog_bytes: int = BACKLOG_BYTES, hand: Callable[[str], None] = hand_to_disk
    ) -> None:
        self.backlog_bytes = backlog_bytes
        self._hand = hand
        self._files: collections.deque[tuple[str, int]] = collections.deque()
        self._waiting_bytes = 0
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        #: files left to the kernel's write-back because the disk was behind
        self.skipped = 0

    def offer(self, path: str, nbytes: int) -> bool:
        """Queue ``path`` (``nbytes`` long) to be handed to the disk; False when it is left to the
        kernel's write-back instead (the disk is more than :attr:`backlog_bytes` behind)."""
        with self._cond:
            if self._closed:
                return False
            if self._files and self._waiting_bytes + nbytes > self.backlog_bytes:
                self.skipped += 1
                return False
            self._files.append((path, nbytes))
            self._waiting_bytes += nbytes
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="result-write-out", daemon=True)
                self._thread.start()
            self._cond.notify()
        return True

    def pending_bytes(self) -> int:
        """Bytes of files queued and not yet handed to the disk."""
        with self._cond:
            return self._waiting_bytes

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._files and not self._closed:
                    self._cond.wait()
                if not self._files:
                    return
                path, nbytes = self._files[0]
            with contextlib.suppress(OSError):  # a hint: a failure here loses nothing
                self._hand(path)
            with self._cond:
                self._files.popleft()
                self._waiting_bytes -= nbytes
                self._cond.notify_all()

    def close(self, timeout: float | None = None) -> None:
        """Hand over what is queued, then end the thread (waits up to ``timeout``)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
