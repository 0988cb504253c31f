"""Room kept on the data dir's disk for the deletions that make room.

On a full disk SQLite cannot record even a ``DELETE``: its WAL grows by a few pages first, so
without a way out a full data dir would refuse the very requests that free it (``DELETE
/v1/graphs/{id}`` answered 507). The store keeps :data:`RESERVE_BYTES` allocated in a file of
its own (``.reserve`` in the data dir); a deletion that finds the disk full gives it up and is
recorded in the room it leaves (:meth:`Reserve.freeing`), and the reserve is allocated again once
there is room (:meth:`Reserve.keep`, at start-up and at every WAL checkpoint).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

log = logging.getLogger("service.storage")

#: bytes kept allocated: a deletion's records in the WAL take a few 4 KiB pages, and the files
#: it removes make the room for the next ones
RESERVE_BYTES = 256 << 10

T = TypeVar("T")


class Reserve:
    """The reserve file of one data dir; safe to share between threads."""

    def __init__(self, data_dir: Path, size: int = RESERVE_BYTES) -> None:
        self.path = data_dir / ".reserve"
        self.size = size
        self._lock = threading.Lock()

    @property
    def held(self) -> bool:
        return self.path.exists()

    def keep(self) -> bool:
        """Allocate the reserve where it is not (yet, or any more); whether it is held now."""
        with self._lock:
            if self.path.exists():
                return True
            part = self.path.with_name(".reserve.part")
            try:
                with open(part, "wb") as f:
                    f.write(os.urandom(self.size))  # blocks of its own: zeros may be stored as none
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(part, self.path)
            except OSError:  # no room for it now: the next call tries again
                part.unlink(missing_ok=True)
                return False
            return True

    def freeing(self, deletion: Callable[[], T]) -> T:
        """Run ``deletion`` (a transaction that deletes records); if SQLite finds the disk full,
        give the reserve up and run it once more in the room that leaves."""
        try:
            return deletion()
        except sqlite3.OperationalError as exc:
            if "full" not in str(exc).lower():
                raise
            with self._lock:  # not allocated again between the release and the second try
                if not self.path.exists():
                    raise
                self.path.unlink()
                log.warning("the data dir's disk is full: its reserve is given up to record a deletion")
                return deletion()
