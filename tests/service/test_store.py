"""SQLite records and the spool: ids, guarded transitions, persistence, recovery after a crash."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.store import GraphRecord, JobRecord, SpoolFile, Store, new_id


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
    assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_graph_records(store: Store) -> None:
    store.add_graph(graph("g_a"))
    store.add_graph(graph("g_b"))
    got: Any = store.get_graph("g_a")
    assert got.id == "g_a" and (got.num_vertices, got.num_edges, got.weight_dtype) == (4, 5, "int64")
    assert [g.id for g in store.list_graphs()] == ["g_a", "g_b"]
    store.graph_path("g_a").write_bytes(b"x")
    assert store.delete_graph("g_a") and not store.graph_path("g_a").exists()
    assert not store.delete_graph("g_a") and store.get_graph("g_a") is None


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
    store.result_path("j_ok").write_bytes(b"npz")
    store.result_path("j_orphan").write_bytes(b"npz")

    queued, failed = store.recover("stopped")
    assert [j.id for j in queued] == ["j_q1", "j_q2"] and failed == 1
    run = get("j_run", store)
    assert (run.status, run.error_type, run.error_message) == ("failed", "worker_lost", "stopped")
    lost = get("j_lost", store)
    assert (lost.status, lost.error_type) == ("failed", "result_lost")
    assert get("j_ok", store).status == "succeeded"
    assert not list(store.tmp_dir.iterdir())
    assert sorted(p.name for p in store.graph_dir.iterdir()) == ["g_kept.npz"]
    assert sorted(p.name for p in store.result_dir.iterdir()) == ["j_ok.npz"]


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
