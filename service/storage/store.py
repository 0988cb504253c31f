"""Records of graphs and jobs in SQLite (WAL), and the spool folder holding their payloads.

Layout under the data dir::

    mst.sqlite3            graph and job records
    .reserve               room kept for deletions on a full disk (:mod:`.reserve`)
    spool/tmp/             files being written (removed at start-up)
    spool/trash/           replaced weight files, freed in a thread after the answer (and at start-up)
    spool/graphs/<id>.npz  every stored graph: arrays src, dst, weight (+ num_vertices)
    spool/graphs/<id>.weights.npy  a graph's weights when they were replaced after its upload
    spool/results/<id>.npz every finished job's forest: arrays edge_ids, weights (least recently
                           used first out past MST_MAX_RESULT_BYTES)

Paths are only ever built from ids this module generated (random, 128 bits),
never from client input. A graph payload is written to ``spool/tmp``, fsynced
and renamed into place before its record is committed, so a graph record
always has its file; a file without a record (a crash in between) is removed
at start-up.

Durability: the database runs ``synchronous=NORMAL`` in WAL mode, so a commit
survives any crash or restart of the service's processes; graph payloads are
also fsynced (with their folder). The WAL is checkpointed into the database by a thread
of the store's own every second (:class:`_Checkpointer`), never inside a commit on the
API's event loop. Result files are written by the worker just after the job is recorded
succeeded (see :mod:`service.runtime.jobs`) and are not fsynced (that would cost
milliseconds per job). A result lost to a crash in between or to a power cut is computed
again from the stored graph when it is next asked for
(:meth:`service.runtime.jobs.Jobs.result_path`); the job stays succeeded.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from .records import GraphRecord, JobRecord, JobStatus, ModelRecord
from .reserve import Reserve
from .spool import fsync_dir

_SCHEMA = """
CREATE TABLE IF NOT EXISTS graphs (
    id            TEXT PRIMARY KEY,
    created_at    REAL NOT NULL,
    num_vertices  INTEGER NOT NULL,
    num_edges     INTEGER NOT NULL,
    weight_dtype  TEXT NOT NULL,
    source_format TEXT NOT NULL,
    payload_bytes INTEGER NOT NULL,
    device_bytes  INTEGER NOT NULL,
    weights_version INTEGER NOT NULL DEFAULT 0,
    owner         TEXT NOT NULL DEFAULT '',
    kind          TEXT NOT NULL DEFAULT 'graph',
    shards        INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS jobs (
    id             TEXT PRIMARY KEY,
    graph_id       TEXT NOT NULL,
    status         TEXT NOT NULL,
    created_at     REAL NOT NULL,
    started_at     REAL,
    finished_at    REAL,
    error_type     TEXT,
    error_message  TEXT,
    num_edges      INTEGER,
    total_weight   TEXT,
    num_components INTEGER,
    compute_ms     REAL,
    task           TEXT NOT NULL DEFAULT 'mst',
    params         TEXT NOT NULL DEFAULT '{}',
    weights_version INTEGER NOT NULL DEFAULT 0,
    cached         INTEGER NOT NULL DEFAULT 0,
    reused_tree    INTEGER,
    reused_index   INTEGER,
    owner          TEXT NOT NULL DEFAULT '',
    coalesced      INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS models (
    id            TEXT PRIMARY KEY,
    points_id     TEXT NOT NULL,
    created_at    REAL NOT NULL,
    params        TEXT NOT NULL,
    num_clusters  INTEGER NOT NULL,
    num_noise     INTEGER NOT NULL,
    model_bytes   INTEGER NOT NULL,
    num_points    INTEGER NOT NULL,
    dims          INTEGER NOT NULL,
    owner         TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS models_by_points ON models (points_id, created_at);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status, created_at);
CREATE INDEX IF NOT EXISTS jobs_by_graph ON jobs (graph_id);
"""

#: columns added after the first release: (table, column, declaration), added to older databases
_ADDED_COLUMNS = (
    ("graphs", "weights_version", "INTEGER NOT NULL DEFAULT 0"),
    ("graphs", "kind", "TEXT NOT NULL DEFAULT 'graph'"),
    ("jobs", "task", "TEXT NOT NULL DEFAULT 'mst'"),
    ("jobs", "params", "TEXT NOT NULL DEFAULT '{}'"),
    ("jobs", "weights_version", "INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "cached", "INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "reused_tree", "INTEGER"),
    ("graphs", "owner", "TEXT NOT NULL DEFAULT ''"),
    ("jobs", "owner", "TEXT NOT NULL DEFAULT ''"),
    ("graphs", "shards", "INTEGER NOT NULL DEFAULT 1"),
    ("jobs", "coalesced", "INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "reused_index", "INTEGER"),
)
_CACHE_INDEX = "CREATE INDEX IF NOT EXISTS jobs_by_key ON jobs (graph_id, weights_version, task, params)"
_OWNER_INDEX = "CREATE INDEX IF NOT EXISTS graphs_by_owner ON graphs (owner, created_at)"


def _migrate(db: sqlite3.Connection) -> None:
    """Add the columns a database made by an older version lacks (their defaults fit old rows)."""
    for table, column, declaration in _ADDED_COLUMNS:
        present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if column not in present:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
    db.execute(_CACHE_INDEX)
    db.execute(_OWNER_INDEX)


_GRAPH_COLUMNS = [f.name for f in fields(GraphRecord)]
_JOB_COLUMNS = [f.name for f in fields(JobRecord)]
_MODEL_COLUMNS = [f.name for f in fields(ModelRecord)]


_REAL_COLUMNS = ("created_at", "started_at", "finished_at", "compute_ms")


def _job_from_row(row: sqlite3.Row) -> JobRecord:
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


_INSERT_JOB = f"INSERT INTO jobs ({', '.join(_JOB_COLUMNS)}) VALUES ({', '.join('?' * len(_JOB_COLUMNS))})"
_JOB_SETTABLE = frozenset(_JOB_COLUMNS[1:])
#: UPDATE ... RETURNING (SQLite 3.35): a transition in one statement instead of BEGIN/SELECT/UPDATE/COMMIT
_RETURNING = sqlite3.sqlite_version_info >= (3, 35, 0)


#: seconds between two checkpoints of the WAL (see :class:`_Checkpointer`)
CHECKPOINT_INTERVAL_S = 1.0
#: bytes the WAL file is cut back to when a checkpoint lets SQLite start it over
WAL_SIZE_LIMIT = 64 << 20


class _Checkpointer:
    """A thread that checkpoints the database's WAL every ``interval_s`` seconds, on a connection
    of its own (``PASSIVE``: it never blocks a writer; the next one finishes)."""

    def __init__(self, path: Path, interval_s: float, reserve: Reserve) -> None:
        self._interval_s = interval_s
        self._reserve = reserve
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sqlite-checkpoints", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopping.wait(self._interval_s):
                with contextlib.suppress(sqlite3.Error):  # busy, or the disk: the next one tries again
                    self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")
                self._reserve.keep()  # given up for a deletion on a full disk: taken again when there is room
        finally:
            self._db.close()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(30)


class Store:
    """SQLite records and the spool folder of one data dir; safe to share between threads."""

    def __init__(self, data_dir: Path, checkpoint_interval_s: float = CHECKPOINT_INTERVAL_S) -> None:
        self.data_dir = Path(data_dir)
        self.spool = self.data_dir / "spool"
        self.tmp_dir = self.spool / "tmp"
        #: files replaced or dropped, waiting to be freed (see :meth:`publish_replacing`)
        self.trash_dir = self.spool / "trash"
        self.graph_dir = self.spool / "graphs"
        self.result_dir = self.spool / "results"
        for folder in (self.data_dir, self.tmp_dir, self.trash_dir, self.graph_dir, self.result_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        #: room for the deletions that make room on a full disk (see :mod:`.reserve`)
        self.reserve = Reserve(self.data_dir)
        self.reserve.keep()
        self._db = sqlite3.connect(
            self.data_dir / "mst.sqlite3", isolation_level=None, check_same_thread=False, timeout=30
        )
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        _migrate(self._db)
        # Checkpoints (the WAL's pages into the database, which fsyncs it) run on a thread of
        # their own, not in whichever commit finds the WAL past 1000 pages: that commit is on the
        # API's event loop, and stalled it up to 200 ms under disk load (p99.9 of a job's record
        # insert: 40 ms; with this 4 ms, mean 246 -> 57 us on a shared 2-core host).
        self._checkpoints = _Checkpointer(self.data_dir / "mst.sqlite3", checkpoint_interval_s, self.reserve)
        self._db.execute("PRAGMA wal_autocheckpoint=0")
        self._db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")

    def close(self) -> None:
        self._checkpoints.stop()
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- spool paths (from generated ids only) ------------------------------------------------

    def graph_path(self, graph_id: str) -> Path:
        return self.graph_dir / f"{graph_id}.npz"

    def result_path(self, job_id: str) -> Path:
        return self.result_dir / f"{job_id}.npz"

    def tmp_path(self, suffix: str = ".part") -> Path:
        """A fresh path in the spool's tmp folder (nothing is created)."""
        return self.tmp_dir / f"{secrets.token_hex(16)}{suffix}"

    @staticmethod
    def publish(tmp: Path, final: Path) -> None:
        """Rename a fully written, fsynced file into place and make the rename durable."""
        os.replace(tmp, final)
        fsync_dir(final.parent)

    def publish_replacing(self, tmp: Path, final: Path) -> Path | None:
        """:meth:`publish`, but the file it replaces (if any) keeps a link in the trash folder, whose
        path is returned: the caller removes it later, so that the rename does not wait for the
        file system to free the old data (tens of ms for a large file on a disk). A crash leaves it
        in the trash folder, which is emptied at start."""
        keep = self.trash_dir / f"{secrets.token_hex(16)}{final.suffix}"
        try:
            os.link(final, keep)
        except FileNotFoundError:  # nothing to replace
            self.publish(tmp, final)
            return None
        self.publish(tmp, final)
        return keep

    # -- graphs -------------------------------------------------------------------------------

    def add_graph(self, graph: GraphRecord) -> None:
        marks = ", ".join("?" * len(_GRAPH_COLUMNS))
        with self._tx() as db:
            db.execute(
                f"INSERT INTO graphs ({', '.join(_GRAPH_COLUMNS)}) VALUES ({marks})",
                [getattr(graph, c) for c in _GRAPH_COLUMNS],
            )

    def get_graph(self, graph_id: str, owner: str | None = None) -> GraphRecord | None:
        """The graph's record; None when there is none, or it is not ``owner``'s (None: anyone's)."""
        with self._lock:
            row = self._db.execute("SELECT * FROM graphs WHERE id = ?", (graph_id,)).fetchone()
        if row is None or (owner is not None and row["owner"] != owner):
            return None
        return GraphRecord(**dict(row))

    def list_graphs(self, owner: str | None = None, kind: str | None = None) -> list[GraphRecord]:
        """The datasets of ``owner`` (None: of everyone) of ``kind`` (None: graphs and point sets),
        oldest first."""
        where = [(c, v) for c, v in (("owner", owner), ("kind", kind)) if v is not None]
        clause = (" WHERE " + " AND ".join(f"{c} = ?" for c, _ in where)) if where else ""
        with self._lock:
            rows = self._db.execute(
                f"SELECT * FROM graphs{clause} ORDER BY created_at, id", [v for _, v in where]
            ).fetchall()
        return [GraphRecord(**dict(r)) for r in rows]

    def set_graph_weights(
        self, graph_id: str, version: int, weight_dtype: str | None = None, device_bytes: int | None = None
    ) -> GraphRecord | None:
        """Record a graph's weights version (and new dtype and size; their file is already in place)."""
        with self._lock:
            rows = self._db.execute(
                "UPDATE graphs SET weights_version = MAX(weights_version, ?), "
                "weight_dtype = COALESCE(?, weight_dtype), device_bytes = COALESCE(?, device_bytes) "
                "WHERE id = ? RETURNING *",
                (version, weight_dtype, device_bytes, graph_id),
            ).fetchall()
        return GraphRecord(**dict(rows[0])) if rows else None

    def weights_path(self, graph_id: str) -> Path:
        """The graph's current weights when they were replaced after the upload (an ``.npy``)."""
        return self.graph_dir / f"{graph_id}.weights.npy"

    def find_cached(self, graph_id: str, weights_version: int, task: str, params: str) -> JobRecord | None:
        """The latest succeeded job of the same task, parameters and weights, if any."""
        with self._lock:
            row = self._db.execute(
                "SELECT * FROM jobs WHERE graph_id = ? AND weights_version = ? AND task = ? AND params = ? "
                "AND status = 'succeeded' ORDER BY finished_at DESC LIMIT 1",
                (graph_id, weights_version, task, params),
            ).fetchone()
        return None if row is None else _job_from_row(row)

    def graph_usage(self, owner: str) -> tuple[int, int]:
        """How many graphs ``owner`` stores and the device bytes they (and their models) hold together."""
        with self._lock:
            row = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(device_bytes), 0) "
                "+ (SELECT COALESCE(SUM(model_bytes), 0) FROM models WHERE owner = ?) "
                "FROM graphs WHERE owner = ?",
                (owner, owner),
            ).fetchone()
        return int(row[0]), int(row[1])

    def delete_graph(self, graph_id: str, *, remove_payload: bool = True) -> bool:
        """Delete the record, then its payload (unless the caller removes it later); True when there
        was one."""

        def delete() -> bool:
            with self._tx() as db:
                gone = db.execute("DELETE FROM graphs WHERE id = ?", (graph_id,)).rowcount > 0
                db.execute("DELETE FROM models WHERE points_id = ?", (graph_id,))
            return gone

        gone = self.reserve.freeing(delete)
        if gone and remove_payload:
            self.graph_path(graph_id).unlink(missing_ok=True)
            self.weights_path(graph_id).unlink(missing_ok=True)
        return gone

    # -- models of point sets -----------------------------------------------------------------

    def add_model(self, model: ModelRecord) -> None:
        marks = ", ".join("?" * len(_MODEL_COLUMNS))
        with self._tx() as db:
            db.execute(
                f"INSERT INTO models ({', '.join(_MODEL_COLUMNS)}) VALUES ({marks})",
                [getattr(model, c) for c in _MODEL_COLUMNS],
            )

    def get_model(self, model_id: str) -> ModelRecord | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM models WHERE id = ?", (model_id,)).fetchone()
        return None if row is None else ModelRecord(**dict(row))

    def list_models(self, points_id: str) -> list[ModelRecord]:
        """The models of a point set, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM models WHERE points_id = ? ORDER BY created_at, id", (points_id,)
            ).fetchall()
        return [ModelRecord(**dict(r)) for r in rows]

    def set_model_bytes(self, model_id: str, model_bytes: int) -> None:
        with self._tx() as db:
            db.execute("UPDATE models SET model_bytes = ? WHERE id = ?", (model_bytes, model_id))

    def delete_model(self, model_id: str) -> bool:
        def delete() -> bool:
            with self._tx() as db:
                return db.execute("DELETE FROM models WHERE id = ?", (model_id,)).rowcount > 0

        return self.reserve.freeing(delete)

    # -- jobs ---------------------------------------------------------------------------------

    def add_job(self, job: JobRecord) -> None:
        with self._lock:  # one statement: its own transaction (autocommit)
            self._db.execute(_INSERT_JOB, _job_values(job))

    def get_job(self, job_id: str) -> JobRecord | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else _job_from_row(row)

    def save_job(self, job: JobRecord) -> None:
        sets = ", ".join(f"{c} = ?" for c in _JOB_COLUMNS[1:])
        values = _job_values(job)
        with self._tx() as db:
            db.execute(f"UPDATE jobs SET {sets} WHERE id = ?", [*values[1:], values[0]])

    def transition(self, job_id: str, allowed_from: frozenset[str], **changes: Any) -> JobRecord | None:
        """Apply ``changes`` when the job's status is in ``allowed_from``; the new record, else None."""
        if _RETURNING:  # one guarded UPDATE ... RETURNING: a single statement, atomic on its own
            names = list(changes)
            if not set(names) <= _JOB_SETTABLE:
                raise ValueError(f"not job columns: {sorted(set(names) - _JOB_SETTABLE)}")
            values = [_column_value(name, changes[name]) for name in names]
            statuses = sorted(allowed_from)
            sql = (
                f"UPDATE jobs SET {', '.join(f'{n} = ?' for n in names)} "
                f"WHERE id = ? AND status IN ({', '.join('?' * len(statuses))}) RETURNING *"
            )
            with self._lock:
                rows = self._db.execute(sql, [*values, job_id, *statuses]).fetchall()
            return _job_from_row(rows[0]) if rows else None
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
                if row is None or row["status"] not in allowed_from:
                    self._db.execute("ROLLBACK")
                    return None
                job = replace(_job_from_row(row), **changes)
                sets = ", ".join(f"{c} = ?" for c in _JOB_COLUMNS[1:])
                values = _job_values(job)
                self._db.execute(f"UPDATE jobs SET {sets} WHERE id = ?", [*values[1:], values[0]])
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        return job

    def jobs_with_status(self, status: JobStatus) -> list[JobRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM jobs WHERE status = ? ORDER BY created_at, id", (status,)
            ).fetchall()
        return [_job_from_row(r) for r in rows]

    def count_jobs(self) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall()
        return {r[0]: int(r[1]) for r in rows}

    # -- start-up -----------------------------------------------------------------------------

    def recover(self, reason: str) -> tuple[list[JobRecord], int]:
        """Tidy up after the previous run; return the queued jobs to requeue and how many failed.

        Jobs left ``running`` by a stopped service fail with ``worker_lost``
        (the worker that ran them is gone); ``queued`` jobs are returned in
        submission order to be queued again. Temporary files and payloads
        without a record are removed.
        """
        now = time.time()
        with self._tx() as db:
            failed = db.execute(
                "UPDATE jobs SET status = 'failed', finished_at = ?, error_type = 'worker_lost', "
                "error_message = ? WHERE status = 'running'",
                (now, reason),
            ).rowcount
        for leftover in (*self.tmp_dir.iterdir(), *self.trash_dir.iterdir()):
            leftover.unlink(missing_ok=True)
        known_graphs = {g.id for g in self.list_graphs()}
        for path in self.graph_dir.iterdir():
            if path.name.split(".", 1)[0] not in known_graphs:
                path.unlink(missing_ok=True)
        with self._lock:
            done = {r[0] for r in self._db.execute("SELECT id FROM jobs WHERE status = 'succeeded'")}
        for path in self.result_dir.iterdir():
            if path.stem not in done:
                path.unlink(missing_ok=True)
        # a succeeded job whose result file is missing stays succeeded: it is computed again if asked for
        return self.jobs_with_status("queued"), failed
