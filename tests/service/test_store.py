"""SQLite records and the spool: ids, guarded transitions, persistence, recovery after a crash."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from service.storage.records import GraphRecord, JobRecord, new_id
from service.storage.spool import WRITE_BEHIND_BYTES, SpoolFile
from service.storage.store import Store


def graph(graph_id: str) -> GraphRecord:
    return GraphRecord(graph_id, time.time(), 4, 5, "int64", "npz", 100, 80)


def job(job_id: str, graph_id: str, status: str = "queued") -> JobRecord:
    return JobRecord(id=job_id, graph_id=graph_id, status=status, created_at=time.time())  # type: ignore[arg-type]


def get(job_id: str, source: Store | None = None) -> Any:
    job = (source or _current[0]).get_job(job_id)
    assert job is not None
    return job


_current: list[Store] = []


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "data")
    _current[:] = [s]
    yield s
    s.close()


def test_ids_are_random_and_prefixed() -> None:
    ids = {new_id("g") for _ in range(1000)}
    assert len(ids) == 1000
    assert all(i.startswith("g_") and len(i) == 34 and int(i[2:], 16) >= 0 for i in ids)


def test_wal_mode(store: Store) -> None:
    row = store.db.read_one("PRAGMA journal_mode")
    assert row is not None and row[0] == "wal"


def test_graph_records(store: Store) -> None:
    store.add_graph(graph("g_a"))
    store.add_graph(graph("g_b"))
    got: Any = store.get_graph("g_a")
    assert got.id == "g_a" and (got.num_vertices, got.num_edges, got.weight_dtype) == (4, 5, "int64")
    assert [g.id for g in store.list_graphs()] == ["g_a", "g_b"]
    store.graph_path("g_a").write_bytes(b"x")
    assert store.delete_graph("g_a") and not store.graph_path("g_a").exists()
    assert not store.delete_graph("g_a") and store.get_graph("g_a") is None


def test_new_weights_and_kinds_of_datasets(store: Store) -> None:
    store.add_graph(graph("g_a"))
    store.add_graph(replace(graph("p_b"), kind="points"))
    assert [g.id for g in store.list_graphs(kind="graph")] == ["g_a"]
    assert [g.id for g in store.list_graphs(owner="", kind="points")] == ["p_b"]
    updated: Any = store.set_graph_weights("g_a", 2, "float64", 160)
    assert (updated.weights_version, updated.weight_dtype, updated.device_bytes) == (2, "float64", 160)
    kept: Any = store.set_graph_weights("g_a", 1)  # an older version never lowers it; the rest stays
    assert (kept.weights_version, kept.weight_dtype, kept.device_bytes) == (2, "float64", 160)
    assert store.set_graph_weights("g_nope", 1) is None


def test_transitions_are_guarded(store: Store) -> None:
    store.add_job(job("j_1", "g"))
    running = store.transition("j_1", frozenset({"queued"}), status="running", started_at=1.0)
    assert running is not None and running.status == "running"
    assert store.transition("j_1", frozenset({"queued"}), status="cancelled") is None  # lost the race
    done = store.transition(
        "j_1", frozenset({"running"}), status="succeeded", total_weight=2**70, num_edges=3
    )
    assert done is not None and store.get_job("j_1") == done
    assert get("j_1").total_weight == 2**70  # exact beyond int64
    assert store.transition("missing", frozenset({"queued"}), status="running") is None


def test_float_totals_round_trip(store: Store) -> None:
    store.add_job(job("j_f", "g"))
    store.transition("j_f", frozenset({"queued"}), status="succeeded", total_weight=0.1 + 0.2)
    assert get("j_f").total_weight == 0.1 + 0.2


def test_records_persist_across_reopen(tmp_path: Path) -> None:
    first = Store(tmp_path)
    first.add_graph(graph("g_p"))
    first.add_job(job("j_p", "g_p"))
    first.close()
    again = Store(tmp_path)
    try:
        assert again.get_graph("g_p") is not None and get("j_p", again).status == "queued"
    finally:
        again.close()


def test_recover_after_a_crash(store: Store) -> None:
    store.add_graph(graph("g_kept"))
    store.graph_path("g_kept").write_bytes(b"kept")
    store.graph_path("g_orphan").write_bytes(b"no record: a crash between rename and commit")
    (store.tmp_dir / "half-written.part").write_bytes(b"...")
    for job_id, status in (
        ("j_q1", "queued"),
        ("j_run", "running"),
        ("j_ok", "succeeded"),
        ("j_lost", "succeeded"),
    ):
        store.add_job(job(job_id, "g_kept"))
        store.transition(job_id, frozenset({"queued"}), status=status)
        time.sleep(0.001)
    store.add_job(job("j_q2", "g_kept"))
    ok, orphan = "j_" + "a" * 32, "j_" + "b" * 32  # result files are named by real job ids
    store.add_job(job(ok, "g_kept"))
    store.transition(ok, frozenset({"queued"}), status="succeeded")
    store.result_path(ok).write_bytes(b"npz")
    store.result_path(orphan).write_bytes(b"npz")
    (store.result_dir / f".{orphan}.npz.4242.part").write_bytes(b"half a result")
    # MST_RESULT_DIR may be a folder where other files live: only result names are ever removed
    (store.result_dir / "someone-elses.npz").write_bytes(b"not ours")

    queued, failed = store.recover("stopped")
    assert [j.id for j in queued] == ["j_q1", "j_q2"] and failed == 1
    run = get("j_run", store)
    assert (run.status, run.error_type, run.error_message) == ("failed", "worker_lost", "stopped")
    lost = get("j_lost", store)  # its result is computed again when asked for (service.runtime.jobs)
    assert (lost.status, lost.error_type) == ("succeeded", None)
    assert get("j_ok", store).status == "succeeded"
    assert not list(store.tmp_dir.iterdir())
    assert sorted(p.name for p in store.graph_dir.iterdir()) == ["g_kept.npz"]
    assert sorted(p.name for p in store.result_dir.iterdir()) == [f"{ok}.npz", "someone-elses.npz"]


def test_spool_file_is_removed_unless_detached(store: Store) -> None:
    with pytest.raises(RuntimeError), SpoolFile(store) as spool:
        spool.write(b"abc")
        raise RuntimeError("client went away")
    assert not spool.path.exists()
    with SpoolFile(store) as spool:
        spool.write(b"abc")
        spool.close()
        spool.sync()
        kept = spool.detach()
    assert kept.read_bytes() == b"abc" and kept.parent == store.tmp_dir
    final = store.graph_path("g_new")
    Store.publish(kept, final)
    assert final.read_bytes() == b"abc" and not kept.exists()


def test_write_behind_hands_a_body_to_the_disk_while_it_arrives(store: Store) -> None:
    """Every WRITE_BEHIND_BYTES the written range is handed to the disk (Linux), the bytes intact."""
    calls: list[tuple[int, int]] = []
    chunk = bytes(range(256)) * 4096  # 1 MiB
    with SpoolFile(store, write_behind=True) as spool:
        if spool._write_out is None:
            pytest.skip("sync_file_range is Linux-only")
        real = spool._write_out

        def recorded(fd: int, offset: int, n: int) -> int:
            calls.append((offset, n))
            return real(fd, offset, n)

        spool._write_out = recorded
        for _ in range(40):
            spool.write(chunk)
        spool.close()
        spool.sync()
        kept = spool.detach()
    step = WRITE_BEHIND_BYTES
    assert calls == [(0, step), (step, step)]  # 40 MiB: two full steps handed over, the tail by sync
    assert kept.read_bytes() == chunk * 40
    with SpoolFile(store) as plain:  # without it (one-shot bodies, never fsynced): nothing handed over
        assert plain._write_out is None


#: the schema of the first release (before API keys): no owner columns
_SCHEMA_V1 = """
CREATE TABLE graphs (
    id TEXT PRIMARY KEY, created_at REAL NOT NULL, num_vertices INTEGER NOT NULL,
    num_edges INTEGER NOT NULL, weight_dtype TEXT NOT NULL, source_format TEXT NOT NULL,
    payload_bytes INTEGER NOT NULL, device_bytes INTEGER NOT NULL
);
CREATE TABLE jobs (
    id TEXT PRIMARY KEY, graph_id TEXT NOT NULL, status TEXT NOT NULL, created_at REAL NOT NULL,
    started_at REAL, finished_at REAL, error_type TEXT, error_message TEXT, num_edges INTEGER,
    total_weight TEXT, num_components INTEGER, compute_ms REAL
);
CREATE INDEX jobs_by_status ON jobs (status, created_at);
CREATE INDEX jobs_by_graph ON jobs (graph_id);
INSERT INTO graphs VALUES ('g_old', 1.0, 4, 5, 'int64', 'npz', 100, 80);
INSERT INTO jobs (id, graph_id, status, created_at, num_edges, total_weight, num_components, compute_ms)
    VALUES ('j_old', 'g_old', 'succeeded', 2.0, 3, '7', 1, 0.5);
