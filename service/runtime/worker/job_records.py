"""The records of the jobs a worker runs: it starts and ends them, and takes back a dead predecessor's.

A job's MST request carries its :class:`~.protocol.JobSpec`. A published job (its record is in
the store, ``queued``) is started only if it still is (:func:`begin`: a cancel through any API
process wins until then); every job's end is written by the worker before its reply
(:func:`end`), so the record is durable before the API process gives the answer out, and the
job's end is recorded even if that API process is gone. At start-up a worker queues again the
jobs still queued on its datasets; those its dead predecessor had begun are sent again (or
failed) by their API processes, and failed here only if none does (:func:`recover`).
"""

from __future__ import annotations

import time
from typing import Any

from ...errors import GraphNotFoundError, PointSetNotFoundError, error_type
from ...storage.records import JobRecord
from ...storage.store import Store
from .protocol import JobSpec

#: what a job whose dataset was deleted under it ends as
_DELETED = ("cancelled", "graph_deleted", "The job's graph was deleted.")


def spec_of(job: JobRecord) -> JobSpec:
    """The spec of a stored job (a queued one a worker takes back at start-up)."""
    return JobSpec(
        job.id, job.graph_id, job.created_at, job.task, job.params, job.owner, published=True, token=True
    )


def begin(store: Store, spec: JobSpec, resent: bool = False) -> JobRecord | None:
    """Start a job: None to run it, else its record as stored (cancelled meanwhile: answer with it).
    ``resent``: its API process sent it again after its worker died: if that worker had begun it,
    it runs again here (it is ``running`` already)."""
    if not spec.published:
        return None
    if store.start_job(spec.id, time.time()):
        return None
    stored = store.get_job(spec.id)
    if stored is None:  # its record is gone (its graph deleted and purged): it ends here
        return _record(spec, time.time(), "cancelled", *_DELETED[1:])
    if stored.status == "running" and (spec.step or resent):
        return None  # another shard's step began the job, or the dead worker did
    return stored


def end(
    store: Store,
    spec: JobSpec,
    started_at: float,
    ok: bool,
    payload: Any,
    weights_version: int,
    coalesced: bool,
) -> JobRecord:
    """Write a job's end from its computation's outcome; the record as stored."""
    if ok:
        record = _record(
            spec,
            started_at,
            "succeeded",
            None,
            None,
            num_edges=int(payload["num_edges"]),
            total_weight=payload.get("total_weight"),
            num_components=int(payload["num_components"]),
            compute_ms=float(payload["compute_ms"]),
            reused_tree=payload.get("reused_tree"),
            reused_index=payload.get("reused_index"),
            coalesced=coalesced,
            weights_version=weights_version,
        )
    elif isinstance(payload, (GraphNotFoundError, PointSetNotFoundError)):
        record = _record(spec, started_at, *_DELETED)
    else:
        record = _record(
            spec, started_at, "failed", error_type(payload), str(payload), weights_version=weights_version
        )
    stored = store.finish_job(record, token=spec.token)
    if stored is None:  # it ended otherwise meanwhile (cancelled as its ?wait= ran out)
        stored = store.get_job(spec.id)
    return record if stored is None else stored


def _record(
    spec: JobSpec, started_at: float, status: str, err_type: str | None, message: str | None, **fields: Any
) -> JobRecord:
    return JobRecord(
        id=spec.id,
        graph_id=spec.graph_id,
        status=status,  # type: ignore[arg-type]
        created_at=spec.created_at,
        started_at=started_at,
        finished_at=time.time(),
        error_type=err_type,
        error_message=message,
        task=spec.task,
        params=spec.params,
        owner=spec.owner,
        **fields,
    )


def recover(store: Store, keys: list[str]) -> tuple[list[JobRecord], list[JobRecord]]:
    """At start-up: the jobs on these datasets still queued (in submission order, to run again) and
    those running (the dead predecessor began them: their API processes send them again, or fail
    them if they were what it ran alone; :func:`fail_orphans` ends those nobody sends again)."""
    return store.jobs_of(keys, "queued"), store.jobs_of(keys, "running")


def fail_orphans(store: Store, job_ids: list[str], reason: str) -> None:
    """Fail jobs a dead worker had begun that no API process sent again (their own died too)."""
    now = time.time()
    for job_id in job_ids:
        failed = store.transition(
            job_id, frozenset({"running"}), status="failed", finished_at=now, error_type="worker_lost",
            error_message=reason,
        )  # fmt: skip
        if failed is not None:
            store.release_token(job_id)
