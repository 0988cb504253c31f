"""The worker process: its entry point and the loop that answers its pipe.

Started by the local pool (:mod:`service.runtime.pool.processes`) with the ``spawn`` start
method, so the child is a fresh interpreter: its entry point (:func:`.entry.main`, which imports
nothing of the engine) pins its GPU with ``CUDA_VISIBLE_DEVICES`` and only then imports this
module and through it :mod:`gpu_core` (and CuPy); :func:`main` starts
(:func:`~.startup.start`) and sends ``ready``; then :func:`serve` answers each request in the
pipe's order (the messages: :mod:`.protocol`; the operations: :mod:`.ops`).

Several requests wait in the pipe at once (the handle pipelines them, ``MST_DISPATCH_DEPTH``):
identical MST requests queued back to back (same dataset, task, parameters, nothing in between)
are answered by one computation, each with its own reply, result file (a hard link of the
first) and STORED note (``MST_COALESCE_JOBS``); one-shot requests waiting together are computed
as one disjoint-union graph (:mod:`.oneshots`, ``MST_ONESHOT_BATCH_EDGES``); before a GPU worker
computes a job's forest it starts those of the MST jobs right behind it on other graphs, which
the device then computes side by side (:func:`.graphs.launch_ahead`, ``MST_LAUNCH_AHEAD``).
Before each run the loop stamps the run's request ids (:class:`~.protocol.RunStamp`), and clears
the stamp once the run's replies are sent.

Result files are written behind the replies on a thread of the worker's own (:class:`Writer`),
in the order of the replies, each followed by its STORED note: the loop goes on to the next
request while the last one's file is written (the file's bytes, its rename into place and the
hand-off to the disk cost a GPU worker about as much as the job's computation). At most
:data:`WRITES_BEHIND` files wait at once; a STOP waits for them all.

Between requests the worker polls its pipe for ``MST_WORKER_SPIN_MS`` before it blocks: a job
that follows soon (a client's next request) then finds it awake, without the wake-up of a
sleeping process and with warm caches.

A heartbeat thread stamps ``time.monotonic()`` into shared memory every
``heartbeat_interval_s``; the handle restarts a worker whose stamp gets old. After a
:class:`gpu_core.errors.DeviceError` the worker answers and exits, so its replacement starts
from a fresh CUDA context; out of device memory (:class:`gpu_core.errors.DeviceMemoryError`) is
the exception: it is answered (507), the pool's cached blocks are freed and the worker carries on.
"""

from __future__ import annotations

import contextlib
import gc
import os
import queue
import select
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from .graphs import launch_ahead
from .ops import handle, run_after, run_oneshots
from .protocol import (
    MAX_COALESCED,
    MST,
    ONESHOT,
    STOP,
    STORED,
    RunStamp,
    WorkerConfig,
    framed,
    received,
    widen,
)
from .startup import start
from .state import Worker, portable

#: result files that may wait for the writer thread at once (the loop waits beyond that)
WRITES_BEHIND = 64


def main(
    conn: Connection, heartbeat: Any, config: WorkerConfig, running: Any = None, entered: float | None = None
) -> None:
    """Run the worker process (started through :func:`.entry.main`). ``running``: the shared
    ``RawArray('q', 2)`` of its :class:`~.protocol.RunStamp` (which requests it is computing, read
    by its handle if it dies); ``entered``: ``time.monotonic()`` when the process reached its entry
    point (its ``ready`` info's ``entered_at``; the imports since then are its ``modules`` step)."""
    modules_ms = 0.0 if entered is None else (time.monotonic() - entered) * 1e3
    entered = time.monotonic() if entered is None else entered
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the API, which stops its workers
    if config.cuda_device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = config.cuda_device
    beat = threading.Thread(
        target=_heartbeat, args=(heartbeat, config.heartbeat_interval_s), name="heartbeat", daemon=True
    )
    heartbeat.value = time.monotonic()
    beat.start()
    try:
        worker = Worker(config)
        worker.stamp = RunStamp(running)
        info = start(worker)
        info["entered_at"] = entered
        info["startup_ms"] = {"modules": round(modules_ms, 3), **info["startup_ms"]}
    except BaseException as exc:
        conn.send(("failed", portable(exc, for_operator=True)))
        conn.close()
        return
    gc.freeze()  # the engine and its warm-up state stay: no full collections walking them per job
    widen(conn)  # its replies (a prediction's arrays) in one write
    conn.send(("ready", info))
    serve(worker, conn)


def _heartbeat(value: Any, interval: float) -> None:
    while True:
        value.value = time.monotonic()
        time.sleep(interval)


