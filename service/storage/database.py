"""One process's connection to the service's SQLite database, shared safely with the other processes.

Every process of the service (the supervisor, each API process, each worker) opens the same
database file in WAL mode: readers never wait, and one writer at a time holds the write lock. A
writer that finds it taken does not sleep in SQLite's busy handler (its first wait is a whole
millisecond, on an API process's event loop); :meth:`Database.write` and :meth:`Database.tx`
retry at once, then after a few microseconds, backing off to a millisecond, for up to
``busy_timeout_s``. A write holds the lock for tens of microseconds, so a retry usually wins.

The WAL is checkpointed by one thread of one process (:class:`Checkpointer`, the supervisor's),
never inside a commit on a request's path.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: how long a write waits for another process's write lock before it fails
BUSY_TIMEOUT_S = 30.0
#: bytes the WAL file is cut back to when a checkpoint lets SQLite start it over
WAL_SIZE_LIMIT = 64 << 20
#: seconds between two checkpoints of the WAL
CHECKPOINT_INTERVAL_S = 1.0

#: the pauses between retries of a write that found the lock taken (then the last, repeated)
_BACKOFF_S = (0.0, 0.0, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3)


def _busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class Database:
    """A connection of this process (threads share it under a lock); see the module's docstring."""

    def __init__(self, path: Path, busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.path = path
        self._busy_timeout_s = busy_timeout_s
        self._lock = threading.Lock()
        # timeout=0: a busy database answers at once and the retries below decide what to do
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=0)
        self._db.row_factory = sqlite3.Row
        self._retrying(lambda: self._db.execute("PRAGMA journal_mode=WAL"))
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer's thread does it
        self._db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _retrying(self, work: Callable[[], T]) -> T:
        deadline = 0.0
        attempt = 0
        while True:
            try:
                return work()
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise
                now = time.monotonic()
                deadline = deadline or now + self._busy_timeout_s
                if now > deadline:
                    raise
            pause = _BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)]
            attempt += 1
            if pause:
                time.sleep(pause)

    def read(self, sql: str, params: Any = ()) -> list[sqlite3.Row]:
        """The rows of a query (readers never wait for a writer in WAL mode)."""
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def read_one(self, sql: str, params: Any = ()) -> sqlite3.Row | None:
        with self._lock:
            row: sqlite3.Row | None = self._db.execute(sql, params).fetchone()
            return row

    def write(self, sql: str, params: Any = ()) -> list[sqlite3.Row]:
        """One statement in a transaction of its own (its rows, for ``RETURNING``)."""
        with self._lock:
            return self._retrying(lambda: self._db.execute(sql, params).fetchall())

    def write_count(self, sql: str, params: Any = ()) -> int:
        """One statement in a transaction of its own; the rows it changed."""
        with self._lock:
            return self._retrying(lambda: self._db.execute(sql, params).rowcount)

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``: the write lock from its first statement, so its
        reads see what its writes will be judged against); rolled back if the block raises."""
        with self._lock:
            self._retrying(lambda: self._db.execute("BEGIN IMMEDIATE"))
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._retrying(lambda: self._db.execute("COMMIT"))

    def script(self, sql: str) -> None:
        with self._lock:
            self._retrying(lambda: self._db.executescript(sql))


class Checkpointer:
    """A thread that checkpoints the WAL every ``interval_s`` seconds on a connection of its own
    (``PASSIVE``: it never blocks a writer), and runs ``also`` after each."""

    def __init__(self, path: Path, interval_s: float, also: Callable[[], object] = lambda: None) -> None:
        self._interval_s = interval_s
        self._also = also
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sqlite-checkpoints", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopping.wait(self._interval_s):
                with contextlib.suppress(sqlite3.Error):  # busy, or the disk: the next one tries again
                    self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")
                self._also()
        finally:
            self._db.close()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(30)
