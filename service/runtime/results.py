"""Succeeded jobs' result files: written behind the answer, shared by the cache, computed again when lost.

A succeeded job's result file is written by the worker right *after* its answer (see
:mod:`service.runtime.worker.protocol`, the STORED note), so the answer to ``?wait=`` does not
wait for the file; a request for the result waits for it instead (it is normally there before
the client asks). If the file is lost (it could not be written, the worker died first, a crash
or a power cut, or the size cap removed it, :mod:`.result_files`), the job stays ``succeeded``:
the forest is deterministic, so the next request for the result computes it again from the
stored graph on the graph's worker (in its queue, after the jobs already there) and answers
with it. Only when the graph has been deleted, or its weights changed, meanwhile is that
request a 410 (:class:`~service.errors.ResultGoneError`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from ..errors import (
    GraphNotFoundError,
    PointSetNotFoundError,
    ResultGoneError,
    ServiceUnavailableError,
    WorkerInternalError,
)
from ..storage.records import JobRecord, new_id
from ..storage.store import Store
from .pool.dispatch import QueuedRequest, WorkerCalls, new_future
from .result_files import ResultFiles
from .sharding import ShardedRun
from .supervisor import Supervisor
from .worker.protocol import MST

log = logging.getLogger("service.runtime.jobs")


def task_args(job: JobRecord, result_path: str) -> tuple[Any, ...]:
    """The worker's MST request arguments of a job (its task and parameters when not a plain MST)."""
    args: tuple[Any, ...] = (job.graph_id, result_path)
    if job.task != "mst" or job.params != "{}":
        args += (job.task, json.loads(job.params))
    return args


def _consume_error(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


@dataclass
class RecomputeTask(QueuedRequest):
    """The computation again of a succeeded job whose result file was lost."""

    pipelined: ClassVar[bool] = True

    task_id: str
    graph_id: str
    job: JobRecord
    result_path: str
    done: asyncio.Future[Any] = field(default_factory=new_future)

    async def ask(self, worker: WorkerCalls) -> None:
        await worker.ensure_resident(self.graph_id)
        worker.touch(self.graph_id)
        args = task_args(self.job, self.result_path)
        summary, stored = await worker.request_with_note(MST, *args)
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


class Results:
    """The result files of the succeeded jobs (see the module's docstring).

    ``sharded_run``: the run of a job on its sharded graph, writing to the given path (for a lost
    result of a sharded graph's job).
    """

    def __init__(
        self,
        store: Store,
        supervisor: Supervisor,
        max_result_bytes: int,
        sharded_run: Callable[[JobRecord, str], ShardedRun],
    ) -> None:
        self._store = store
        self._supervisor = supervisor
        self._sharded_run = sharded_run
        #: succeeded jobs whose result file the worker is still writing: the STORED note awaited
        self._storing: dict[str, asyncio.Future[None]] = {}
        #: lost results being computed again, by job id (one computation for concurrent requests)
        self._recomputing: dict[str, asyncio.Future[None]] = {}
        self._coordinators: set[asyncio.Future[None]] = set()
        #: the result files, kept under MST_MAX_RESULT_BYTES (0: no cap)
        self.files = ResultFiles(store, max_result_bytes)

    def store_behind(self, job_id: str, note: asyncio.Future[None]) -> None:
        """Hold requests for the job's result until ``note`` says the worker has written it."""
        if note.done() and note.exception() is None:
            self.files.stored(job_id)
            return
        self._storing[job_id] = note
        note.add_done_callback(functools.partial(self._stored, job_id))

    def _stored(self, job_id: str, note: asyncio.Future[None]) -> None:
        """The worker has written a succeeded job's result file, or failed to (then the job stays
        succeeded, and a request for its result computes it again)."""
        del self._storing[job_id]
        error = note.exception()
        if error is None:
            self.files.stored(job_id)
        else:
            log.error(
                "job %s: the result could not be stored (%s); it is computed again if asked for",
                job_id,
                error,
            )

    async def written(self, job_id: str) -> bool:
        """Wait until the worker has written (or failed to write) the job's result file; whether
        there was anything to wait for."""
        storing = self._storing.get(job_id)
        if storing is None:
            return False
        await asyncio.wait([storing])  # _stored, called first, records a failure
        return True

    async def ensure(self, job: JobRecord) -> Path:
        """A succeeded job's result file, computed again first if it was lost."""
        path = self._store.result_path(job.id)
        if path.exists():
            self.files.used(job.id)
        else:  # lost to a crash, or removed to keep the results under MST_MAX_RESULT_BYTES
            await self._recompute(job)
            self.files.stored(job.id)
        return path

    def shared(self, earlier: JobRecord, now: float) -> JobRecord | None:
        """A new succeeded job sharing ``earlier``'s result file (a hard link), or None when its file
        is gone (or links are not possible here): then the job is computed afresh."""
        job = replace(earlier, id=new_id("j"), created_at=now, started_at=now, finished_at=now, cached=True)
        source, target = self._store.result_path(earlier.id), self._store.result_path(job.id)
        storing = self._storing.get(earlier.id)
        if storing is None:
            try:
                os.link(source, target)
            except OSError:
                return None
            self.files.stored(job.id)
        else:  # the earlier result is being written: link it once it is, and hold requests till then
            linked: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def link(note: asyncio.Future[None]) -> None:
                if note.exception() is None:
                    with contextlib.suppress(OSError):  # a missing result is computed again when asked for
                        os.link(source, target)
                linked.set_result(None)

            storing.add_done_callback(link)
            self.store_behind(job.id, linked)
        return job

    def _coordinate(self, work: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        future = asyncio.ensure_future(work)
        self._coordinators.add(future)
        future.add_done_callback(self._coordinators.discard)
        return future

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
            run = self._sharded_run(job, path)
        except (GraphNotFoundError, PointSetNotFoundError):
            raise ResultGoneError(
                f"the result of job {job.id} was lost and its graph {job.graph_id} has been deleted "
                "since, so it cannot be computed again; upload the graph again and submit a new job."
            ) from None
        summary, stored = await run.run()
        await stored
        check_recomputed(job, summary, path)