"""


def test_a_database_of_the_first_schema_is_upgraded_in_place(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with sqlite3.connect(data / "mst.sqlite3") as db:
        db.executescript(_SCHEMA_V1)
    for _ in range(2):  # upgraded once, then opened as it is
        s = Store(data)
        old = s.get_graph("g_old")
        assert old is not None and old.owner == "" and old.device_bytes == 80
        assert old.facts == "{}"  # no facts: its worker checks a metric, as before
        assert s.get_job("j_old") == JobRecord(
            "j_old", "g_old", "succeeded", 2.0, num_edges=3, total_weight=7, num_components=1, compute_ms=0.5
        )
        assert s.get_graph("g_old", owner="k:1") is None and s.get_graph("g_old", owner="") == old
        s.close()
    s = Store(data)
    s.add_graph(replace(graph("g_new"), owner="k:1", device_bytes=30))
    s.add_job(replace(job("j_new", "g_new"), owner="k:1"))
    assert [g.id for g in s.list_graphs("")] == ["g_old"]
    assert [g.id for g in s.list_graphs("k:1")] == ["g_new"]
    assert [g.id for g in s.list_graphs()] == ["g_old", "g_new"]
    assert s.graph_usage("k:1") == (1, 30) and s.graph_usage("") == (1, 80) and s.graph_usage("k:2") == (0, 0)
    assert get("j_new", s).owner == "k:1"
    s.close()


def test_publish_replacing_keeps_the_replaced_data_for_later_removal(store: Store) -> None:
    final = store.weights_path("g1")
    first = store.tmp_path(".npy")
    first.write_bytes(b"old weights")
    assert store.publish_replacing(first, final) is None  # nothing replaced
    second = store.tmp_path(".npy")
    second.write_bytes(b"new weights")
    replaced = store.publish_replacing(second, final)
    assert final.read_bytes() == b"new weights" and not second.exists()
    assert replaced is not None and replaced.parent == store.trash_dir
    assert replaced.read_bytes() == b"old weights"  # the old data, still linked, for the caller to remove


def test_the_wal_is_checkpointed_by_the_stores_thread_never_by_a_commit(tmp_path: Path) -> None:
    """A commit must not checkpoint the WAL (it would stall the API's event loop on the database's
    fsync); the store's own thread does, on its own connection."""
    database = tmp_path / "mst.sqlite3"
    store = Store(tmp_path, checkpoint_interval_s=3600)  # its thread will not run during the test
    size = database.stat().st_size
    for _ in range(3000):  # past SQLite's automatic checkpoint (1000 pages of WAL) several times
        now = time.time()
        store.add_job(JobRecord(new_id("j"), "g_1", "succeeded", now, now, now, None, None, 1, 5, 1, 0.1))
    assert database.stat().st_size == size  # every page still in the WAL: no commit checkpointed
    other = Store(tmp_path, checkpoint_interval_s=0.05)  # one whose thread does
    deadline = time.monotonic() + 10
    while database.stat().st_size == size:
        assert time.monotonic() < deadline, "no checkpoint by the store's thread"
        time.sleep(0.05)
    other.close()
    assert len(store.jobs_with_status("succeeded")) == 3000
    store.close()


