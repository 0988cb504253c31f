"""Smoke test of the jobs benchmark (bench/jobs.py) against a real CPU server: it runs, checks
every forest, and a wrong forest would be counted (not a timing assertion)."""

from __future__ import annotations

import io

import numpy as np

from bench.jobs import JobsSpec, _Checker, _small_graphs, run_jobs_benchmark, table

TINY = JobsSpec(
    "jobs",
    clients=(1, 3),
    duration_s=1.0,
    rmat_scale=8,
    oneshot_edges=500,
    oneshot_clients=3,
    processes=2,
    graphs=3,
    coalesced_clients=(3,),
    one_request_clients=(3,),
)


def _npz(edge_ids: np.ndarray, weights: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, edge_ids=edge_ids, weights=weights)
    return buf.getvalue()


def test_checker_tells_a_wrong_forest() -> None:
    ((_, expected),) = _small_graphs(1, 300)
    check = _Checker(expected)
    edge_ids, weights = expected
    assert check(_npz(edge_ids, weights))
    assert check(_npz(edge_ids, weights))  # the remembered answer
    assert not check(_npz(edge_ids[:-1], weights[:-1]))
    wrong = edge_ids.copy()
    wrong[0] += 1
    assert not check(_npz(wrong, weights))
    assert not check(b"not an npz")


def test_jobs_benchmark_runs_and_checks_every_forest() -> None:
    record = run_jobs_benchmark(TINY, "cpu", None, lambda _: None)
    assert record["status"] == "ok", record.get("error")
    assert record["type"] == "jobs" and record["backend"] == "cpu"
    levels = record["levels"]
    assert [lv["clients"] for lv in levels] == [1, 3]
    assert [lv["graphs"] for lv in levels] == [1, 3]  # every client on its own graph
    assert record["spec"]["graphs"] == 3
    (coalesced,) = record["coalesced"]
    assert coalesced["clients"] == 3 and coalesced["graphs"] == 1
    (one_request,) = record["one_request"]  # a job and its result in one request, distinct graphs
    assert one_request["clients"] == 3 and one_request["graphs"] == 3
    assert {"queue", "compute", "result-store", "result-encode"} <= set(one_request["server_timing_ms"])
    for level in [*levels, one_request, coalesced, record["oneshot"]]:
        assert level["completed"] > 0 and level["errors"] == 0 and level["mismatches"] == 0
        assert 0 < level["p50_ms"] <= level["p99_ms"] <= level["max_ms"]
    for level in levels:  # where the server's time went, from the answers' Server-Timing, and its CPU
        parts = level["server_timing_ms"]
        assert {"submit", "queue", "compute", "reply", "response", "result-store"} <= set(parts), parts
        assert all(ms >= 0 for ms in parts.values()) and level["cpu_ms_per_job"]["worker"] > 0
    assert record["checks"]["all_checked_equal"] is True
    text = table(record)
    assert "| one-shot | 3 |" in text
    assert "| jobs, distinct graphs | 3 | 3 |" in text and "| jobs, coalesced (one graph) | 3 | 1 |" in text
    assert "| jobs, distinct graphs, one request each | 3 | 3 |" in text


def test_distinct_graph_clients_check_their_own_forests() -> None:
    """Each client is checked against its own graph's forest: a checker of another graph refuses it."""
    from bench.jobs import _rmat_graph

    _, first, _ = _rmat_graph(8, 0)
    _, second, _ = _rmat_graph(8, 1)
    assert not np.array_equal(first[0], second[0])  # distinct seeds, distinct forests
    assert not _Checker(first)(_npz(*second))


def test_the_one_shot_part_runs_alone() -> None:
    """``--jobs-parts oneshot``: no resident graph, no jobs levels, the one-shot level only."""
    import dataclasses

    from bench.__main__ import load_spec, parse_args

    args = parse_args(["--only", "jobs", "--jobs-parts", "oneshot", "--oneshot-clients", "2"])
    spec = load_spec(dataclasses.replace(TINY, duration_s=0.5), args)
    assert spec.parts == ("oneshot",) and spec.oneshot_clients == 2
    record = run_jobs_benchmark(spec, "cpu", None, lambda _: None)
    assert record["status"] == "ok", record.get("error")
    assert record["levels"] == [] and record["spec"]["graph"] is None
    assert record["oneshot"]["completed"] > 0 and record["oneshot"]["mismatches"] == 0
    assert record["checks"]["oneshot_per_s"] == record["oneshot"]["per_s"]
    assert record["oneshot"]["batch_members_mean"] >= 1  # from the server's mst_oneshot_batch_members
    cpu = record["oneshot"]["cpu_ms_per_request"]  # the server's processes' CPU time, from /proc
    assert set(cpu) == {"runtime", "worker", "other"} and cpu["worker"] > 0 and cpu["runtime"] > 0
    assert table(record).count("| one-shot | 2 |") == 1 and "| jobs," not in table(record)
