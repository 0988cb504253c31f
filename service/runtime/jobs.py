"""Jobs as an API process handles them: submitted, awaited, cancelled, their results found.

A job has one record, in the store, with one writer per transition (:mod:`service.storage.job_table`):
this process records it ``queued`` before its id goes out and may cancel it while it is; the
worker holding its dataset starts it, computes it and writes its end before it answers. The job
is sent to that worker at once (its queue is the worker's), and a submission is acknowledged
only once its request is in the worker's socket, so nothing submitted later, through any API
process, is taken before it (:mod:`service.runtime.worker.protocol`).

A job submitted with ``?wait=`` has an id nobody knows until the answer: the worker inserts its
record when it ends (one write), and if the wait runs out first this process records it
``queued`` (or ``running``: the board says whether its worker runs it now) and tells the worker,
before the 202 gives its id out (:meth:`Jobs.publish`). If this process dies meanwhile, the
job's client saw no id and no answer, so nothing it knew of is lost.

Waiting for a job another API process submitted reads the store (:meth:`Jobs.wait`); a result
file that process's worker is still writing is awaited through the worker (``AWAIT_STORED``);
a lost one is computed again (:mod:`.results`). A job on a sharded graph is coordinated by the
process it was submitted through (:mod:`.sharding`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import (
    JobNotCancellableError,
    JobNotFinishedError,
    JobNotFoundError,
    ServiceError,
    WorkerLostError,
    dataset_not_found,
)
from ..metrics import Metrics
from ..storage.records import GraphRecord, JobRecord, new_id
from ..storage.store import Store
from ..timing import Steps
from .admission import Admission
from .links.fleet import Fleet
from .links.link import WorkerLink
from .metric_checks import refuse_metric
from .results import Results
from .sharding import Coordinator
from .worker.protocol import JOB, MST, PUBLISHED, SERVED, JobSpec

log = logging.getLogger("service.runtime.jobs")

_QUEUED = frozenset({"queued"})
#: the longest pause between two reads of the store while waiting for another process's job
_POLL_MAX_S = 0.05


def canonical_params(params: dict[str, Any] | None) -> str:
    """A task's parameters as the JSON text jobs are stored and cached under (sorted, compact)."""
    return json.dumps(params or {}, sort_keys=True, separators=(",", ":"))


@dataclass
class Submitted:
    """A job this process just submitted: its record as known, and its worker's answer to come."""

    job: JobRecord
    #: the worker's reply (its final record under ``JOB``), or the coordinator's; None: a cached answer
    reply: asyncio.Future[Any] | None = None
    #: the STORED note of its result file
    note: asyncio.Future[None] | None = None
    link: WorkerLink | None = None
    #: time.monotonic() marks for Server-Timing: the request written, the reply read
    sent: float = 0.0
    replied: float | None = None

    def steps(self, started: float, now: float) -> dict[str, float]:
        """The request's parts in ms, from the route's start: ``submit`` (checks, the request made
        and written), then ``queue`` (in the worker's queue until it began), ``compute`` (the worker's
        own time: the engine, the forest's copy to the host, the record), ``reply`` (its way back)
        and ``response``; an unfinished job (a 202) has ``wait`` instead."""
        ms: dict[str, float] = {"submit": self.sent - started}
        served = None
        if self.reply is not None and self.reply.done() and not self.reply.exception():
            answer = self.reply.result()
            served = answer.get(SERVED) if isinstance(answer, dict) else None
        if self.replied is not None and served is not None and self.sent <= served[0] <= self.replied:
            begun, compute_ms = served
            ms["queue"] = begun - self.sent
            ms["compute"] = compute_ms / 1e3
            ms["reply"] = max(self.replied - begun - compute_ms / 1e3, 0.0)
            ms["response"] = now - self.replied
        elif self.replied is not None:
            ms["worker"] = self.replied - self.sent
            ms["response"] = now - self.replied
        else:
            ms["wait"] = now - self.sent
        return {name: max(seconds, 0.0) * 1e3 for name, seconds in ms.items()}


