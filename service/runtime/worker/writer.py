"""A worker's result files, written on a thread behind the replies, in their order.

The loop goes on to the next request while the last one's file is written (the file's bytes,
its rename into place and the hand-off to the disk cost a GPU worker about as much as the job's
computation). Each piece of work sends its own STORED notes; a request for a job's file from
another API process (AWAIT_STORED) waits here until the file is written (:meth:`Writer.await_file`).
At most :data:`WRITES_BEHIND` pieces wait at once (the loop waits beyond that).

While a worker writes (:func:`writing`), its interpreter hands the GIL over sooner
(:data:`SWITCH_INTERVAL_S`): the thread takes the GIL back after each system call of a file (about
ten), and a loop that never lets go keeps it for Python's whole switch interval each time.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
from collections.abc import Callable, Iterator

from .protocol import STORED
from .server import Connection

#: result files that may wait for the writer thread at once (the loop waits beyond that)
WRITES_BEHIND = 64
#: the GIL's switch interval in a writing worker, against Python's 5 ms: each time the writer thread
#: waits for the GIL behind a busy loop it waits this long at most (docs/performance.md, "Choices")
SWITCH_INTERVAL_S = 0.0002


class Writer:
    """The thread that writes result files (see the module's docstring)."""

    def __init__(self) -> None:
        self._work: queue.Queue[Callable[[], None] | None] = queue.Queue(WRITES_BEHIND)
        #: a byte comes out here each time the thread has written all it was given (the loop
        #: waiting for the next request wakes up to poll for it)
        self.drained_fd, self._drained_w = os.pipe()
        os.set_blocking(self.drained_fd, False)
        os.set_blocking(self._drained_w, False)
        self._lock = threading.Lock()
        #: jobs whose file is being written, and who else waits for it: (connection, request id)
        self._pending: dict[str, list[tuple[Connection, int]]] = {}
        self._thread = threading.Thread(target=self._run, name="result-writer", daemon=True)
        self._thread.start()

    def files(
        self,
        job_ids: list[str],
        write: Callable[[], BaseException | None],
        notes: list[list[tuple[Connection, int]]],
    ) -> None:
        """Write the files of ``job_ids`` (``write`` does it: None, or the error), then send each
        job's STORED note to its requesters (``notes``, one list per job) and to those who asked
        to wait for it meanwhile."""
        with self._lock:
            for job_id in job_ids:
                self._pending.setdefault(job_id, [])

        def work() -> None:
            error = write()
            for job_id, requesters in zip(job_ids, notes, strict=True):
                with self._lock:
                    waiting = self._pending.pop(job_id, [])
                for conn, req_id in requesters:
                    conn.send((STORED, req_id, error))
                for conn, req_id in waiting:
                    if req_id < 0:  # a note owed to a copy of the job answered meanwhile
                        conn.send((STORED, -req_id, error))
                    else:
                        conn.send((req_id, True, {"written": error is None}))

        self.behind(work)

    def note_when_written(self, job_id: str, requesters: list[tuple[Connection, int]]) -> None:
        """Send STORED notes for a job whose file an earlier run wrote (or is writing): once that
        write is done, or at once."""
        with self._lock:
            waiting = self._pending.get(job_id)
            if waiting is not None:
                waiting.extend((conn, -req_id) for conn, req_id in requesters)  # negative: a note
                return
        for conn, req_id in requesters:
            conn.send((STORED, req_id, None))

    def await_file(self, job_id: str, conn: Connection, req_id: int) -> bool:
        """Answer ``req_id`` once the job's file is written; False when none is being written."""
        with self._lock:
            waiting = self._pending.get(job_id)
            if waiting is None:
                return False
            waiting.append((conn, req_id))
            return True

    def behind(self, work: Callable[[], None]) -> None:
        """Run ``work`` on the thread after the work already there (waits while it is full)."""
        self._work.put(work)

    def busy(self) -> bool:
        """Whether the thread has work it has not finished."""
        return self._work.unfinished_tasks > 0

    def take_drained(self) -> None:
        """Read the thread's words that it had written all (so a wait on :attr:`drained_fd` waits
        for the next)."""
        with contextlib.suppress(BlockingIOError):
            os.read(self.drained_fd, 4096)

    def _run(self) -> None:
        while (work := self._work.get()) is not None:
            try:
                with contextlib.suppress(OSError, ValueError):  # an API process is gone: no one waits
                    work()
            finally:
                self._work.task_done()
                if not self.busy():
                    with contextlib.suppress(BlockingIOError):  # words not yet read: one is enough
                        os.write(self._drained_w, b"d")

    def drain(self, timeout: float | None = None) -> None:
        """Wait until every file handed over is written (and its note sent); the thread ends."""
        self._work.put(None)
        self._thread.join(timeout)

    def close(self) -> None:
        """Close the drained pipe once the thread has ended."""
        if self._thread.is_alive():
            return
        for fd in (self.drained_fd, self._drained_w):
            with contextlib.suppress(OSError):
                os.close(fd)


@contextlib.contextmanager
def writing() -> Iterator[Writer]:
    """A :class:`Writer`; the files handed to it are written before the block ends. Meanwhile the
    interpreter's switch interval is :data:`SWITCH_INTERVAL_S` (see the module's docstring)."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    writer = Writer()
    try:
        yield writer
    finally:
        writer.drain(timeout=30.0)
        writer.close()
        sys.setswitchinterval(previous)
