"""The tables of the service's database, and the upgrade of a database an older version made."""

from __future__ import annotations

import sqlite3

SCHEMA = """
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
    shards        INTEGER NOT NULL DEFAULT 1,
    facts         TEXT NOT NULL DEFAULT '{}'
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
    coalesced      INTEGER NOT NULL DEFAULT 0,
    coordinator    INTEGER,
    stamp          REAL
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
-- where each dataset (a graph, a point set, one shard of a sharded graph) lives: the worker is
-- chosen by an API process at its upload (or the supervisor at start-up), the rest is its
-- worker's word (loading, resident, evicted, failed)
CREATE TABLE IF NOT EXISTS placements (
    key           TEXT PRIMARY KEY,
    graph_id      TEXT NOT NULL,
    worker        INTEGER NOT NULL,
    status        TEXT NOT NULL DEFAULT 'loading',
    device_bytes  INTEGER NOT NULL DEFAULT 0,
    error         TEXT
);
-- what counts against an owner's MST_QUOTA_QUEUED_JOBS (a job, a one-shot, a prediction) while it
-- is queued or running; holder: 'job' (its worker releases it with the job's final record) or
-- the API slot that runs it
CREATE TABLE IF NOT EXISTS active (
    token         TEXT PRIMARY KEY,
    owner         TEXT NOT NULL,
    holder        TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS models_by_points ON models (points_id, created_at);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status, created_at);
CREATE INDEX IF NOT EXISTS jobs_by_graph ON jobs (graph_id);
CREATE INDEX IF NOT EXISTS placements_by_worker ON placements (worker);
CREATE INDEX IF NOT EXISTS placements_by_graph ON placements (graph_id);
CREATE INDEX IF NOT EXISTS active_by_owner ON active (owner);
"""

#: columns added after the first release: (table, column, declaration), added to older databases
ADDED_COLUMNS = (
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
    ("jobs", "coordinator", "INTEGER"),
    ("jobs", "stamp", "REAL"),
    ("graphs", "facts", "TEXT NOT NULL DEFAULT '{}'"),
)
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS jobs_by_key ON jobs (graph_id, weights_version, task, params)",
    "CREATE INDEX IF NOT EXISTS graphs_by_owner ON graphs (owner, created_at)",
)


def migrate(db: sqlite3.Connection) -> None:
    """Add the columns a database made by an older version lacks (their defaults fit old rows)."""
    for table, column, declaration in ADDED_COLUMNS:
        present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if column not in present:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
    for statement in _INDEXES:
        db.execute(statement)
