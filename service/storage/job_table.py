"""The jobs table: records as every process of the service sees them, and the transitions each may make.

Who writes what (one writer per transition, every one guarded by the status it leaves, so two
processes racing for a job cannot both win):

* an API process records a job ``queued`` before it gives its id out (:meth:`JobTable.add_job`,
  :meth:`JobTable.publish_job`), and cancels a queued one (:meth:`JobTable.transition`);
* the worker that holds the job's dataset starts it (:meth:`JobTable.start_job`: ``queued`` to
  ``running``; a job cancelled meanwhile is not started) and writes its end
  (:meth:`JobTable.finish_job`), which also inserts the record of a job whose id was not given
  out yet (submitted with ``?wait=``) and releases its quota token;
* the API process coordinating a job on a sharded graph writes that job's transitions itself.

Quota tokens (:meth:`JobTable.take_token`): what counts against ``MST_QUOTA_QUEUED_JOBS``,
checked and taken in one transaction, so concurrent submissions through different processes
never pass the quota together.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import fields
from typing import Any

from .database import Database
from .records import FINISHED, JobRecord, JobStatus

_JOB_COLUMNS = [f.name for f in fields(JobRecord)]
_JOB_SETTABLE = frozenset(_JOB_COLUMNS[1:])
_REAL_COLUMNS = ("created_at", "started_at", "finished_at", "compute_ms", "stamp")
_INSERT_JOB = f"INSERT INTO jobs ({', '.join(_JOB_COLUMNS)}) VALUES ({', '.join('?' * len(_JOB_COLUMNS))})"
#: what a job's end sets (the rest was fixed at its submission)
_FINAL_COLUMNS = (
    "status", "started_at", "finished_at", "error_type", "error_message", "num_edges", "total_weight",
    "num_components", "compute_ms", "weights_version", "reused_tree", "reused_index", "coalesced",
)  # fmt: skip
_UNFINISHED = "('queued', 'running')"


def job_from_row(row: sqlite3.Row) -> JobRecord:
    values = dict(row)
    tw = values["total_weight"]
    values["total_weight"] = None if tw is None else json.loads(tw)
    for name in _REAL_COLUMNS:  # RETURNING hands back 1.0 as 1: no column affinity applied
        if values[name] is not None:
            values[name] = float(values[name])
    values["cached"] = bool(values["cached"])
    values["coalesced"] = bool(values["coalesced"])
    for flag in ("reused_tree", "reused_index"):
        if values[flag] is not None:
            values[flag] = bool(values[flag])
    return JobRecord(**values)


def _column_value(name: str, value: Any) -> Any:
    if name == "total_weight" and value is not None:
        return json.dumps(value)  # keeps ints beyond int64 and floats exact
    return value


def _job_values(job: JobRecord) -> list[Any]:
    return [_column_value(name, getattr(job, name)) for name in _JOB_COLUMNS]


class JobTable:
    """The jobs' records (a part of :class:`~service.storage.store.Store`)."""

    db: Database

    def add_job(self, job: JobRecord) -> None:
        self.db.write(_INSERT_JOB, _job_values(job))

    def publish_job(self, job: JobRecord) -> JobRecord:
        """Record a job whose id is about to be given out, unless its worker has recorded its end
        already; the record as stored now."""
        sql = _INSERT_JOB.replace("INSERT", "INSERT OR IGNORE", 1) + " RETURNING *"
        rows = self.db.write(sql, _job_values(job))
        if rows:
            return job_from_row(rows[0])
        stored = self.get_job(job.id)
        return job if stored is None else stored

    def get_job(self, job_id: str) -> JobRecord | None:
        row = self.db.read_one("SELECT * FROM jobs WHERE id = ?", (job_id,))
        return None if row is None else job_from_row(row)

    def transition(self, job_id: str, allowed_from: frozenset[str], **changes: Any) -> JobRecord | None:
        """Apply ``changes`` when the job's status is in ``allowed_from``; the new record, else None."""
        names = list(changes)
        if not set(names) <= _JOB_SETTABLE:
            raise ValueError(f"not job columns: {sorted(set(names) - _JOB_SETTABLE)}")
        values = [_column_value(name, changes[name]) for name in names]
        statuses = sorted(allowed_from)
        rows = self.db.write(
            f"UPDATE jobs SET {', '.join(f'{n} = ?' for n in names)} "
            f"WHERE id = ? AND status IN ({', '.join('?' * len(statuses))}) RETURNING *",
            [*values, job_id, *statuses],
        )
        return job_from_row(rows[0]) if rows else None

    def start_job(self, job_id: str, started_at: float) -> bool:
        """A worker begins a queued job (False: it was cancelled, or is not queued any more)."""
        return (
            self.db.write_count(
                "UPDATE jobs SET status = 'running', started_at = ? WHERE id = ? AND status = 'queued'",
                (started_at, job_id),
            )
            > 0
        )

    def finish_job(self, job: JobRecord, *, token: bool = False) -> JobRecord | None:
        """Write a job's end (``job`` holds it) over a queued or running record, or as a new record
        where there is none yet; None when the stored job had ended otherwise (cancelled). With
        ``token``, its quota token is released in the same transaction."""
        assert job.status in FINISHED
        sets = ", ".join(f"{c} = excluded.{c}" for c in _FINAL_COLUMNS)
        sql = (
            f"{_INSERT_JOB} ON CONFLICT(id) DO UPDATE SET {sets} "
            f"WHERE jobs.status IN {_UNFINISHED} RETURNING *"
        )
        if not token:
            rows = self.db.write(sql, _job_values(job))
        else:
            with self.db.tx() as db:
                rows = db.execute(sql, _job_values(job)).fetchall()
                db.execute("DELETE FROM active WHERE token = ?", (job.id,))
        return job_from_row(rows[0]) if rows else None

    def find_cached(self, graph_id: str, weights_version: int, task: str, params: str) -> JobRecord | None:
        """The latest succeeded job of the same task, parameters and weights, if any."""
        row = self.db.read_one(
            "SELECT * FROM jobs WHERE graph_id = ? AND weights_version = ? AND task = ? AND params = ? "
            "AND status = 'succeeded' ORDER BY finished_at DESC LIMIT 1",
            (graph_id, weights_version, task, params),
        )
        return None if row is None else job_from_row(row)

    def jobs_with_status(self, status: JobStatus) -> list[JobRecord]:
        rows = self.db.read("SELECT * FROM jobs WHERE status = ? ORDER BY created_at, id", (status,))
        return [job_from_row(r) for r in rows]

    def jobs_of(self, graph_ids: list[str], status: JobStatus) -> list[JobRecord]:
        """The jobs of ``status`` on these datasets, in submission order (a worker's recovery)."""
        if not graph_ids:
            return []
        marks = ", ".join("?" * len(graph_ids))
        rows = self.db.read(
            f"SELECT * FROM jobs WHERE status = ? AND graph_id IN ({marks}) AND coordinator IS NULL "
            "ORDER BY created_at, id",
            (status, *graph_ids),
        )
        return [job_from_row(r) for r in rows]

    def cancel_queued(self, graph_id: str, finished_at: float) -> list[JobRecord]:
        """Cancel the queued jobs of a dataset being deleted; the cancelled records."""
        message = "The job's graph was deleted."
        with self.db.tx() as db:
            rows = db.execute(
                "UPDATE jobs SET status = 'cancelled', finished_at = ?, error_type = 'graph_deleted', "
                "error_message = ? WHERE graph_id = ? AND status = 'queued' RETURNING *",
                (finished_at, message, graph_id),
            ).fetchall()
            db.executemany("DELETE FROM active WHERE token = ?", [(r["id"],) for r in rows])
        return [job_from_row(r) for r in rows]

    def coordinated_by(self, slot: int, status: JobStatus) -> list[JobRecord]:
        """The jobs on sharded graphs the API process of ``slot`` coordinates, of ``status``."""
        rows = self.db.read(
            "SELECT * FROM jobs WHERE coordinator = ? AND status = ? ORDER BY created_at, id", (slot, status)
        )
        return [job_from_row(r) for r in rows]

    def spread_coordinators(self, slots: int) -> None:
        """At start-up: the queued sharded jobs of API slots that no longer exist go to those that do."""
        self.db.write(
            "UPDATE jobs SET coordinator = coordinator % ? "
            "WHERE coordinator IS NOT NULL AND status = 'queued'",
            (max(slots, 1),),
        )

    # -- MST_QUOTA_QUEUED_JOBS ----------------------------------------------------------------

    def take_token(self, token: str, owner: str, holder: str, quota: int) -> int:
        """Count one more queued or running job (one-shot, prediction) of ``owner`` unless it has
        ``quota`` already; 0 when taken, else how many it has (nothing is taken)."""
        with self.db.tx() as db:
            (used,) = db.execute("SELECT COUNT(*) FROM active WHERE owner = ?", (owner,)).fetchone()
            if used >= quota:
                return int(used)
            db.execute("INSERT INTO active (token, owner, holder) VALUES (?, ?, ?)", (token, owner, holder))
        return 0

    def release_token(self, token: str) -> None:
        self.db.write("DELETE FROM active WHERE token = ?", (token,))

    def release_holder(self, holder: str) -> None:
        """Release every token an API process held (it is gone)."""
        self.db.write("DELETE FROM active WHERE holder = ?", (holder,))

    def release_finished_tokens(self) -> None:
        """At start-up: only the jobs still queued keep their tokens."""
        self.db.write(
            "DELETE FROM active WHERE holder != 'job' OR token NOT IN "
            "(SELECT id FROM jobs WHERE status = 'queued')"
        )
