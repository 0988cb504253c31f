"""A worker's loop: its queue of requests from every API process, taken in order, one run at a time.

Each turn the loop reads every connection at once (:meth:`.server.Server.poll`), answers the
control requests it read (:data:`~.protocol.CONTROL`), and adds the others to its queue, ordered
by their senders' stamps. It then runs the first request it can:

* the requests of one dataset keep their order; those of other datasets may go ahead of a
  request whose dataset must be loaded first (after a restart, or an eviction), up to
  :data:`MAX_OVERTAKEN` of them, then that load happens;
* identical MST requests (same dataset, task and parameters, nothing else of that dataset
  between them) are answered by one computation, each with its own record, result file (a hard
  link of the first) and STORED note (``MST_COALESCE_JOBS``); one-shot requests waiting together
  are computed as one union (``MST_ONESHOT_BATCH_EDGES``); before a GPU worker computes a job's
  forest it starts those of the MST requests queued behind it on other graphs
  (``MST_LAUNCH_AHEAD``);
* with nothing to run it reloads the next dataset placed on it, then waits: polling for
  ``MST_WORKER_SPIN_MS``, then asleep in ``select``.

Before each run it writes the run's request ids per API process into the board (an API process
reads them if the worker dies: those were running) and clears them once the replies are sent.
Result files are written behind the replies (:mod:`.writer`).
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable
from typing import Any

from ..board import Board
from . import job_records
from .graphs import launch_ahead
from .holdings import Holdings
from .ops import handle, run_after, run_oneshots
from .predict_batches import batchable, predict_together
from .protocol import (
    ABANDON,
    AWAIT_STORED,
    COMMIT,
    DROP,
    DROP_MODEL,
    FIT,
    JOB,
    LOAD,
    MAX_COALESCED,
    MST,
    ONESHOT,
    PREDICT,
    PUBLISHED,
    RESENT,
    STORED,
    SUSPECT,
    SYNCED,
    WEIGHTS,
    JobSpec,
)
from .server import Connection, Incoming, Server
from .state import Worker, portable
from .weights import replace_and_publish
from .writer import Writer

log = logging.getLogger("service.worker")

#: requests of other datasets that may go ahead of one whose dataset must be loaded first
MAX_OVERTAKEN = MAX_COALESCED
#: ops on a dataset (their first argument), which keep their order and need it resident
_ON_DATASET = frozenset({MST, WEIGHTS, FIT, PREDICT, DROP_MODEL})
#: seconds between two refreshes of the memory figures on the board while idle
_MEMORY_EVERY_S = 0.1


def dataset_of(request: Incoming) -> str | None:
    if request.op in _ON_DATASET:
        key = request.args[0]
        return key if isinstance(key, str) else None
    return None


class WorkerLoop:
    """One worker's queue and the loop that runs it (see the module's docstring)."""

    def __init__(
        self, worker: Worker, holdings: Holdings, board: Board, server: Server, writer: Writer
    ) -> None:
        self.worker = worker
        self.holdings = holdings
        self.store = holdings.store
        self.board = board
        self.server = server
        self.writer = writer
        self.index = worker.config.index
        #: requests waiting, in stamp order
        self.queue: list[Incoming] = []
        self._keys: list[tuple[float, int]] = []
        #: queued jobs by id (a job re-sent by an API process after a restart joins its queued twin)
        self.jobs: dict[str, Incoming] = {}
        #: how many requests went ahead of the first one waiting for a load
        self._overtaken = 0
        #: jobs the dead predecessor had begun, until their API processes send them again (deadlines)
        self.orphans: dict[str, float] = {}
        #: a replacement's barrier: the API processes that have not yet sent again what they kept
        #: for it, and until when it waits for them (see :meth:`resume_after`)
        self.unsynced: set[int] = set()
        self._sync_deadline = 0.0
        self.stopping = False
        self._memory_at = 0.0

    # -- the queue ----------------------------------------------------------------------------

    def add(self, request: Incoming) -> None:
        spec = _spec(request)
        if spec is not None:
            self.orphans.pop(spec.id, None)
        if spec is not None and not spec.step:
            twin = self.jobs.get(spec.id)
            if twin is not None and request.conn is not None:
                twin.also.append((request.conn, request.req_id))
                return
            self.jobs[spec.id] = request
        key = (request.stamp, request.seq)
        at = bisect.bisect(self._keys, key)
        self._keys.insert(at, key)
        self.queue.insert(at, request)

    def _take(self, request: Incoming) -> None:
        at = self.queue.index(request)
        del self.queue[at]
        del self._keys[at]
        spec = _spec(request)
        if spec is not None and not spec.step:
            self.jobs.pop(spec.id, None)

    def resume_after(self, slots: int, timeout_s: float) -> None:
        """A replacement of a dead worker: run nothing until every API process has sent again what
        it kept (``SYNCED``), or ``timeout_s`` has passed (an API process that is gone sends nothing),
        so that nothing sent after the death overtakes what was sent before it."""
        self.unsynced = set(range(slots))
        self._sync_deadline = time.monotonic() + timeout_s

    def synced(self) -> bool:
        if self.unsynced and time.monotonic() > self._sync_deadline:
            log.warning(
                "worker %d: no word from API process(es) %s; running on", self.index, sorted(self.unsynced)
            )
            self.unsynced.clear()
        return not self.unsynced

    def expire_orphans(self, reason: str) -> None:
        """Fail the jobs the predecessor had begun that nobody sent again in time."""
        now = time.monotonic()
        expired = [job_id for job_id, deadline in self.orphans.items() if deadline <= now]
        for job_id in expired:
            del self.orphans[job_id]
        if expired:
            job_records.fail_orphans(self.store, expired, reason)

    def busy_datasets(self) -> set[str]:
        return {key for r in self.queue if (key := dataset_of(r)) is not None}

    def next_request(self) -> Incoming | None:
        """The request to run now (see the module's docstring); None when the queue is empty. With
        nothing else to run, the first request of the smallest dataset that must be loaded first."""
        blocked: dict[str, Incoming] = {}
        for request in self.queue:
            key = dataset_of(request)
            if key is not None and key in blocked:
                continue
            if key is None or self.holdings.resident(key):
                if blocked:
                    if self._overtaken >= MAX_OVERTAKEN:
                        break
                    self._overtaken += 1
                return request
            blocked[key] = request
        self._overtaken = 0
        if not blocked:
            return None
        sizes = self.holdings.sizes
        return blocked[min(blocked, key=lambda k: (sizes.get(k, 0), blocked[k].stamp))]

    # -- control requests ---------------------------------------------------------------------

    def control(self, request: Incoming) -> None:
        """Answer a control request as it is read."""
        conn = request.conn
        assert conn is not None
        op, args = request.op, request.args
        if op == SYNCED:
            self.unsynced.discard(conn.slot)
            return
        if op == AWAIT_STORED:
            if self.writer.await_file(str(args[0]), conn, request.req_id):
                return
            answer: dict[str, Any] = {"written": False}
        elif op == PUBLISHED:
            twin = self.jobs.get(str(args[0]))
            if twin is not None:  # still queued: it is started only if its record still is then
                twin.args[4] = _published(twin.args[4])
            answer = {"queued": twin is not None}
        elif op == COMMIT:
            self.holdings.commit(str(args[0]))
            answer = {}
        elif op == ABANDON:
            key = str(args[0])
            if key in self.holdings.provisional:
                self.holdings.forget(key)
            answer = self._memory()
        elif op == DROP:  # its queued requests find it gone (a deleted dataset's jobs are cancelled)
            self.holdings.forget(str(args[0]))
            answer = self._memory()
        else:
            return
        conn.send((request.req_id, True, answer))

    def closed(self, conn: Connection) -> None:
        """An API process's connection closed: its uploads never committed go, and its requests
        still queued go too, but for the jobs whose records are in the store (they still run)."""
        self.holdings.closed(conn)
        for request in [r for r in self.queue if r.conn is conn]:
            spec = _spec(request)
            if spec is not None and spec.published:
                request.conn = None
            elif not request.also:
                self._take(request)

    # -- runs ---------------------------------------------------------------------------------

    def run_next(self) -> bool:
        """Run the next request (with those that share its run); False when the worker must end
        (its device failed)."""
        request = self.next_request() if self.synced() else None
        if request is None:
            return True
        if request.op == MST:
            return self._run_mst(request)
        if request.op == ONESHOT and self.worker.config.oneshot_batch_edges and not request.flags & SUSPECT:
            return self._run_oneshots(request)
        if request.op == PREDICT and not request.flags & SUSPECT:
            group = self._predictions(request)
            if len(group) > 1:
                return self._run_predictions(group)
        self._take(request)
        self._stamp([request])
        ok, payload, after, fatal = self._handle(request)
        self._reply([request], ok, payload)
        self._unstamp()
        if after is not None:
            self.writer.behind(self._notes(after, request.requesters()))
        return not fatal

    def _handle(self, request: Incoming) -> tuple[bool, Any, Callable[[], None] | None, bool]:
        """Run one request that is not an MST job: the dataset ops with their dataset loaded and
        room made; a new upload held as provisional."""
        op, args = request.op, request.args
        holdings = self.holdings
        busy = self.busy_datasets()
        try:
            if op == LOAD:
                return True, holdings.load_new(args[0], args[1:], request.conn, busy), None, False
            if op == WEIGHTS:
                holdings.ensure(args[0], busy)
                return True, replace_and_publish(holdings, *args), None, False
            if op in (FIT, PREDICT, DROP_MODEL):
                holdings.ensure(args[0], busy)
                busy.add(args[0])  # room is never made by evicting the dataset the request is on
            outcome = holdings.with_room(lambda: _raising(handle(self.worker, op, args)), keep=busy)
        except BaseException as exc:
            ok, payload, after, fatal = handle_error(self.worker, exc)
            return ok, payload, after, fatal
        ok, payload, after, fatal = outcome
        if ok and op in (FIT, PREDICT, DROP_MODEL) and "device_bytes" in payload:
            holdings.sized(args[0], int(payload["device_bytes"]))
        return ok, payload, after, fatal

    def _run_mst(self, first: Incoming) -> bool:
        """An MST request, and the identical ones behind it: one computation, each job recorded."""
        group = self._identical(first)
        for request in group:
            self._take(request)
        key, result_path, task, params = first.args[:4]
        live = self._begin(group)
        if not live:
            return True
        self._stamp(live)
        if self.worker.config.launch_ahead and self.worker.backend == "gpu":
            launch_ahead(self.worker, [first.args, *(r.args for r in self._behind(first))])
        started_at = time.time()
        result_path = live[0].args[1]
        try:
            self.holdings.ensure(key, self.busy_datasets())
            ok, payload, after, fatal = handle(self.worker, MST, [key, result_path, task, params])
        except BaseException as exc:
            ok, payload, after, fatal = handle_error(self.worker, exc)
        version = self.holdings.versions.get(key, 0)
        messages: list[tuple[Connection, tuple[Any, ...]]] = []
        stored_jobs: list[str] = []
        notes: list[list[tuple[Connection, int]]] = []
        for position, request in enumerate(live):
            spec = _spec(request)
            answer: Any = payload
            answered = ok
            if spec is not None and not spec.step:
                try:
                    record = job_records.end(self.store, spec, started_at, ok, payload, version, position > 0)
                except BaseException as exc:  # the record cannot be written (a full disk)
                    answered, answer = False, portable(exc)
                else:
                    answered, answer = True, {**(payload if ok else {}), JOB: record}
                    if ok:
                        answer["coalesced"] = position > 0
            elif ok and position > 0:
                answer = dict(payload, coalesced=True)
            for conn, req_id in request.requesters():
                messages.append((conn, (req_id, answered, answer)))
                if answered and not ok:  # a failed job's answer: no file follows, its note says why
                    messages.append((conn, (STORED, req_id, payload)))
            if ok and after is not None:
                stored_jobs.append(spec.id if spec is not None and not spec.step else f"r{request.seq}")
                notes.append(request.requesters())
        _send(messages)
        self._unstamp()
        if ok and after is not None:
            paths = [r.args[1] for r in live]
            self.writer.files(stored_jobs, _files(after, paths), notes)
        return not fatal

    def _begin(self, group: list[Incoming]) -> list[Incoming]:
        """The requests of ``group`` to compute: those whose jobs begin now, and those without a job
        record; the others are answered from their records at once."""
        live: list[Incoming] = []
        for request in group:
            spec = _spec(request)
            ended = (
                None if spec is None else job_records.begin(self.store, spec, bool(request.flags & RESENT))
            )
            if ended is None:
                live.append(request)
                continue
            # cancelled meanwhile, or a copy of a job that ran already: its answer is its record,
            # and its note follows that run's file (every answered MST request gets one note)
            self._reply([request], True, {JOB: ended})
            assert spec is not None
            self.writer.note_when_written(spec.id, request.requesters())
        return live

    def _identical(self, first: Incoming) -> list[Incoming]:
        """``first`` and the identical MST requests queued behind it (see the module's docstring)."""
        group = [first]
        if not self.worker.config.coalesce or first.flags & SUSPECT:
            return group
        key, _, task, params = first.args[:4]
        start = self.queue.index(first) + 1
        for request in self.queue[start:]:
            if len(group) >= MAX_COALESCED:
                break
            if dataset_of(request) != key:
                continue
            if request.op != MST or request.args[2] != task or request.args[3] != params:
                break
            if not request.flags & SUSPECT:  # a suspect runs alone
                group.append(request)
        return group

    def _behind(self, first: Incoming) -> list[Incoming]:
        """The MST requests queued right behind ``first`` (launched ahead on the device)."""
        out: list[Incoming] = []
        for request in self.queue:
            if len(out) >= self.worker.config.launch_ahead:
                break
            if request.op != MST:
                break
            out.append(request)
        return out

    def _run_oneshots(self, first: Incoming) -> bool:
        group = [r for r in self.queue if r.op == ONESHOT and not r.flags & SUSPECT][:MAX_COALESCED]
        for request in group:
            self._take(request)
        self._stamp(group)
        by_seq = {r.seq: r for r in group}
        replies, fatal = run_oneshots(self.worker, [(r.seq, r.args) for r in group])
        messages = [
            (conn, (req_id, ok, payload))
            for seq, ok, payload in replies
            for conn, req_id in by_seq[seq].requesters()
        ]
        _send(messages)
        self._unstamp()
        return not fatal

    def _predictions(self, first: Incoming) -> list[Incoming]:
        """``first`` and the predictions queued behind it that one batch may answer with it (the
        same model; nothing else of that point set between them: its order is kept)."""
        group = [first]
        key = first.args[0]
        for request in self.queue[self.queue.index(first) + 1 :]:
            if len(group) >= MAX_COALESCED:
                break
            if dataset_of(request) != key:
                continue
            if request.op != PREDICT or request.flags & SUSPECT or not batchable(first.args, request.args):
                break
            group.append(request)
        return group

    def _run_predictions(self, group: list[Incoming]) -> bool:
        """Predictions against one model, as one batch (:mod:`.predict_batches`); those it cannot
        take, or all of them where the batch fails, run alone one after another."""
        for request in group:
            self._take(request)
        self._stamp(group)
        by_seq = {r.seq: r for r in group}
        messages: list[tuple[Connection, tuple[Any, ...]]] = []
        try:
            self.holdings.ensure(group[0].args[0], self.busy_datasets())
            answers, alone = predict_together(self.worker, [(r.seq, r.args) for r in group])
        except BaseException as exc:
            if handle_error(self.worker, exc)[3]:  # (it frees the pool's cache after an OOM)
                # the device failed: this worker ends, its stamp still up, so each request of the
                # batch is sent again suspect and runs alone on the next worker
                return False
            log.debug("worker %d: a batch of %d predictions failed: %r", self.index, len(group), exc)
            answers, alone = [], [(r.seq, r.args) for r in group]
        for seq, payload in answers:
            messages.extend((conn, (req_id, True, payload)) for conn, req_id in by_seq[seq].requesters())
        if answers:
            self.holdings.sized(group[0].args[0], int(answers[0][1]["device_bytes"]))
        _send(messages)
        fatal = False
        for seq, _ in alone:
            request = by_seq[seq]
            ok, payload, _after, fatal = self._handle(request)
            self._reply([request], ok, payload)
            if fatal:
                break
        self._unstamp()
        return not fatal

    # -- answers ------------------------------------------------------------------------------

    def _stamp(self, run: list[Incoming]) -> None:
        """Tell the board which API processes' requests this run answers."""
        runs: dict[int, list[int]] = {}
        for request in run:
            for conn, req_id in request.requesters():
                if conn.slot >= 0:
                    runs.setdefault(conn.slot, []).append(req_id)
        self.board.stamp(self.index, runs)
        self.board.set(self.index, "computing", len(run))

    def _unstamp(self) -> None:
        self.board.clear_stamp(self.index)
        self.board.set(self.index, "computing", 0)

    def _reply(self, run: list[Incoming], ok: bool, payload: Any) -> None:
        _send([(conn, (req_id, ok, payload)) for r in run for conn, req_id in r.requesters()])

    def _notes(
        self, after: Callable[[], None], requesters: list[tuple[Connection, int]]
    ) -> Callable[[], None]:
        def work() -> None:
            error = run_after(after)
            for conn, req_id in requesters:
                conn.send((STORED, req_id, error))

        return work

    def _memory(self) -> dict[str, Any]:
        free, total = self.worker.memory()
        return {"free_bytes": free, "total_bytes": total}

    def publish_numbers(self, force: bool = False) -> None:
        """Write the worker's numbers to the board (memory at most every 100 ms unless ``force``)."""
        board, w = self.board, self.index
        board.set(w, "queue_depth", len(self.queue))
        now = time.monotonic()
        force = force or self.holdings.changed
        if not force and now - self._memory_at < _MEMORY_EVERY_S:
            return
        self.holdings.changed = False
        self._memory_at = now
        pending = len(self.holdings.pending())
        board.set(w, "reloads_pending", pending)
        if board.state(w) in ("reloading", "ready"):
            board.set_state(w, "reloading" if pending else "ready")
        free, total = self.worker.memory()
        board.set(w, "free_bytes", free)
        board.set(w, "total_bytes", total)
        board.set(w, "held_bytes", self.holdings.held_bytes())
        board.set(w, "datasets", len(self.worker.graphs) + len(self.worker.points))
        board.set(w, "evicted", sum(s == "evicted" for s in self.holdings.status.values()))


def handle_error(worker: Worker, exc: BaseException) -> tuple[bool, Any, None, bool]:
    """A request's failure before or around its handler, as :func:`.ops.handle` answers one."""
    from gpu_core.errors import DeviceError, DeviceMemoryError

    fatal = not isinstance(exc, Exception) or (
        isinstance(exc, DeviceError) and not isinstance(exc, DeviceMemoryError)
    )
    if isinstance(exc, DeviceMemoryError):
        worker.release_cached()
    return False, portable(exc), None, fatal


def _raising(outcome: tuple[bool, Any, Any, bool]) -> tuple[bool, Any, Any, bool]:
    """:func:`.ops.handle`'s outcome, its out-of-room refusal raised (so room is made and it runs again)."""
    from ...errors import InsufficientMemoryError

    ok, payload = outcome[0], outcome[1]
    if not ok and isinstance(payload, InsufficientMemoryError):
        raise payload
    return outcome


def _spec(request: Incoming) -> JobSpec | None:
    if request.op != MST or len(request.args) < 5:
        return None
    spec = request.args[4]
    return spec if isinstance(spec, JobSpec) else None


def _published(spec: Any) -> Any:
    from dataclasses import replace

    return replace(spec, published=True) if isinstance(spec, JobSpec) else spec


def _send(messages: list[tuple[Connection, tuple[Any, ...]]]) -> None:
    """Send each connection its messages in one write."""
    by_conn: dict[int, tuple[Connection, list[tuple[Any, ...]]]] = {}
    for conn, message in messages:
        by_conn.setdefault(id(conn), (conn, []))[1].append(message)
    for conn, batch in by_conn.values():
        conn.send_all(batch)


def _files(after: Callable[[], None], paths: list[str]) -> Callable[[], BaseException | None]:
    """Write the first result file, then give every other path a link of it (a copy where links fail)."""

    def write() -> BaseException | None:
        error = run_after(after)
        if error is not None:
            return error
        for path in paths[1:]:
            error = run_after(_linker(paths[0], path))
            if error is not None:
                return error
        return None

    return write


def _linker(source: str, target: str) -> Callable[[], None]:
    def link() -> None:
        import os
        import shutil
        from pathlib import Path

        try:
            os.link(source, target)
        except FileExistsError:
            return
        except OSError:  # no hard links on this file system: a copy, in place at once
            part = f"{target}.{os.getpid()}.part"
            try:
                shutil.copyfile(source, part)
                os.replace(part, target)
            except BaseException:
                Path(part).unlink(missing_ok=True)
                raise

    return link
