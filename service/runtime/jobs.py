"""Jobs: submission, the run on a worker, cancellation, waiting (their results: :mod:`.results`).

A job is recorded ``queued`` in SQLite before the client hears of it, queued
on the worker that holds its graph, moved to ``running`` when it is handed to
the worker, and to ``succeeded`` or ``failed`` when the worker answers. Each
transition is a guarded update in the store, so a cancel and a dispatch
racing for the same queued job cannot both win.

A job submitted with ``?wait=`` has an id nobody knows until the answer: its
record is kept in memory until it finishes (then written once, finished) or
the wait runs out (then written as it is, before the 202 gives its id out).
That saves two of the three SQLite writes of a job on the hot path. If the
service dies meanwhile, the job is gone with the connection that was waiting
for it; its client saw no id and no answer, so nothing it knew of is lost.

A succeeded job's result file is written by the worker right *after* its
answer; a request for the result waits for it, and computes it again if it was
lost (:mod:`.results`). A job on a sharded graph runs as steps on the shards'
workers (:mod:`.sharding`). New weights for a graph are a task in its worker's
queue too, so the jobs queued before them compute on the old weights and those
queued after them on the new ones. How many jobs an owner may have queued, and
the queues in all: :mod:`.admission`.

One module past 500 lines on purpose: every state change of a job (queued, coalesced,
running, succeeded, failed, re-sent after its worker's death) and the timings its answer reports
(``JobTimes``) act on one ledger of jobs in flight; split, the transitions would live apart from
the state they keep consistent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from ..errors import (
    GraphNotFoundError,
    JobNotCancellableError,
    JobNotFinishedError,
    JobNotFoundError,
    ServiceUnavailableError,
    ShardedGraphError,
    dataset_not_found,
    error_type,
)
from ..metrics import Metrics
from ..storage.records import JobRecord, new_id
from ..storage.store import Store
from ..timing import Steps
from .admission import Admission
from .pool.dispatch import QueuedRequest, WorkerCalls, await_queued, new_future
from .results import Results, task_args
from .sharding import Abandoned, ShardedRun, check_shards, sharded_run
from .supervisor import Supervisor
from .worker.protocol import MST, SERVED, WEIGHTS

log = logging.getLogger("service.runtime.jobs")

#: finished job records kept in memory (a few MB at most), the most recent
FINISHED_KEPT = 4096

_QUEUED = frozenset({"queued"})
_RUNNING = frozenset({"running"})


def _resolve(future: asyncio.Future[JobRecord | None], job: JobRecord | None) -> None:
    if not future.done():
        future.set_result(job)


@dataclass
class JobTimes:
    """Where the time of a job awaited with ``?wait=`` went, for its answer's ``Server-Timing``.

    Marks are ``time.monotonic()`` (system-wide on Linux, so the worker's start compares with
    them); None until reached.
    """

    #: the job queued on its worker (its record made)
    queued: float
    #: the dispatcher handed it to the worker (its task started)
    handed: float | None = None
    #: its worker's reply read by the API process
    replied: float | None = None
    #: when the worker began it and how long it took (its reply's ``SERVED``)
    served: tuple[float, float] | None = None
    #: its finished record written (memory or SQLite) and its waiter woken
    finished: float | None = None
    #: ms it waited in the queue for its dataset's reload after a restart
    reload_ms: float | None = None

    def steps(self, started: float, now: float) -> dict[str, float]:
        """The request's parts in ms, from the route's start to ``now``; they add up to its time.

        ``submit`` (checks, the record made and queued), ``reload`` (a wait for the dataset's
        reload after a restart), ``queue`` (in the worker's queue), ``dispatch`` (handed to the
        worker until it began the job: the transition to running, the pipe and the jobs ahead
        of it there), ``compute`` (the worker's own time: the engine and the forest's copy to
        the host), ``reply`` (its reply's way back and read), ``store`` (the finished record
        written), ``response`` (the route woken, the answer encoded). An unfinished job
        (a 202) has ``wait`` instead of what it did not reach.
        """
        ms: dict[str, float] = {"submit": self.queued - started}
        if self.reload_ms is not None:
            ms["reload"] = self.reload_ms / 1e3
        last = self.queued
        if self.handed is not None:
            ms["queue"] = max(self.handed - self.queued - (self.reload_ms or 0.0) / 1e3, 0.0)
            last = self.handed
        if self.handed is not None and self.replied is not None and self.finished is not None:
            begun, compute_ms = self.served if self.served is not None else (None, 0.0)
            compute = compute_ms / 1e3
            if begun is not None and self.handed <= begun <= self.replied:
                ms["dispatch"] = begun - self.handed
                ms["compute"] = compute
                ms["reply"] = max(self.replied - begun - compute, 0.0)
            else:  # no comparable clock (another host): the round trip less the worker's time
                ms["dispatch"] = max(self.replied - self.handed - compute, 0.0)
                ms["compute"] = compute
            ms["store"] = self.finished - self.replied
            ms["response"] = now - self.finished
        else:
            ms["wait"] = now - last
        return {name: max(seconds, 0.0) * 1e3 for name, seconds in ms.items()}


@dataclass
class JobTask:
    """The queue entry of a job."""

    #: may be handed to the worker behind unfinished tasks (see :mod:`service.runtime.pool.dispatch`)
    pipelined: ClassVar[bool] = True
    jobs: Jobs
    task_id: str
    graph_id: str

    async def run(self, worker: WorkerCalls) -> None:
        await self.jobs._run(self, worker)

    def abandon(self, reason: str) -> None:
        """Stays ``queued`` in the store: the next start of the service queues it again.

        (A job whose id was never given out is not in the store: it ends with the request that
        was waiting for it.)
        """


@dataclass
class WeightsTask(QueuedRequest):
    """New weights for a resident graph, in its worker's queue: the jobs queued before it compute on
    the old weights, those queued after it on the new ones."""

    task_id: str
    graph_id: str
    path: str
    fmt: str
    #: where the worker writes the complete new weights (None: the file sent is that already)
    out: str | None
    #: the version the graph has before this update
    expected: int
    done: asyncio.Future[Any] = field(default_factory=new_future)

    async def ask(self, worker: WorkerCalls) -> dict[str, Any]:
        await worker.ensure_resident(self.graph_id)  # an evicted graph is loaded back first
        worker.touch(self.graph_id)
        return await worker.request(WEIGHTS, self.graph_id, self.path, self.fmt, self.out, self.expected)


def sharded_weights_refused(graph_id: str, shards: int) -> ShardedGraphError:
    """The 409 of a weight update on a sharded graph."""
    return ShardedGraphError(
        f"graph {graph_id} is sharded across {shards} workers, and the weights of a sharded graph "
        "cannot be changed; upload the graph again with the new weights (and delete this one)."
    )


def canonical_params(params: dict[str, Any] | None) -> str:
    """A task's parameters as the JSON text jobs are stored and cached under (sorted, compact)."""
    return json.dumps(params or {}, sort_keys=True, separators=(",", ":"))


