"""MST jobs: submission, the run on a worker, cancellation, waiting, results; and one-shot computations.

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
answer (see :mod:`service.runtime.worker`), so the answer to ``?wait=`` does not wait
for the file; a request for the result waits for it instead (it is normally
there before the client asks). If the file is lost (it could not be written,
the worker died first, a crash or a power cut), the job stays ``succeeded``:
the forest is deterministic, so the next request for the result computes it
again from the stored graph on the graph's worker (in its queue, after the
jobs already there) and answers with it. Only when the graph has been deleted
meanwhile is that request a 410 (:class:`ResultGoneError`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from ..errors import (
    GraphNotFoundError,
    JobNotCancellableError,
    JobNotFinishedError,
    JobNotFoundError,
    PointSetNotFoundError,
    QueueFullError,
    QuotaExceededError,
    ResultGoneError,
    ServiceUnavailableError,
    ShardedGraphError,
    WorkerInternalError,
    error_type,
)
from ..metrics import Metrics
from ..storage.records import JobRecord, new_id
from ..storage.store import Store
from . import worker as worker_module
from .result_files import ResultFiles
from .sharding import Abandoned, ShardedRun
from .supervisor import Supervisor, WorkerHandle, settle_from

log = logging.getLogger("service.runtime.jobs")

_QUEUED = frozenset({"queued"})
_RUNNING = frozenset({"running"})


def _task_args(job: JobRecord, result_path: str) -> tuple[Any, ...]:
    """The worker's MST request arguments of a job (its task and parameters when not a plain MST)."""
    args: tuple[Any, ...] = (job.graph_id, result_path)
    if job.task != "mst" or job.params != "{}":
        args += (job.task, json.loads(job.params))
    return args