class Jobs:
    """The jobs of the service as this API process handles them (see the module's docstring)."""

    def __init__(self, store: Store, fleet: Fleet, metrics: Metrics, admission: Admission) -> None:
        self._store = store
        self._fleet = fleet
        self._metrics = metrics
        self.admission = admission
        self.results = Results(store, fleet)
        self.sharded = Coordinator(store, fleet, admission, self.results, fleet.slot)

    def get(self, job_id: str, owner: str) -> JobRecord:
        """The job's record; 404 when there is none or it is another owner's (the same answer)."""
        job = self._store.get_job(job_id)
        if job is None or job.owner != owner:
            raise JobNotFoundError(f"no job has id {job_id!r}.")
        return job

    async def submit(
        self,
        graph_id: str,
        owner: str,
        *,
        task: str = "mst",
        params: dict[str, Any] | None = None,
        publish: bool = True,
        cache: bool = False,
    ) -> Submitted:
        """Submit a job of ``owner`` on one of its datasets: recorded (``publish``) and sent to its
        worker; with ``cache``, an identical earlier job's result answers at once (``cached``)."""
        record = self._store.get_graph(graph_id, owner)
        if record is None:
            raise dataset_not_found(graph_id)
        if record.kind == "points":  # what its points refuse (a zero row for cosine...): 422 now
            refuse_metric(record, params or {})
        key = canonical_params(params)
        now = time.time()
        if cache:
            hit = self._from_cache(record, task, key, now)
            if hit is not None:
                self._metrics.jobs_submitted.inc()
                self._metrics.job_finished(hit.status, 0.0, hit.compute_ms)
                return Submitted(hit)
        job = JobRecord(
            id=new_id("j"), graph_id=graph_id, status="queued", created_at=now, task=task, params=key,
            weights_version=record.weights_version, owner=owner,
            coordinator=self._fleet.slot if record.shards > 1 else None,
        )  # fmt: skip
        token = self.admission.admit(owner, job.id, holder="job")
        self._metrics.jobs_submitted.inc()
        try:
            if record.shards > 1:
                if publish:
                    self._store.add_job(job)
                return Submitted(job, self.sharded.start(job, record), sent=time.monotonic())
            return await self._send(job, record, publish, token)
        except BaseException:
            if token:
                self.admission.release(job.id)
            raise

    async def _send(self, job: JobRecord, record: GraphRecord, publish: bool, token: bool) -> Submitted:
        placements = self._store.placements_of(job.graph_id)
        if not placements:
            raise dataset_not_found(job.graph_id)
        link = self._fleet.link(placements[0].worker)
        sent = time.monotonic()
        job = replace(job, stamp=sent)  # its place in the worker's queue, kept by a worker taking it back
        if publish:
            self._store.add_job(job)
        spec = JobSpec(job.id, job.graph_id, job.created_at, job.task, job.params, job.owner, publish, token)
        result = str(self._store.result_path(job.id))
        args = (job.graph_id, result, job.task, json.loads(job.params), spec)
        reply, note = link.send(MST, *args, note=True, stamp=sent)
        submitted = Submitted(job, reply, note, link, sent=sent)
        reply.add_done_callback(lambda _: self._replied(submitted))
        if publish:
            await link.written()  # acknowledged only once its place in the worker's queue is taken
        return submitted

    def _replied(self, submitted: Submitted) -> None:
        submitted.replied = time.monotonic()
        reply = submitted.reply
        assert reply is not None
        if reply.cancelled():
            return
        error = reply.exception()
        if isinstance(error, WorkerLostError):  # its worker died running it: no record came
            self._record_failure(submitted, error)
        if error is not None:  # (else: the service stops, and its worker finishes it; or it never
            return  # reached a worker, and stays queued in the store for the next)
        answer = reply.result()
        job = answer.get(JOB) if isinstance(answer, dict) else None
        if isinstance(job, JobRecord):
            submitted.job = job
            if job.status == "succeeded" and submitted.note is not None:
                self.results.storing(job.id, submitted.note)
            seconds = None if job.finished_at is None else job.finished_at - job.created_at
            self._metrics.job_finished(job.status, seconds, job.compute_ms)

    def _from_cache(self, record: GraphRecord, task: str, key: str, now: float) -> JobRecord | None:
        """A new succeeded job sharing an identical earlier job's result file (a hard link), or None."""
        earlier = self._store.find_cached(record.id, record.weights_version, task, key)
        if earlier is None:
            return None
        job = replace(earlier, id=new_id("j"), created_at=now, started_at=now, finished_at=now, cached=True)
        if not self.results.share(earlier.id, job.id):
            return None  # its file is gone (or links are not possible here): compute afresh
        self._store.add_job(job)
        return job

    async def wait(self, submitted: Submitted, timeout: float) -> JobRecord:
        """A job this process submitted, once finished or as it is after ``timeout`` seconds."""
        reply = submitted.reply
        if reply is None or submitted.job.finished or timeout <= 0:
            return submitted.job
        try:
            answer = await asyncio.wait_for(asyncio.shield(reply), timeout)
        except TimeoutError:
            return submitted.job
        except WorkerLostError:  # its failure is recorded (_replied): the job as it ended
            return submitted.job
        job = answer.get(JOB) if isinstance(answer, dict) else answer
        if isinstance(job, JobRecord):
            submitted.job = job
        return submitted.job

    def _record_failure(self, submitted: Submitted, exc: ServiceError) -> None:
        """A job whose worker died running it (no record came): recorded failed, unless it ended
        otherwise meanwhile."""
        code = exc.code
        job = replace(
            submitted.job, status="failed", finished_at=time.time(), error_type=code, error_message=str(exc)
        )
        try:
            stored = self._store.finish_job(job, token=True)
        except Exception:  # the store cannot take it now (a full disk): the job stays as it is
            log.exception("job %s: its failure could not be recorded", job.id)
            return
        submitted.job = stored if stored is not None else (self._store.get_job(job.id) or job)
        self._metrics.job_finished(submitted.job.status, None, None)

    async def publish(self, submitted: Submitted) -> JobRecord:
        """Record a job submitted with ``?wait=`` whose wait ran out (its id is about to go out)."""
        job = submitted.job
        link = submitted.link
        if submitted.reply is not None and submitted.reply.done():  # it ended just now
            job = await self.wait(submitted, 1.0)
        if job.finished:
            return job
        if link is not None:
            running = any(r.future is submitted.reply for r in self._running(link))
            if running:
                job = replace(job, status="running", started_at=time.time())
        stored = self._store.publish_job(job)
        if link is not None and stored.status == "queued":
            link.send(PUBLISHED, job.id)
        submitted.job = stored
        return stored

    def _running(self, link: WorkerLink) -> list[Any]:
        ids = set(self._fleet.board.running(link.index, self._fleet.slot))
        return [r for i, r in link.pending.items() if i in ids]

    async def wait_stored(self, job_id: str, owner: str, timeout: float) -> JobRecord:
        """A job (submitted through any API process) once finished, or as it is after ``timeout``
        seconds: the store, read again and again (every few ms, up to 50 ms apart)."""
        job = self.get(job_id, owner)
        deadline = time.monotonic() + timeout
        pause = 0.002
        while not job.finished and time.monotonic() < deadline:
            await asyncio.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))
            pause = min(pause * 1.5, _POLL_MAX_S)
            job = self.get(job_id, owner)
        return job

    async def result_path(
        self, job_id: str, owner: str, steps: Steps | None = None, known: JobRecord | None = None
    ) -> tuple[JobRecord, Path]:
        """A succeeded job of ``owner`` and its result file (once its worker has written it; computed
        again if it was lost). ``known``: its record as this process just had it from its worker.
        ``steps``: gets ``lookup`` (the record) and ``store`` (the wait for the file, or its
        computation again)."""
        steps = steps or Steps()
        job = known if known is not None else self.get(job_id, owner)  # another owner's: 404 at once
        steps.lap("lookup")
        if job.status != "succeeded":
            why = f": {job.error_type}: {job.error_message}" if job.status == "failed" else ""
            raise JobNotFinishedError(
                f"job {job_id} is {job.status}{why}; only succeeded jobs have a result."
            )
        path = await self.results.path(job)
        steps.lap("store")
        return job, path

    def cancel(self, job_id: str, owner: str) -> JobRecord:
        job = self.get(job_id, owner)
        if job.status == "cancelled":
            return job
        if job.status != "queued":
            raise JobNotCancellableError(f"job {job_id} is {job.status}; only queued jobs can be cancelled.")
        done = self._store.transition(
            job_id, _QUEUED, status="cancelled", finished_at=time.time(), error_type=None, error_message=None
        )
        if done is None:  # its worker began it a moment ago
            raise JobNotCancellableError(f"job {job_id} has just started; only queued jobs can be cancelled.")
        self.admission.release(job_id)
        self.sharded.cancelled(job_id)
        self._metrics.job_finished("cancelled", None, None)
        return done