class Jobs:
    """The jobs of the service (records in the store, tasks on the workers' queues)."""

    def __init__(
        self,
        store: Store,
        supervisor: Supervisor,
        metrics: Metrics,
        max_result_bytes: int = 0,
        admission: Admission | None = None,
    ) -> None:
        self._store = store
        self._supervisor = supervisor
        self._metrics = metrics
        #: each owner's queued jobs against its quota, and the workers' queues (shared with one-shots)
        self.admission = admission if admission is not None else Admission(supervisor)
        #: the succeeded jobs' result files
        self.results = Results(store, supervisor, max_result_bytes, self._sharded_run)
        #: futures of the requests waiting (``?wait=``) for a job to finish; resolved with its record
        self._waiters: dict[str, set[asyncio.Future[JobRecord | None]]] = {}
        #: records of the jobs whose id is not given out yet (submitted with ?wait=, unfinished)
        self._unpublished: dict[str, JobRecord] = {}
        #: the last jobs that finished, as stored (a finished record never changes): a client's next
        #: request is for its result, and its lookup needs no database read
        self._finished: OrderedDict[str, JobRecord] = OrderedDict()
        #: owner of every stored graph (kept by :class:`service.runtime.catalog.Catalog`): submit checks it
        #: without a database read
        self.graph_owners: dict[str, str] = {}
        #: jobs on sharded graphs not finished yet, by job id (see :mod:`service.runtime.sharding`)
        self._sharded_runs: dict[str, ShardedRun] = {}
        self._coordinators: set[asyncio.Future[None]] = set()
        #: where the time of the jobs awaited with ``?wait=`` goes, by job id (taken by the answer)
        self.times: dict[str, JobTimes] = {}

    def get(self, job_id: str, owner: str) -> JobRecord:
        """The job's record; 404 when there is none or it is another owner's (the same answer)."""
        job = self._get(job_id)
        if job.owner != owner:
            raise JobNotFoundError(f"no job has id {job_id!r}.")
        return job

    def _get(self, job_id: str) -> JobRecord:
        job = self._unpublished.get(job_id) or self._finished.get(job_id) or self._store.get_job(job_id)
        if job is None:
            raise JobNotFoundError(f"no job has id {job_id!r}.")
        return job

    def submit(
        self,
        graph_id: str,
        owner: str,
        *,
        task: str = "mst",
        params: dict[str, Any] | None = None,
        publish: bool = True,
        cache: bool = False,
    ) -> JobRecord:
        """Record a queued job of ``owner`` for one of its stored graphs and queue it on the graph's worker.

        ``task`` and ``params`` (validated by the caller) say what to compute; the job computes on
        the weights the graph has when it is submitted (see :class:`WeightsTask`). With ``cache``,
        an identical earlier job's stored result answers at once (``cached``, with that job's
        ``compute_ms``). ``publish=False``: the caller waits for the job before it gives the id
        out; the record is written when the job finishes, or by :meth:`publish`.
        """
        if self.graph_owners.get(graph_id) != owner:
            raise dataset_not_found(graph_id)
        sharded = self._supervisor.shard_holders(graph_id)
        handle = self._supervisor.holder(graph_id)
        if sharded is not None:
            check_shards(graph_id, sharded)
            version = 0  # a sharded graph's weights are never replaced
        elif handle is None:  # a placed graph always has its record (placed after, forgotten after)
            if self._store.get_graph(graph_id) is None:
                raise dataset_not_found(graph_id)
            raise ServiceUnavailableError(f"graph {graph_id} is not placed on any worker yet; retry shortly.")
        else:
            version = handle.graphs[graph_id].weights_version
        key = canonical_params(params)
        now = time.time()
        if cache:
            hit = self._from_cache(graph_id, version, task, key, now)
            if hit is not None:
                self._metrics.jobs_submitted.inc()
                self._job_finished(hit)
                return hit
        self.admission.admit(owner)  # a cached answer queues nothing, so it is never refused
        job = JobRecord(
            id=new_id("j"), graph_id=graph_id, status="queued", created_at=now,
            task=task, params=key, weights_version=version, owner=owner,
        )  # fmt: skip
        self.admission.started(owner)
        if publish:
            self._store.add_job(job)
        else:
            self._unpublished[job.id] = job
            self.times[job.id] = JobTimes(time.monotonic())
        if handle is not None:
            handle.enqueue(JobTask(self, job.id, graph_id))
        else:
            self._start_sharded(job)
        self._metrics.jobs_submitted.inc()
        return job

    # -- sharded graphs (see service.runtime.sharding) ---------------------------------------

    def _sharded_run(
        self, job: JobRecord, result_path: str, on_start: Callable[[], bool] = lambda: True
    ) -> ShardedRun:
        return sharded_run(self._store, self._supervisor, job, result_path, on_start)

    def _start_sharded(self, job: JobRecord) -> None:
        """Run a queued job on a sharded graph: its steps go to the shards' queues now."""

        def start() -> bool:
            return self._transition(job.id, _QUEUED, status="running", started_at=time.time()) is not None

        run = self._sharded_run(job, str(self._store.result_path(job.id)), start)
        self._sharded_runs[job.id] = run
        self._coordinate(self._run_sharded(job.id, run))

    def _coordinate(self, work: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        future = asyncio.ensure_future(work)
        self._coordinators.add(future)
        future.add_done_callback(self._coordinators.discard)
        return future

    async def _run_sharded(self, job_id: str, run: ShardedRun) -> None:
        try:
            summary, stored = await run.run()
        except Abandoned:
            return  # the service stopped: the job stays as the store has it (as an unsharded one)
        except asyncio.CancelledError:
            return  # cancelled while queued: the cancel finished it
        except Exception as exc:
            if self._store.get_graph(run.graph_id) is None:  # its shards were dropped under it
                self._finish(
                    job_id, _RUNNING, "failed", "graph_deleted", "The job's graph was deleted while it ran."
                )
                return
            log.warning("job %s failed: %s: %s", job_id, error_type(exc), exc)
            self._finish(job_id, _RUNNING, "failed", error_type(exc), str(exc))
            return
        finally:
            self._sharded_runs.pop(job_id, None)
        self.results.store_behind(job_id, stored)
        self._succeeded(job_id, summary)

    def _from_cache(self, graph_id: str, version: int, task: str, key: str, now: float) -> JobRecord | None:
        """A new succeeded job sharing an identical earlier job's result file (a hard link), or None."""
        earlier = self._store.find_cached(graph_id, version, task, key)
        if earlier is None:
            return None
        job = self.results.shared(earlier, now)
        if job is None:
            return None  # its file is gone (or links are not possible here): compute afresh
        self._store.add_job(job)
        self._remember(job)
        return job

    def publish(self, job_id: str) -> JobRecord:
        """Write an unpublished job's record as it is now (its id is about to be given out)."""
        job = self._unpublished.pop(job_id, None)
        if job is None:
            return self._get(job_id)
        self._store.add_job(job)
        return job

    def _transition(self, job_id: str, allowed: frozenset[str], **changes: Any) -> JobRecord | None:
        """A guarded transition (see :meth:`Store.transition`), in memory for an unpublished job.

        An unpublished job that finishes is written then, once, with its final state.
        """
        job = self._unpublished.get(job_id)
        if job is None:
            stored = self._store.transition(job_id, allowed, **changes)
            if stored is not None and stored.finished:
                self._remember(stored)
            return stored
        if job.status not in allowed:
            return None
        job = replace(job, **changes)
        if job.finished:
            del self._unpublished[job_id]
            self._store.add_job(job)
            self._remember(job)
        else:
            self._unpublished[job_id] = job
        return job

    def _remember(self, job: JobRecord) -> None:
        """Keep a finished job's record, as stored, among the last :data:`FINISHED_KEPT`."""
        self._finished[job.id] = job
        if len(self._finished) > FINISHED_KEPT:
            self._finished.popitem(last=False)

    def requeue(self, jobs: list[JobRecord]) -> None:
        """Queue again the jobs a previous run of the service left queued."""
        for job in jobs:
            self.admission.started(job.owner)
            handle = self._supervisor.holder(job.graph_id)
            if handle is not None:
                handle.enqueue(JobTask(self, job.id, job.graph_id))
            elif job.graph_id in self._supervisor.sharded:
                self._start_sharded(job)
            else:
                self._finish(job.id, _QUEUED, "cancelled", "graph_deleted", "The job's graph was deleted.")

    async def wait(self, job_id: str, timeout: float, current: JobRecord | None = None) -> JobRecord:
        """The job once finished, or as it is after ``timeout`` seconds.

        ``current``: the job's record as the caller just read or wrote it (saves reading it again).
        """
        job = current if current is not None else self._get(job_id)
        if job.finished or timeout <= 0:
            return job
        loop = asyncio.get_running_loop()
        done: asyncio.Future[JobRecord | None] = loop.create_future()
        waiters = self._waiters.setdefault(job_id, set())
        waiters.add(done)
        timer = loop.call_later(timeout, _resolve, done, None)
        try:
            finished = await done
        finally:
            timer.cancel()
            waiters.discard(done)
            if not waiters and self._waiters.get(job_id) is waiters:
                del self._waiters[job_id]
        return finished if finished is not None else self._get(job_id)

    def cancel(self, job_id: str, owner: str) -> JobRecord:
        job = self.get(job_id, owner)
        if job.status == "cancelled":
            return job
        if job.status != "queued":
            raise JobNotCancellableError(f"job {job_id} is {job.status}; only queued jobs can be cancelled.")
        # the record first: if it cannot be written (a full disk), the job stays queued as it was
        done = self._finish(job_id, _QUEUED, "cancelled", None, None)
        if done is None:  # it was dispatched a moment ago
            raise JobNotCancellableError(f"job {job_id} has just started; only queued jobs can be cancelled.")
        run = self._sharded_runs.get(job_id)
        if run is not None and not run.started:
            run.withdraw()
        for handle in self._supervisor.workers:
            handle.remove(job_id)
        return done

    def cancel_for_graph(self, graph_id: str) -> None:
        """Cancel the queued jobs of a graph being deleted (a running one finishes).

        Each job's record is written before its task leaves the queue: where a write fails (a full
        disk), the jobs not cancelled yet are still queued, and a second call cancels them.
        """
        for job_id, run in list(self._sharded_runs.items()):
            if run.graph_id == graph_id and not run.started:
                self._finish(job_id, _QUEUED, "cancelled", "graph_deleted", "The job's graph was deleted.")
                run.withdraw()
        handle = self._supervisor.holder(graph_id)
        if handle is None:
            return
        for task in [
            t for t in handle.dispatch.queued() if isinstance(t, JobTask) and t.graph_id == graph_id
        ]:
            self._finish(task.task_id, _QUEUED, "cancelled", "graph_deleted", "The job's graph was deleted.")
            handle.remove(task.task_id)

    async def result_path(
        self, job_id: str, owner: str, steps: Steps | None = None
    ) -> tuple[JobRecord, Path]:
        """A succeeded job of ``owner`` and its result file (once the worker has written it).

        ``steps``: gets ``lookup`` (the record) and ``store`` (the wait for the worker's file, or
        its computation again when it was lost).
        """
        steps = steps or Steps()
        job = self.get(job_id, owner)  # another owner's job: 404 at once, whatever its state
        steps.lap("lookup")
        if await self.results.written(job_id):
            job = self._get(job_id)
        if job.status != "succeeded":
            why = f": {job.error_type}: {job.error_message}" if job.status == "failed" else ""
            raise JobNotFinishedError(
                f"job {job_id} is {job.status}{why}; only succeeded jobs have a result."
            )
        path = await self.results.ensure(job)
        steps.lap("store")
        return job, path

    async def _run(self, task: JobTask, handle: WorkerCalls) -> None:
        times = self.times.get(task.task_id)
        if times is not None:
            times.handed = time.monotonic()
            times.reload_ms = handle.reload_waits.get(task.task_id)
        job = self._transition(task.task_id, _QUEUED, status="running", started_at=time.time())
        if job is None:
            return  # cancelled meanwhile
        args = task_args(job, str(self._store.result_path(job.id)))
        try:
            await handle.ensure_resident(job.graph_id)
            handle.touch(job.graph_id)
            summary, stored = await handle.request_with_note(MST, *args)
            if times is not None:
                times.replied, times.served = time.monotonic(), summary.get(SERVED)
        except Exception as exc:
            log.warning("job %s failed: %s: %s", job.id, error_type(exc), exc)
            self._finish(job.id, _RUNNING, "failed", error_type(exc), str(exc))
            return
        self.results.store_behind(job.id, stored)
        self._succeeded(job.id, summary)

    def _succeeded(self, job_id: str, summary: dict[str, Any]) -> None:
        self._finish(
            job_id,
            _RUNNING,
            "succeeded",
            None,
            None,
            num_edges=int(summary["num_edges"]),
            total_weight=summary.get("total_weight"),
            num_components=int(summary["num_components"]),
            compute_ms=float(summary["compute_ms"]),
            reused_tree=summary.get("reused_tree"),
            reused_index=summary.get("reused_index"),
            coalesced=bool(summary.get("coalesced", False)),
        )

    def _finish(
        self,
        job_id: str,
        allowed: frozenset[str],
        status: str,
        err_type: str | None,
        message: str | None,
        **changes: Any,
    ) -> JobRecord | None:
        job = self._transition(
            job_id,
            allowed,
            status=status,
            finished_at=time.time(),
            error_type=err_type,
            error_message=message,
            **changes,
        )
        if job is not None:
            self._job_finished(job)
            self.admission.finished(job.owner)
        times = self.times.get(job_id)
        if times is not None:
            times.finished = time.monotonic()
        for waiter in self._waiters.pop(job_id, ()):
            _resolve(waiter, job)
        return job

    async def update_weights(self, graph_id: str, path: Path, fmt: str, partial: bool) -> dict[str, Any]:
        """Queue new weights for a graph behind its worker's queued jobs and wait until they are in.

        Returns the worker's summary (``weights_version``, ``weight_dtype``, ``device_bytes``) and
        leaves the complete new weights as an ``.npy`` at ``summary["weights_file"]``, fsynced. The
        version counts from the moment of queueing: jobs submitted from now on compute on it.
        """
        handle = self._supervisor.holder(graph_id)
        if handle is None and graph_id in self._supervisor.sharded:
            raise sharded_weights_refused(graph_id, self._supervisor.sharded[graph_id])
        if handle is None:
            if self._store.get_graph(graph_id) is None:
                raise GraphNotFoundError(f"no graph has id {graph_id!r}.")
            raise ServiceUnavailableError(f"graph {graph_id} is not placed on any worker yet; retry shortly.")
        self.admission.check_queue()
        residency = handle.graphs[graph_id]
        expected = residency.weights_version
        residency.weights_version += 1
        out = None if fmt == "npy" and not partial else self._store.tmp_path(".npy")
        task = WeightsTask(new_id("w"), graph_id, str(path), fmt, None if out is None else str(out), expected)
        try:
            summary: dict[str, Any] = await await_queued(handle.dispatch, task)
        except BaseException:
            if out is not None:
                out.unlink(missing_ok=True)
            # A refused update is a version without a change: jobs submitted since it was queued
            # carry its number, so the record does too (the weights stay those of `expected`).
            self._store.set_graph_weights(graph_id, expected + 1)
            raise
        summary["weights_file"] = str(path if out is None else out)
        return summary

    def _job_finished(self, job: JobRecord) -> None:
        seconds = None if job.finished_at is None else job.finished_at - job.created_at
        self._metrics.job_finished(job.status, seconds, job.compute_ms)