def _consume_error(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


def _resolve(future: asyncio.Future[JobRecord | None], job: JobRecord | None) -> None:
    if not future.done():
        future.set_result(job)


@dataclass
class JobTask:
    """The queue entry of a job."""

    #: may be handed to the worker behind unfinished tasks (see :mod:`service.runtime.supervisor`)
    pipelined: ClassVar[bool] = True
    jobs: Jobs
    task_id: str
    graph_id: str

    async def run(self, worker: WorkerHandle) -> None:
        await self.jobs._run(self, worker)

    def abandon(self, reason: str) -> None:
        """Stays ``queued`` in the store: the next start of the service queues it again.

        (A job whose id was never given out is not in the store: it ends with the request that
        was waiting for it.)
        """


class _WorkerRequest:
    """A queued request whose caller awaits ``done``: its outcome, or the reason it never ran.

    Subclasses say what to ask the worker in :meth:`ask`; ``run`` settles ``done`` with the
    answer or the error (a task that never runs is abandoned with a 503).
    """

    task_id: str
    done: asyncio.Future[Any]

    async def ask(self, worker: WorkerHandle) -> Any:
        raise NotImplementedError

    async def run(self, worker: WorkerHandle) -> None:
        await settle_from(self.done, self.ask(worker))

    def abandon(self, reason: str) -> None:
        if not self.done.done():
            self.done.set_exception(ServiceUnavailableError(reason))


def _future() -> asyncio.Future[Any]:
    return asyncio.get_running_loop().create_future()


@dataclass
class RecomputeTask(_WorkerRequest):
    """The computation again of a succeeded job whose result file was lost."""

    pipelined: ClassVar[bool] = True

    task_id: str
    graph_id: str
    job: JobRecord
    result_path: str
    done: asyncio.Future[Any] = field(default_factory=_future)

    async def ask(self, worker: WorkerHandle) -> None:
        await worker.ensure_resident(self.graph_id)
        worker.touch(self.graph_id)
        args = _task_args(self.job, self.result_path)
        summary, stored = await worker.request_with_note(worker_module.MST, *args)
        await stored
        check_recomputed(self.job, summary, self.result_path)


def check_recomputed(job: JobRecord, summary: dict[str, Any], result_path: str) -> None:
    """Refuse a lost result computed again that differs from the job's record (and remove its file)."""
    differs = [
        key
        for key in ("num_edges", "total_weight", "num_components")
        if key in summary and getattr(job, key) is not None and summary[key] != getattr(job, key)
    ]
    if differs:  # the computation is deterministic: this is a bug, never serve a different answer
        Path(result_path).unlink(missing_ok=True)
        raise WorkerInternalError(
            f"job {job.id}: computing the lost result again gave a different answer "
            f"({', '.join(f'{k} {summary[k]} instead of {getattr(job, k)}' for k in differs)})."
        )


@dataclass
class OneShotTask(_WorkerRequest):
    """A one-shot computation (POST /v1/mst) waiting for its turn on a worker."""

    pipelined: ClassVar[bool] = True
    #: handed to the worker beyond MST_DISPATCH_DEPTH (see supervisor.BATCHED_DEPTH)
    batched: ClassVar[bool] = True

    task_id: str
    #: the upload's spool file
    path: str
    fmt: str
    result_path: str
    done: asyncio.Future[Any] = field(default_factory=_future)

    async def ask(self, worker: WorkerHandle) -> dict[str, Any]:
        return await worker.request(worker_module.ONESHOT, self.path, self.fmt, None, self.result_path)


@dataclass
class WeightsTask(_WorkerRequest):
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
    done: asyncio.Future[Any] = field(default_factory=_future)

    async def ask(self, worker: WorkerHandle) -> dict[str, Any]:
        await worker.ensure_resident(self.graph_id)  # an evicted graph is loaded back first
        worker.touch(self.graph_id)
        return await worker.request(
            worker_module.WEIGHTS, self.graph_id, self.path, self.fmt, self.out, self.expected
        )


async def _queued(handle: WorkerHandle, task: _WorkerRequest) -> Any:
    """Queue ``task`` on the worker and await its outcome; a caller that gives up takes it out of
    the queue (or, once it runs, lets it finish unheard)."""
    handle.enqueue(task)
    try:
        return await task.done
    except BaseException:
        if handle.remove(task.task_id) is None and not task.done.done():
            task.done.cancel()
        raise


def sharded_weights_refused(graph_id: str, shards: int) -> ShardedGraphError:
    """The 409 of a weight update on a sharded graph."""
    return ShardedGraphError(
        f"graph {graph_id} is sharded across {shards} workers, and the weights of a sharded graph "
        "cannot be changed; upload the graph again with the new weights (and delete this one)."
    )


def _not_found(dataset_id: str) -> GraphNotFoundError | PointSetNotFoundError:
    """The 404 of a graph or a point set (their ids start ``g_`` and ``p_``)."""
    if dataset_id.startswith("p_"):
        return PointSetNotFoundError(f"no point set has id {dataset_id!r}.")
    return GraphNotFoundError(f"no graph has id {dataset_id!r}.")


def canonical_params(params: dict[str, Any] | None) -> str:
    """A task's parameters as the JSON text jobs are stored and cached under (sorted, compact)."""
    return json.dumps(params or {}, sort_keys=True, separators=(",", ":"))


class Jobs:
    """The jobs of the service (records in the store, tasks on the workers' queues)."""

    def __init__(
        self, store: Store, supervisor: Supervisor, metrics: Metrics, max_result_bytes: int = 0
    ) -> None:
        self._store = store
        self._supervisor = supervisor
        self._metrics = metrics
        #: futures of the requests waiting (``?wait=``) for a job to finish; resolved with its record
        self._waiters: dict[str, set[asyncio.Future[JobRecord | None]]] = {}
        #: succeeded jobs whose result file the worker is still writing: the STORED note awaited
        self._storing: dict[str, asyncio.Future[None]] = {}
        #: records of the jobs whose id is not given out yet (submitted with ?wait=, unfinished)
        self._unpublished: dict[str, JobRecord] = {}
        #: owner of every stored graph (kept by :class:`service.runtime.catalog.Catalog`): submit checks it
        #: without a database read
        self.graph_owners: dict[str, str] = {}
        #: queued and running jobs (one-shot computations included) per owner, for MST_QUOTA_QUEUED_JOBS
        self._active: Counter[str] = Counter()
        #: lost results being computed again, by job id (one computation for concurrent requests)
        self._recomputing: dict[str, asyncio.Future[None]] = {}
        #: jobs on sharded graphs not finished yet, by job id (see :mod:`service.runtime.sharding`)
        self._sharded_runs: dict[str, ShardedRun] = {}
        self._coordinators: set[asyncio.Future[None]] = set()
        #: the result files, kept under MST_MAX_RESULT_BYTES (0: no cap)
        self.result_files = ResultFiles(store, max_result_bytes)
        #: milliseconds a job awaited with ``?wait=`` spent waiting for its dataset's reload after a
        #: restart, by job id (its answer's ``Server-Timing`` says ``reload``; taken by the answer)
        self.reload_waited: dict[str, float] = {}

    def get(self, job_id: str, owner: str) -> JobRecord:
        """The job's record; 404 when there is none or it is another owner's (the same answer)."""
        job = self._get(job_id)
        if job.owner != owner:
            raise JobNotFoundError(f"no job has id {job_id!r}.")
        return job

    def _get(self, job_id: str) -> JobRecord:
        job = self._unpublished.get(job_id) or self._store.get_job(job_id)
        if job is None:
            raise JobNotFoundError(f"no job has id {job_id!r}.")
        return job

    def admit(self, owner: str) -> None:
        """Refuse one more job of ``owner``: over MST_QUOTA_QUEUED_JOBS (429) or MST_MAX_QUEUED_JOBS (503)."""
        settings = self._supervisor.settings
        quota = settings.quota_queued_jobs
        if quota and self._active[owner] >= quota:
            active = self._active[owner]
            raise QuotaExceededError(
                f"this API key has {active} queued or running job(s), its quota MST_QUOTA_QUEUED_JOBS "
                f"is {quota}; retry when one has finished.",
                quota="MST_QUOTA_QUEUED_JOBS",
                limit=quota,
                used=active,
            )
        self._check_queue()

    def _check_queue(self) -> None:
        """Refuse one more task on the workers' queues over MST_MAX_QUEUED_JOBS (503, Retry-After)."""
        queued = sum(w.queue_depth for w in self._supervisor.workers)
        if queued >= self._supervisor.settings.max_queued_jobs:
            raise QueueFullError(
                f"{queued} jobs are queued, the most the service takes (MST_MAX_QUEUED_JOBS); "
                "retry after the Retry-After seconds."
            )

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
            raise _not_found(graph_id)
        sharded = self._supervisor.shard_holders(graph_id)
        handle = self._supervisor.holder(graph_id)
        if sharded is not None:
            self._check_shards(graph_id, sharded)
            version = 0  # a sharded graph's weights are never replaced
        elif handle is None:  # a placed graph always has its record (placed after, forgotten after)
            if self._store.get_graph(graph_id) is None:
                raise _not_found(graph_id)
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
        self.admit(owner)  # a cached answer queues nothing, so it is never refused
        job = JobRecord(
            id=new_id("j"), graph_id=graph_id, status="queued", created_at=now,
            task=task, params=key, weights_version=version, owner=owner,
        )  # fmt: skip
        self._active[owner] += 1
        if publish:
            self._store.add_job(job)
        else:
            self._unpublished[job.id] = job
        if handle is not None:
            handle.enqueue(JobTask(self, job.id, graph_id))
        else:
            self._start_sharded(job)
        self._metrics.jobs_submitted.inc()
        return job

    # -- sharded graphs (see service.runtime.sharding) ---------------------------------------

    def _check_shards(self, graph_id: str, shards: list[tuple[str, WorkerHandle | None]]) -> None:
        if any(handle is None for _, handle in shards):
            raise ServiceUnavailableError(
                f"a shard of graph {graph_id} is not placed on any worker yet; retry shortly."
            )

    def _sharded_run(self, job: JobRecord, result_path: str, on_start: Callable[[], bool]) -> ShardedRun:
        record = self._store.get_graph(job.graph_id)
        shards = self._supervisor.shard_holders(job.graph_id)
        if record is None or shards is None:
            raise _not_found(job.graph_id)
        self._check_shards(job.graph_id, shards)
        return ShardedRun(
            self._supervisor,
            job.id,
            job.graph_id,
            str(self._store.graph_path(job.graph_id)),
            record.num_vertices,
            record.num_edges,
            [(key, handle) for key, handle in shards if handle is not None],
            job.task,
            json.loads(job.params),
            result_path,
            lambda: self._store.tmp_path(".npz"),
            on_start,
        )

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
        self._store_behind(job_id, stored)
        self._succeeded(job_id, summary)

    def _from_cache(self, graph_id: str, version: int, task: str, key: str, now: float) -> JobRecord | None:
        """A new succeeded job sharing an identical earlier job's result file (a hard link), or None."""
        earlier = self._store.find_cached(graph_id, version, task, key)
        if earlier is None:
            return None
        job = replace(earlier, id=new_id("j"), created_at=now, started_at=now, finished_at=now, cached=True)
        source, target = self._store.result_path(earlier.id), self._store.result_path(job.id)
        storing = self._storing.get(earlier.id)
        if storing is None:
            try:
                os.link(source, target)
            except OSError:
                return None  # its file is gone (or links are not possible here): compute afresh
            self.result_files.stored(job.id)
        else:  # the earlier result is being written: link it once it is, and hold requests till then
            linked: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def link(note: asyncio.Future[None]) -> None:
                if note.exception() is None:
                    with contextlib.suppress(OSError):  # a missing result is computed again when asked for
                        os.link(source, target)
                linked.set_result(None)

            storing.add_done_callback(link)
            self._store_behind(job.id, linked)
        self._store.add_job(job)
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
            return self._store.transition(job_id, allowed, **changes)
        if job.status not in allowed:
            return None
        job = replace(job, **changes)
        if job.finished:
            del self._unpublished[job_id]
            self._store.add_job(job)
        else:
            self._unpublished[job_id] = job
        return job

    def requeue(self, jobs: list[JobRecord]) -> None:
        """Queue again the jobs a previous run of the service left queued."""
        for job in jobs:
            self._active[job.owner] += 1
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
        run = self._sharded_runs.get(job_id)
        if run is not None and not run.started:
            run.withdraw()
        for handle in self._supervisor.workers:
            handle.remove(job_id)
        done = self._finish(job_id, _QUEUED, "cancelled", None, None)
        if done is None:  # it was dispatched a moment ago
            raise JobNotCancellableError(f"job {job_id} has just started; only queued jobs can be cancelled.")
        return done

    def cancel_for_graph(self, graph_id: str) -> None:
        """Cancel the queued jobs of a graph being deleted (a running one finishes)."""
        for job_id, run in list(self._sharded_runs.items()):
            if run.graph_id == graph_id and not run.started:
                run.withdraw()
                self._finish(job_id, _QUEUED, "cancelled", "graph_deleted", "The job's graph was deleted.")
        handle = self._supervisor.holder(graph_id)
        if handle is None:
            return
        for task in [t for t in handle._tasks if isinstance(t, JobTask) and t.graph_id == graph_id]:
            handle.remove(task.task_id)
            self._finish(task.task_id, _QUEUED, "cancelled", "graph_deleted", "The job's graph was deleted.")

    async def result_path(self, job_id: str, owner: str) -> tuple[JobRecord, Path]:
        """A succeeded job of ``owner`` and its result file (once the worker has written it)."""
        job = self.get(job_id, owner)  # another owner's job: 404 at once, whatever its state
        storing = self._storing.get(job_id)
        if storing is not None:
            await asyncio.wait([storing])  # _stored, called first, records a failure
            job = self._get(job_id)
        if job.status != "succeeded":
            why = f": {job.error_type}: {job.error_message}" if job.status == "failed" else ""
            raise JobNotFinishedError(
                f"job {job_id} is {job.status}{why}; only succeeded jobs have a result."
            )
        path = self._store.result_path(job_id)
        if path.exists():
            self.result_files.used(job_id)
        else:  # lost to a crash, or removed to keep the results under MST_MAX_RESULT_BYTES
            await self._recompute(job)
            self.result_files.stored(job_id)
        return job, path

    async def _recompute(self, job: JobRecord) -> None:
        """Compute a succeeded job's lost result file again, from its stored graph."""
        pending = self._recomputing.get(job.id)
        if pending is None and job.graph_id in self._supervisor.sharded:
            log.warning("job %s: the result file is missing; computing it again", job.id)
            pending = self._coordinate(self._recompute_sharded(job))
            self._recomputing[job.id] = pending
            pending.add_done_callback(lambda _: self._recomputing.pop(job.id, None))
            pending.add_done_callback(_consume_error)
        if pending is None:
            handle = self._supervisor.holder(job.graph_id)
            residency = None if handle is None else handle.graphs.get(job.graph_id)
            if residency is not None and residency.weights_version != job.weights_version:
                raise ResultGoneError(
                    f"the result of job {job.id} was lost and the weights of graph {job.graph_id} have "
                    f"changed since (version {job.weights_version}, now {residency.weights_version}), so "
                    "it cannot be computed again; submit a new job."
                )
            if handle is None or self._store.get_graph(job.graph_id) is None:
                raise ResultGoneError(
                    f"the result of job {job.id} was lost and its graph {job.graph_id} has been deleted "
                    "since, so it cannot be computed again; upload the graph again and submit a new job."
                )
            log.warning("job %s: the result file is missing; computing it again", job.id)
            task = RecomputeTask(new_id("r"), job.graph_id, job, str(self._store.result_path(job.id)))
            handle.enqueue(task)
            pending = task.done
            self._recomputing[job.id] = pending
            pending.add_done_callback(lambda _: self._recomputing.pop(job.id, None))
            pending.add_done_callback(_consume_error)
        try:
            await asyncio.shield(pending)
        except ResultGoneError:
            raise
        except Exception as exc:
            raise ServiceUnavailableError(
                f"the result of job {job.id} was lost and computing it again failed ({exc}); retry shortly."
            ) from None

    async def _recompute_sharded(self, job: JobRecord) -> None:
        path = str(self._store.result_path(job.id))
        try:
            run = self._sharded_run(job, path, lambda: True)
        except (GraphNotFoundError, PointSetNotFoundError):
            raise ResultGoneError(
                f"the result of job {job.id} was lost and its graph {job.graph_id} has been deleted "
                "since, so it cannot be computed again; upload the graph again and submit a new job."
            ) from None
        summary, stored = await run.run()
        await stored
        check_recomputed(job, summary, path)

    async def _run(self, task: JobTask, handle: WorkerHandle) -> None:
        job = self._transition(task.task_id, _QUEUED, status="running", started_at=time.time())
        if job is None:
            return  # cancelled meanwhile
        args = _task_args(job, str(self._store.result_path(job.id)))
        waited = handle.reload_waits.get(task.task_id)
        if waited is not None and job.id in self._waiters:
            self.reload_waited[job.id] = waited
        try:
            await handle.ensure_resident(job.graph_id)
            handle.touch(job.graph_id)
            summary, stored = await handle.request_with_note(worker_module.MST, *args)
        except Exception as exc:
            log.warning("job %s failed: %s: %s", job.id, error_type(exc), exc)
            self._finish(job.id, _RUNNING, "failed", error_type(exc), str(exc))
            return
        self._store_behind(job.id, stored)
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

    def _store_behind(self, job_id: str, note: asyncio.Future[None]) -> None:
        """Hold requests for the job's result until ``note`` says the worker has written it."""
        if note.done() and note.exception() is None:
            self.result_files.stored(job_id)
            return
        self._storing[job_id] = note
        note.add_done_callback(functools.partial(self._stored, job_id))

    def _stored(self, job_id: str, note: asyncio.Future[None]) -> None:
        """The worker has written a succeeded job's result file, or failed to (then the job stays
        succeeded, and a request for its result computes it again)."""
        del self._storing[job_id]
        error = note.exception()
        if error is None:
            self.result_files.stored(job_id)
        else:
            log.error(
                "job %s: the result could not be stored (%s); it is computed again if asked for",
                job_id,
                error,
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
            self._release(job.owner)
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
        self._check_queue()
        residency = handle.graphs[graph_id]
        expected = residency.weights_version
        residency.weights_version += 1
        out = None if fmt == "npy" and not partial else self._store.tmp_path(".npy")
        task = WeightsTask(new_id("w"), graph_id, str(path), fmt, None if out is None else str(out), expected)
        try:
            summary: dict[str, Any] = await _queued(handle, task)
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

    def _release(self, owner: str) -> None:
        """One queued or running job of ``owner`` has finished."""
        self._active[owner] -= 1
        if self._active[owner] <= 0:
            del self._active[owner]

    async def one_shot(
        self, path: Path, fmt: str, estimate: int, owner: str
    ) -> tuple[dict[str, Any], Path | dict[str, Any]]:
        """Compute the forest of an uploaded file without storing anything; (summary, the result:
        its arrays ``edge_ids`` and ``weights`` when small, see ``MST_ONESHOT_INLINE_BYTES``, else
        its file, which the caller removes)."""
        self.admit(owner)
        self._active[owner] += 1
        try:
            return await self._one_shot(path, fmt, estimate)
        finally:
            self._release(owner)

    async def _one_shot(
        self, path: Path, fmt: str, estimate: int
    ) -> tuple[dict[str, Any], Path | dict[str, Any]]:
        handle = self._supervisor.place(estimate)
        result = self._store.tmp_path(".npz")
        task = OneShotTask(new_id("o"), str(path), fmt, str(result))
        try:
            summary: dict[str, Any] = await _queued(handle, task)
        except BaseException:
            result.unlink(missing_ok=True)
            raise
        self._metrics.oneshot_batch_members.observe(summary.pop(worker_module.BATCH_MEMBERS, 1))
        arrays: dict[str, Any] | None = summary.pop(worker_module.INLINE, None)
        return summary, result if arrays is None else arrays
