"""The spool's result files under a size cap (``MST_MAX_RESULT_BYTES``), least recently used first out.

Every succeeded job keeps its record; its result *file* is a cache of a deterministic computation.
Workers write the files and API processes read them (touching their modification time, so it
tells when a file was last used); a thread of the supervisor's looks at the folder every
second (or, where a look takes long, waits ten times as long as it took: a look reads every file's
size and age, 0.4 s for 10^5 files on a 2-core VM, so a folder of 10^6 small results would
otherwise keep a core busy) and, while the files together pass the cap, removes the least recently
used ones (never the newest). A later request for such a result computes it again from the stored graph, or
answers 410 when the graph was deleted or its weights changed since.

Sizes are the files' own (a cached job's hard link counts again: the cap errs on the safe side).
The cap is at most half of the result folder's file system (:func:`effective_cap`): results on a
memory file system (``MST_RESULT_DIR=/dev/shm/...``, 64 MB in a default container) never fill it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from pathlib import Path

from ...storage.store import RESULT_NAME

log = logging.getLogger("service.runtime.supervisor")

#: seconds between two looks at the result files, at least
INTERVAL_S = 1.0
#: and at least this many times the last look's own duration (the thread's share of a core is at
#: most 1 / (1 + WAIT_PER_LOOK))
WAIT_PER_LOOK = 10.0


def trim(result_dir: Path, max_bytes: int) -> int:
    """Remove the least recently used result files until the rest fit ``max_bytes``; how many went."""
    files: list[tuple[float, int, str]] = []
    with os.scandir(result_dir) as entries:
        for entry in entries:
            if not RESULT_NAME.fullmatch(entry.name):  # a result file (not a part file, nor another's)
                continue
            with contextlib.suppress(FileNotFoundError):
                stat = entry.stat()
                files.append((stat.st_mtime, stat.st_size, entry.path))
    total = sum(size for _, size, _ in files)
    if total <= max_bytes:
        return 0
    files.sort()
    removed = 0
    for _, size, path in files[:-1]:  # never the newest one
        if total <= max_bytes:
            break
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed += 1
        total -= size
    return removed


def used(path: Path) -> None:
    """A result file was read: it is the most recently used now."""
    with contextlib.suppress(OSError):
        os.utime(path)


def effective_cap(result_dir: Path, max_bytes: int) -> int:
    """``max_bytes``, or half of the file system ``result_dir`` lies on where that is less."""
    try:
        fs = os.statvfs(result_dir)
    except OSError:
        return max_bytes
    return min(max_bytes, fs.f_blocks * fs.f_frsize // 2)


class ResultCap:
    """The thread that keeps the result files under the cap (:func:`effective_cap`)."""

    def __init__(self, result_dir: Path, max_bytes: int, interval_s: float = INTERVAL_S) -> None:
        self._dir = result_dir
        self._max = effective_cap(result_dir, max_bytes)
        if self._max < max_bytes:
            log.info(
                "result files capped at %d bytes, half of their file system (MST_MAX_RESULT_BYTES %d)",
                self._max,
                max_bytes,
            )
        self._interval_s = interval_s
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="result-cap", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        wait = self._interval_s
        while not self._stopping.wait(wait):
            started = time.monotonic()
            with contextlib.suppress(OSError):
                trim(self._dir, self._max)
            wait = max(self._interval_s, WAIT_PER_LOOK * (time.monotonic() - started))

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(10)