def test_the_reserve_is_kept_given_up_for_a_deletion_on_a_full_disk_and_taken_again(tmp_path: Path) -> None:
    """``Reserve``: allocated at the store's start; a deletion that finds the disk full runs once
    more after giving it up; anything else goes through; it is allocated again by ``keep``."""
    from service.storage.reserve import RESERVE_BYTES, Reserve

    store = Store(tmp_path / "data")
    try:
        assert store.reserve.held and store.reserve.path.stat().st_size == RESERVE_BYTES
    finally:
        store.close()
    reserve = Reserve(tmp_path, size=4096)
    assert not reserve.held and reserve.keep() and reserve.path.stat().st_size == 4096
    tries: list[bool] = []

    def full_once() -> str:
        tries.append(reserve.held)
        if len(tries) == 1:
            raise sqlite3.OperationalError("database or disk is full")
        return "deleted"

    assert reserve.freeing(full_once) == "deleted" and tries == [True, False]
    assert not reserve.held  # given up: a second full disk is the caller's 507

    def failing(message: str) -> Any:
        raise sqlite3.OperationalError(message)

    with pytest.raises(sqlite3.OperationalError, match="full"):
        reserve.freeing(lambda: failing("database or disk is full"))
    with pytest.raises(sqlite3.OperationalError, match="locked"):  # not a full disk: not retried
        reserve.freeing(lambda: failing("database is locked"))
    assert reserve.keep() and reserve.held