def _next_request(conn: Connection, spin_s: float, writer: Writer | None = None) -> Any:
    """The next request: polled for up to ``spin_s`` seconds once ``writer`` has no file left to
    write, then waited for asleep.

    While the writer thread has a file to write (every job's, behind its reply) the loop waits in
    the kernel for either the request or the thread's word that it is done, then polls: a poll
    loop beside the writer took turns with it for the interpreter's lock (the worker's CPU per job
    grew by half on the CPU benchmark), and a loop that went to sleep in its read instead had the
    API process's write of the next request wake it (a fifth of the API's samples with one client
    on a 2-core host, up to 0.8 ms a job there).
    """
    if spin_s > 0:
        fd = conn.fileno()
        while writer is not None and writer.busy():
            ready = select.select([fd, writer.drained_fd], [], [])[0]
            if writer.drained_fd in ready:
                writer.take_drained()
            if fd in ready:
                return received(conn)
        deadline = time.monotonic() + spin_s
        while not conn.poll() and time.monotonic() < deadline:
            pass
    return received(conn)


def _read_waiting(conn: Connection, backlog: deque[Any]) -> None:
    """Move the requests already waiting in the pipe to ``backlog`` (up to :data:`MAX_COALESCED`)."""
    while len(backlog) < MAX_COALESCED and conn.poll():
        backlog.append(received(conn))


def _launch_ahead(worker: Worker, conn: Connection, backlog: deque[Any], args: list[Any]) -> None:
    """Start the forest of the MST request with ``args`` and those of the MST requests right
    behind it in the pipe on the device (:func:`.graphs.launch_ahead`); they are answered in
    order, as always, each turn collecting its run. Only MST requests with nothing else between
    them: a weight update or a reload behind one is done before the forests after it start."""
    _read_waiting(conn, backlog)
    behind = []
    for op, _, *rest in backlog:
        if op != MST:
            break
        behind.append(rest)
    launch_ahead(worker, [args, *behind])


def _same_jobs(conn: Connection, backlog: deque[Any], args: list[Any]) -> list[tuple[int, str]]:
    """Identical MST requests queued right behind one with ``args``: their (req id, result path),
    taken out of ``backlog`` (which first gets every request already waiting in the pipe).

    Identical: the same dataset, task and parameters, and nothing else in between (a weight
    update, a reload) — so they compute on the same data and have the same result.
    """
    _read_waiting(conn, backlog)
    key = (args[0], *args[2:])
    same: list[tuple[int, str]] = []
    while backlog and len(same) < MAX_COALESCED:
        op, rid, *other = backlog[0]
        if op != MST or (other[0], *other[2:]) != key:
            break
        backlog.popleft()
        same.append((rid, other[1]))
    return same


def _more_of(conn: Connection, backlog: deque[Any], op: str) -> list[tuple[int, list[Any]]]:
    """Requests of ``op`` queued right behind one of it: their (req id, args), taken out of
    ``backlog`` (which first gets every request already waiting in the pipe)."""
    _read_waiting(conn, backlog)
    more: list[tuple[int, list[Any]]] = []
    while backlog and backlog[0][0] == op and len(more) < MAX_COALESCED:
        _, rid, *args = backlog.popleft()
        more.append((rid, args))
    return more


def _send_all(conn: Connection, messages: list[tuple[Any, ...]]) -> None:
    """Send ``messages`` as ``conn.send`` would, one after another, in one write (a batch's
    replies: one system call, not one each); the API's reader takes them one by one."""
    data = memoryview(b"".join(framed(m) for m in messages))
    fd = conn.fileno()
    while data:
        data = data[os.write(fd, data) :]


def _linker(source: str, target: str) -> Callable[[], None]:
    """Give ``target`` the result file at ``source``: a hard link, or a copy where links fail."""

    def link() -> None:
        try:
            os.link(source, target)
        except OSError:  # no hard links on this file system: a copy, in place at once
            import shutil

            part = f"{target}.{os.getpid()}.part"
            try:
                shutil.copyfile(source, part)
                os.replace(part, target)
            except BaseException:
                Path(part).unlink(missing_ok=True)
                raise

    return link


