"""Jobs on sharded graphs: every shard's forest on its own worker, then the union's on one worker.

A graph whose edges do not fit one worker (or that the client or ``MST_SHARD_EDGES_ABOVE``
asks to shard) is stored whole in the spool and held as ``k`` shards, the contiguous edge-id
ranges of :func:`gpu_core.edge_ranges`, shard ``i`` placed on a worker under
:func:`~service.runtime.worker.sources.shard_key` ``(graph id, i)`` like any dataset.

A job on it is coordinated by the API process it was submitted through (the job's record names
it, ``coordinator``), which also writes its transitions:

1. each shard's worker computes the shard's spanning forest (of the job's objective, without the
   job's excluded edges that fall in the shard) into a tmp file, all in parallel; the first step
   to begin makes the job ``running`` (a cancel through any API process wins until then, and then
   no step runs);
2. once all are written, the worker with the most room computes the task itself (``mst``,
   ``components``, ``clusters``, ``dendrogram``) on the union of the shard forests, whose
   positions ascend with the global edge ids, so the tie order is the whole graph's (see
   :mod:`gpu_core._graphs.shards`). Its result file is the job's.

Any step that fails fails the job with that step's error (a worker lost while running a step:
``worker_lost``, not retried, as for an unsharded job). If the coordinating process dies, its
running sharded jobs fail and its queued ones are taken up by its replacement
(:mod:`service.runtime.supervisor.api_processes`, :meth:`Coordinator.resume`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import replace
from typing import Any

import gpu_core

from ..errors import dataset_not_found, error_type
from ..storage.records import GraphRecord, JobRecord
from ..storage.store import Store
from .admission import Admission
from .links.fleet import Fleet
from .links.link import consume
from .results import Results
from .worker.protocol import JOB, MERGE, MST, JobSpec
from .worker.sources import shard_key

log = logging.getLogger("service.runtime.sharding")


def shard_params(task: str, params: dict[str, Any], lo: int, hi: int) -> dict[str, Any]:
    """The MST parameters of a task's step on shard ``[lo, hi)``: the forest the task needs
    (``max`` for a maximum forest), without the excluded edges of the shard (local ids)."""
    out: dict[str, Any] = {}
    if task == "mst" and params.get("objective", "min") != "min":
        out["objective"] = params["objective"]
    exclude = params.get("exclude")
    if exclude is not None and task in ("mst", "components"):
        out["exclude"] = [int(e) - lo for e in exclude if lo <= int(e) < hi]
    return out


def merge_params(task: str, params: dict[str, Any]) -> dict[str, Any]:
    """The task's parameters for the union (the shards have left the excluded edges out already)."""
    return {k: v for k, v in params.items() if k != "exclude"}


class _Cancelled(Exception):
    def __init__(self, record: JobRecord) -> None:
        super().__init__(record.id)
        self.record = record


def _step(job: JobRecord) -> JobSpec:
    return JobSpec(job.id, job.graph_id, job.created_at, job.task, job.params, job.owner, True, step=True)