class Writer:
    """The worker's result files, written on a thread behind the replies, in their order.

    Each piece of work (a reply's ``after``, or a coalesced run's files) sends its own STORED
    notes; every write to the pipe, the loop's and the thread's, holds :attr:`lock`.
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.lock = threading.Lock()
        self._work: queue.Queue[Callable[[], None] | None] = queue.Queue(WRITES_BEHIND)
        #: a byte comes out here each time the thread has written all it was given (the loop
        #: waiting for the next request wakes up to poll for it, see _next_request)
        self.drained_fd, self._drained_w = os.pipe()
        os.set_blocking(self.drained_fd, False)
        os.set_blocking(self._drained_w, False)
        self._thread = threading.Thread(target=self._run, name="result-writer", daemon=True)
        self._thread.start()

    def send(self, message: tuple[Any, ...]) -> None:
        with self.lock:
            self._conn.send(message)

    def send_all(self, messages: list[tuple[Any, ...]]) -> None:
        with self.lock:
            _send_all(self._conn, messages)

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

    def notes(self, after: Callable[[], None], req_ids: list[int]) -> Callable[[], None]:
        """Work that runs a reply's ``after`` and sends the STORED note of each of ``req_ids``."""

        def work() -> None:
            error = run_after(after)
            for req_id in req_ids:
                self.send((STORED, req_id, error))

        return work

    def _run(self) -> None:
        while (work := self._work.get()) is not None:
            try:
                with contextlib.suppress(OSError, ValueError):  # the API process is gone: no one waits
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
        """Close the drained pipe once the thread has ended (one still writing after
        :meth:`drain`'s timeout keeps it: it writes its word there when done)."""
        if self._thread.is_alive():
            return
        for fd in (self.drained_fd, self._drained_w):
            with contextlib.suppress(OSError):
                os.close(fd)


@contextlib.contextmanager
def writing(conn: Connection) -> Iterator[Writer]:
    """A :class:`Writer` for the loop; the files handed to it are written before the loop ends."""
    writer = Writer(conn)
    try:
        yield writer
    finally:
        writer.drain(timeout=30.0)
        writer.close()


def serve(worker: Worker, conn: Connection) -> None:
    """Answer the pipe's requests in order, until STOP, the API process's end or a device error."""
    with writing(conn) as writer:
        _serve(worker, conn, writer)


def _serve(worker: Worker, conn: Connection, writer: Writer) -> None:
    backlog: deque[Any] = deque()  # requests read ahead from the pipe (see _same_jobs)
    while True:
        try:
            request = backlog.popleft() if backlog else _next_request(conn, worker.config.spin_s, writer)
        except (EOFError, OSError):
            return  # the API process is gone
        op, req_id, *args = request
        if op == STOP:
            writer.drain()  # the files of the jobs answered are in place before the service stops
            with contextlib.suppress(OSError, ValueError):
                conn.send((req_id, True, {}))
            return
        if op == ONESHOT and worker.config.oneshot_batch_edges:
            try:
                more = _more_of(conn, backlog, ONESHOT)
            except (EOFError, OSError):
                return
            if more:
                worker.stamp.begin(req_id, more[-1][0])
                replies, fatal = run_oneshots(worker, [(req_id, args), *more])
                try:
                    writer.send_all(replies)
                except (OSError, ValueError):
                    return
                worker.stamp.end()
                if fatal:
                    return
                continue
        if op == MST and worker.config.launch_ahead and worker.backend == "gpu":
            try:
                _launch_ahead(worker, conn, backlog, args)
            except (EOFError, OSError):
                return
        if op == MST and worker.config.coalesce:
            try:
                same = _same_jobs(conn, backlog, args)
            except (EOFError, OSError):
                return
            if same:
                worker.stamp.begin(req_id, same[-1][0])
                if not serve_same(worker, writer, req_id, args, same):
                    return
                continue
        worker.stamp.begin(req_id, req_id)
        ok, payload, after, fatal = handle(worker, op, args)
        try:
            writer.send((req_id, ok, payload))
        except (OSError, ValueError):
            return  # the API process is gone
        worker.stamp.end()  # its result file is written behind the reply: nothing runs then
        if after is not None:
            writer.behind(writer.notes(after, [req_id]))
        if fatal:
            return  # a fresh process gets a fresh CUDA context


def serve_same(
    worker: Worker, writer: Writer, req_id: int, args: list[Any], same: list[tuple[int, str]]
) -> bool:
    """Answer an MST request and ``same`` (req id, result path) identical ones queued right behind
    it with one computation: each gets the summary, then its own result file (a hard link of
    the first, or a copy). False when the worker must stop (the API process is gone, or the
    device failed)."""
    ok, payload, after, fatal = handle(worker, MST, args)
    first = args[1]
    try:
        replies = [(req_id, ok, payload)]
        # the followers' results say that they shared the computation
        replies += [(rid, ok, dict(payload, coalesced=True) if ok else payload) for rid, _ in same]
        writer.send_all(replies)
    except (OSError, ValueError):
        return False
    worker.stamp.end()
    if after is not None:
        first_file = after

        def files() -> None:
            stored = run_after(first_file)
            writer.send((STORED, req_id, stored))
            for rid, path in same:
                writer.send((STORED, rid, stored if stored is not None else run_after(_linker(first, path))))

        writer.behind(files)
    return not fatal