class Coordinator:
    """The jobs on sharded graphs this API process coordinates (see the module's docstring)."""

    def __init__(self, store: Store, fleet: Fleet, admission: Admission, results: Results, slot: int) -> None:
        self._store = store
        self._fleet = fleet
        self._admission = admission
        self._results = results
        self._slot = slot
        self._runs: set[asyncio.Future[Any]] = set()
        results.sharded_run = self.run

    def start(self, job: JobRecord, record: GraphRecord) -> asyncio.Future[Any]:
        """Run a job on a sharded graph; the future of ``{JOB: its final record}``."""
        published = self._store.get_job(job.id) is not None
        run = asyncio.ensure_future(self._job(job, record, published))
        self._runs.add(run)
        run.add_done_callback(self._runs.discard)
        return run

    def resume(self) -> None:
        """Take up the queued sharded jobs of this process's slot (its predecessor's, or a previous run's)."""
        for job in self._store.coordinated_by(self._slot, "queued"):
            record = self._store.get_graph(job.graph_id)
            if record is None:
                continue
            self.start(job, record).add_done_callback(consume)

    def cancelled(self, job_id: str) -> None:
        """A cancel won: nothing was handed to a worker yet (its run sees the record and stops)."""

    async def _job(self, job: JobRecord, record: GraphRecord, published: bool) -> dict[str, Any]:
        started = time.time()
        result = str(self._store.result_path(job.id))
        try:
            summary, stored = await self.run(job, result, guarded=published)
        except _Cancelled as cancelled:
            return {JOB: cancelled.record}
        except Exception as exc:
            log.warning("job %s failed: %s: %s", job.id, error_type(exc), exc)
            final = replace(
                job, status="failed", started_at=started, finished_at=time.time(),
                error_type=error_type(exc), error_message=str(exc),
            )  # fmt: skip
            if self._store.get_graph(job.graph_id) is None:
                final = replace(final, status="cancelled", error_type="graph_deleted",
                                error_message="The job's graph was deleted while it ran.")  # fmt: skip
        else:
            final = replace(
                job, status="succeeded", started_at=started, finished_at=time.time(),
                num_edges=int(summary["num_edges"]), total_weight=summary.get("total_weight"),
                num_components=int(summary["num_components"]), compute_ms=float(summary["compute_ms"]),
            )  # fmt: skip
            self._results.storing(job.id, stored)
        stored_record = self._store.finish_job(final, token=True) or self._store.get_job(job.id) or final
        return {**summary, JOB: stored_record} if final.status == "succeeded" else {JOB: stored_record}

    async def run(
        self, job: JobRecord, result_path: str, guarded: bool = False
    ) -> tuple[dict[str, Any], asyncio.Future[None]]:
        """Every shard's forest, then the union's task: (its summary, the note of its result file).
        ``guarded``: the job's record is in the store; its steps start it (or find it cancelled)."""
        record = self._store.get_graph(job.graph_id)
        if record is None:
            raise dataset_not_found(job.graph_id)
        params = json.loads(job.params)
        ranges = gpu_core.edge_ranges(record.num_edges, record.shards)
        placed = {p.key: p.worker for p in self._store.placements_of(job.graph_id)}
        outs = [self._store.tmp_path(".npz") for _ in ranges]
        try:
            steps = []
            for i, (lo, hi) in enumerate(ranges):
                key = shard_key(job.graph_id, i)
                if key not in placed:
                    raise dataset_not_found(job.graph_id)
                link = self._fleet.link(placed[key])
                spec = _step(job) if guarded else None
                step_params = shard_params(job.task, params, lo, hi)
                reply, note = link.send(MST, key, str(outs[i]), "mst", step_params, spec, note=True)
                assert note is not None
                steps.append((reply, note))
            summaries = await asyncio.gather(*(reply for reply, _ in steps))
            ended = next((s[JOB] for s in summaries if JOB in s), None)
            if ended is not None:  # cancelled before its first step began: no step ran
                raise _Cancelled(ended)
            await asyncio.gather(*(note for _, note in steps))
            parts = [(str(out), lo) for out, (lo, _) in zip(outs, ranges, strict=True)]
            args = (
                str(self._store.graph_path(job.graph_id)), record.num_vertices, parts, job.task,
                merge_params(job.task, params), result_path,
            )  # fmt: skip
            merge_link = self._fleet.link(self._fleet.place())
            reply, note = merge_link.send(MERGE, *args, note=True)
            summary = dict(await reply)
            assert note is not None
        finally:  # the union has read them before its answer
            for out in outs:
                out.unlink(missing_ok=True)
        # the job's computing time: the slowest shard (they run in parallel) plus the union
        summary["compute_ms"] = max(float(s["compute_ms"]) for s in summaries) + float(summary["compute_ms"])
        return summary, note
