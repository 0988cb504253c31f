"""Sharded graphs over HTTP, against live servers of several CPU workers (``MST_CPU_WORKERS``).

* a graph uploaded with ``?shards=2`` or ``3`` answers every task (``mst`` min and max, with
  excluded edges, ``components``, ``clusters``, ``dendrogram``) with exactly the arrays of the
  same graph uploaded unsharded, and the ``mst`` forests are Kruskal's (an independent oracle);
  int32, int64, float32 and float64 weights, ties, self-loops, parallel edges, components;
* a graph larger than one worker (``MST_WORKER_MEMORY_BYTES``) is sharded by itself, one that
  does not fit across all workers either is a 413; ``MST_SHARD_EDGES_ABOVE`` shards the large
  ones only; ``?shards=`` over the worker count is a 422;
* a weight update is a 409 ``graph_sharded``; delete drops every shard from its worker;
* a shard's worker that dies running a job's step (a step that kills it, made with the test-only
  crash hook of ``crash_hook/sitecustomize.py``): the job ends ``failed`` with ``worker_lost`` (not
  retried, as for an unsharded graph), the shard is reloaded; a shard's worker SIGKILLed with a
  step handed to it but not started (it was stopped): the step runs on its next process and the
  job answers the same as before;
* a queued job can be cancelled; a restart of the service keeps the graph sharded, same answers.
"""

from __future__ import annotations

import io
import os
import signal
import time
from typing import Any

import numpy as np
import pytest

import gpu_core
from tests.utils.graphs import EdgeGraph, random_graph

from .conftest import ServerFactory
from .live import CRASH_HOOK_ENV, KILL_WEIGHT, OCTET, LiveServer, npz_body
from .test_queries import kruskal

WORKERS = {"MST_CPU_WORKERS": "3"}
FAST_HEARTBEAT = {"MST_HEARTBEAT_INTERVAL_S": "0.1", "MST_HEARTBEAT_TIMEOUT_S": "2"}
FINAL = ("succeeded", "failed", "cancelled")


def upload(
    server: LiveServer, graph: EdgeGraph, shards: int | None = None, expect: int = 201
) -> dict[str, Any]:
    response = server.client.post(
        "/v1/graphs",
        params=None if shards is None else {"shards": shards},
        content=npz_body(graph.src, graph.dst, graph.weight, graph.num_vertices),
        headers={"content-type": OCTET},
    )
    assert response.status_code == expect, response.text
    body: dict[str, Any] = response.json()
    return body


def run(
    server: LiveServer, graph_id: str, task: str, params: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A job of ``task`` and every array of its binary result."""
    response = server.client.post(
        f"/v1/graphs/{graph_id}/jobs", json={"task": task, "params": params}, params={"wait": 60}
    )
    assert response.status_code == 200, response.text
    job: dict[str, Any] = response.json()
    assert job["status"] == "succeeded", job
    return job, result_arrays(server, job["id"])


def result_arrays(server: LiveServer, job_id: str) -> dict[str, Any]:
    response = server.client.get(f"/v1/jobs/{job_id}/result", headers={"accept": OCTET})
    assert response.status_code == 200, response.text
    with np.load(io.BytesIO(response.content), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def same_answer(a: tuple[dict[str, Any], dict[str, Any]], b: tuple[dict[str, Any], dict[str, Any]]) -> None:
    (job_a, arrays_a), (job_b, arrays_b) = a, b
    for key in ("num_edges", "total_weight", "num_components"):
        assert job_a["result"][key] == job_b["result"][key], (key, job_a, job_b)
    assert arrays_a.keys() == arrays_b.keys()
    for name in arrays_a:
        assert arrays_a[name].dtype == arrays_b[name].dtype, name
        np.testing.assert_array_equal(arrays_a[name], arrays_b[name], err_msg=name)


def worker_pids(server: LiveServer) -> list[int]:
    return [int(w["pid"]) for w in server.client.get("/readyz").json()["workers"]]


def tasks(graph: EdgeGraph) -> list[tuple[str, dict[str, Any]]]:
    m = graph.weight.shape[0]
    exclude = sorted({*range(0, m, 7), m - 1})
    found: list[tuple[str, dict[str, Any]]] = [
        ("mst", {}),
        ("mst", {"objective": "max"}),
        ("mst", {"exclude": exclude}),
        ("mst", {"objective": "max", "exclude": exclude}),
        ("components", {"exclude": exclude}),
        ("clusters", {"k": 5}),
        ("clusters", {"threshold": float(np.median(graph.weight))}),
    ]
    return found


def test_sharded_answers_are_the_unsharded_answers(server_factory: ServerFactory) -> None:
    server = server_factory(**WORKERS)
    for seed, dtype in enumerate(("int32", "int64", "float32", "float64")):
        graph = random_graph(seed, 150, 1200, dtype=dtype, num_weights=4, components=2, isolated=3)
        connected = random_graph(seed + 10, 60, 500, dtype=dtype, num_weights=3)
        cases: list[tuple[Any, list[tuple[str, dict[str, Any]]]]] = [
            (graph, []),
            (connected, [("dendrogram", {})]),
        ]
        for g, extra in cases:
            whole = upload(server, g, shards=1)
            assert whole["shards"] == 1 and whole["shard_residency"] is None
            expected = {i: run(server, whole["id"], t, p) for i, (t, p) in enumerate(tasks(g) + extra)}
            assert expected[0][1]["edge_ids"].tolist() == kruskal(g)
            assert expected[1][1]["edge_ids"].tolist() == kruskal(g, objective="max")
            for shards in (2, 3):
                record = upload(server, g, shards=shards)
                assert record["shards"] == shards, record
                parts = record["shard_residency"]
                assert [p["edges"] for p in parts] == [
                    list(r) for r in gpu_core.edge_ranges(g.weight.shape[0], shards)
                ]
                assert len({p["worker"] for p in parts}) == shards  # one shard per worker
                assert all(p["status"] == "resident" for p in parts)
                assert record["residency"]["device_bytes"] == sum(p["device_bytes"] for p in parts)
                for i, (task, params) in enumerate(tasks(g) + extra):
                    got = run(server, record["id"], task, params)
                    assert got[0]["task"] == task and got[0]["params"] == params
                    same_answer(got, expected[i])
                # the plain route and the JSON result read the same
                job = server.submit(record["id"], wait=30).json()
                result = server.client.get(f"/v1/jobs/{job['id']}/result").json()
                assert result["edge_ids"] == kruskal(g)
    # a disconnected graph has no dendrogram: the same 422-type failure as unsharded
    graph = random_graph(3, 40, 100, components=3)
    sharded = upload(server, graph, shards=2)
    response = server.client.post(
        f"/v1/graphs/{sharded['id']}/jobs", json={"task": "dendrogram", "params": {}}, params={"wait": 30}
    )
    job = response.json()
    assert job["status"] == "failed" and "connected graph" in job["error"]["message"], job


def test_weight_updates_are_refused_and_delete_drops_every_shard(server_factory: ServerFactory) -> None:
    server = server_factory(**WORKERS)
    graph = random_graph(5, 100, 600, dtype="int64")
    record = upload(server, graph, shards=3)
    weights = io.BytesIO()
    np.save(weights, graph.weight[::-1].copy(), allow_pickle=False)
    response = server.client.put(
        f"/v1/graphs/{record['id']}/weights", content=weights.getvalue(), headers={"content-type": OCTET}
    )
    assert response.status_code == 409, response.text
    problem = response.json()
    assert problem["code"] == "graph_sharded" and "sharded across 3 workers" in problem["detail"], problem
    assert server.client.get(f"/v1/graphs/{record['id']}").json()["weights_version"] == 0
    # more shards than workers: 422 naming the limit
    response = server.client.post(
        "/v1/graphs",
        params={"shards": 4},
        content=npz_body(graph.src, graph.dst, graph.weight, graph.num_vertices),
        headers={"content-type": OCTET},
    )
    assert response.status_code == 422 and "3" in response.json()["detail"], response.text
    # a bad edge in the last shard: 422 naming its index in the whole graph, nothing kept
    bad = random_graph(6, 100, 600, dtype="int64")
    bad.src[597] = 100
    response = server.client.post(
        "/v1/graphs",
        params={"shards": 3},
        content=npz_body(bad.src, bad.dst, bad.weight, bad.num_vertices),
        headers={"content-type": OCTET},
    )
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["field"] == "src" and problem["index"] == 597 and "src[597]" in problem["detail"], problem
    assert [g["id"] for g in server.client.get("/v1/graphs").json()["graphs"]] == [record["id"]]
    workers = server.client.get("/readyz").json()["workers"]
    assert [w["resident_graphs"] for w in workers] == [1, 1, 1]
    assert sorted(p.name for p in (server.data_dir / "spool" / "graphs").iterdir()) == [f"{record['id']}.npz"]
    assert server.client.delete(f"/v1/graphs/{record['id']}").status_code == 204
    deadline = time.monotonic() + 10
    while any(w["resident_graphs"] for w in server.client.get("/readyz").json()["workers"]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert server.client.get(f"/v1/graphs/{record['id']}").status_code == 404
    assert server.client.get("/v1/graphs").json()["graphs"] == []


def test_graphs_larger_than_a_worker_are_sharded_by_themselves(server_factory: ServerFactory) -> None:
    n, m = 2_000, 40_000
    whole = gpu_core.estimate_device_bytes(n, m, np.int32, backend="cpu").peak
    half = gpu_core.estimate_device_bytes(n, m // 2, np.int32, backend="cpu").peak
    cap = (whole + half) // 2  # a half fits a worker, the whole graph does not
    limits = {
        "MST_WORKER_MEMORY_BYTES": str(cap),
        "MST_MAX_UPLOAD_BYTES": "10000000",
        "MST_MAX_EDGES": "1000000",
    }
    server = server_factory(**limits, MST_CPU_WORKERS="2")
    rng = np.random.default_rng(9)
    big = EdgeGraph(
        rng.integers(0, n, m).astype(np.int32),
        rng.integers(0, n, m).astype(np.int32),
        rng.integers(-50, 50, m).astype(np.int32),
        n,
    )
    record = upload(server, big)
    assert record["shards"] == 2, record
    job, arrays = run(server, record["id"], "mst", {})
    expected = gpu_core.minimum_spanning_forest(big.src, big.dst, big.weight, num_vertices=n, backend="cpu")
    np.testing.assert_array_equal(arrays["edge_ids"], expected.edge_ids)
    np.testing.assert_array_equal(arrays["weights"], expected.weights)
    assert job["result"]["total_weight"] == expected.total_weight
    small = random_graph(1, 50, 200, dtype="int32")
    assert upload(server, small)["shards"] == 1
    # twice the edges do not fit even split over both workers: 413 that says so
    huge = EdgeGraph(np.tile(big.src, 2), np.tile(big.dst, 2), np.tile(big.weight, 2), n)
    problem = upload(server, huge, expect=413)
    assert problem["code"] == "graph_exceeds_worker_memory" and "all 2" in problem["detail"], problem
    # with ?shards=1 the large graph is refused as it was before sharding existed
    problem = upload(server, big, shards=1, expect=413)
    assert problem["code"] == "graph_exceeds_worker_memory", problem
    server.stop()
    # one worker: nothing to shard over, the same 413 as ever
    single = server_factory(**limits)
    assert upload(single, big, expect=413)["code"] == "graph_exceeds_worker_memory"


def test_shard_edges_above_shards_the_large_graphs_only(server_factory: ServerFactory) -> None:
    server = server_factory(MST_CPU_WORKERS="2", MST_SHARD_EDGES_ABOVE="500")
    small, large = random_graph(1, 60, 500, dtype="float32"), random_graph(2, 80, 501, dtype="float32")
    assert upload(server, small)["shards"] == 1
    record = upload(server, large)
    assert record["shards"] == 2
    _, arrays = run(server, record["id"], "mst", {})
    assert arrays["edge_ids"].tolist() == kruskal(large)
    # a text upload is parsed once, stored as npz and sharded the same way
    text = "".join(
        f"{s} {d} {w!r}\n"
        for s, d, w in zip(large.src.tolist(), large.dst.tolist(), large.weight.tolist(), strict=True)
    )
    response = server.client.post(
        "/v1/graphs", params={"format": "edgelist"}, content=text.encode(), headers={"content-type": OCTET}
    )
    assert response.status_code == 201, response.text
    assert response.json()["shards"] == 2 and response.json()["source_format"] == "edgelist"
    _, parsed = run(server, response.json()["id"], "mst", {})
    np.testing.assert_array_equal(parsed["edge_ids"], arrays["edge_ids"])
    # and a JSON upload, sharded on request although small
    body = {"src": small.src.tolist(), "dst": small.dst.tolist(), "weight": small.weight.tolist()}
    response = server.client.post("/v1/graphs", params={"shards": 2}, json=body)
    assert response.status_code == 201 and response.json()["shards"] == 2, response.text
    _, from_json = run(server, response.json()["id"], "mst", {"objective": "max"})
    assert from_json["edge_ids"].tolist() == kruskal(small, objective="max")


def test_a_killed_shard_worker_fails_the_job_it_ran_and_runs_the_steps_it_had_not_started(
    server_factory: ServerFactory,
) -> None:
    server = server_factory(**WORKERS, **FAST_HEARTBEAT, **CRASH_HOOK_ENV)
    graph = random_graph(8, 400, 6000, dtype="int64", num_weights=10)
    record = upload(server, graph, shards=3)
    expected = run(server, record["id"], "mst", {})
    victim_index = record["shard_residency"][1]["worker"]
    victim = worker_pids(server)[victim_index]
    os.kill(victim, signal.SIGSTOP)  # its step is handed over but never read
    job_id = server.submit(record["id"]).json()["id"]
    assert server.poll(job_id, until=("running", *FINAL))["status"] == "running"
    os.kill(victim, signal.SIGKILL)
    job = server.poll(job_id)  # the step had not started: it ran on the worker's next process
    assert job["status"] == "succeeded", job
    same_answer((job, result_arrays(server, job_id)), expected)

    weight = graph.weight.copy()
    lo, hi = record["shard_residency"][1]["edges"]
    weight[(lo + hi) // 2] = KILL_WEIGHT  # shard 1's step kills its worker
    killer = upload(server, EdgeGraph(graph.src, graph.dst, weight, graph.num_vertices), shards=3)
    victim_index = killer["shard_residency"][1]["worker"]
    victim = worker_pids(server)[victim_index]
    job_id = server.submit(killer["id"]).json()["id"]
    job = server.poll(job_id)
    assert job["status"] == "failed" and job["error"]["type"] == "worker_lost", job
    deadline = time.monotonic() + 60
    while True:  # the worker comes back and reloads its shards from the spool
        ready = server.client.get("/readyz")
        back = ready.status_code == 200 and worker_pids(server)[victim_index] != victim
        if back and all(
            server.client.get(f"/v1/graphs/{g}").json()["residency"]["status"] == "resident"
            for g in (record["id"], killer["id"])
        ):
            break
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.05)
    assert server.client.get(f"/v1/jobs/{job_id}").json()["status"] == "failed"  # not retried
    same_answer(run(server, record["id"], "mst", {}), expected)
    _, arrays = run(server, record["id"], "mst", {"objective": "max"})
    assert arrays["edge_ids"].tolist() == kruskal(graph, objective="max")


def test_a_queued_job_is_cancelled_and_a_restart_keeps_the_graph_sharded(
    server_factory: ServerFactory, tmp_path: Any
) -> None:
    server = server_factory(**WORKERS, **CRASH_HOOK_ENV)
    graph = random_graph(4, 300, 3000, dtype="float64", num_weights=None)
    weight = server.hold_weight()
    graph.weight[[7, 2990]] = weight  # in both shards: a job's steps hold there while the gate is there
    record = upload(server, graph, shards=2)
    expected = run(server, record["id"], "mst", {"objective": "max"})
    with server.hold(weight):
        first = server.submit(record["id"]).json()["id"]
        server.wait_held(weight)  # its first shard's step began: the job runs
        assert server.client.get(f"/v1/jobs/{first}").json()["status"] == "running"
        second = server.submit(record["id"]).json()["id"]
        assert server.client.get(f"/v1/jobs/{second}").json()["status"] == "queued"
        cancelled = server.client.delete(f"/v1/jobs/{second}")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled", cancelled.text
        assert server.client.delete(f"/v1/jobs/{first}").status_code == 409  # running
    assert server.poll(first)["status"] == "succeeded"
    assert server.client.get(f"/v1/jobs/{second}").json()["status"] == "cancelled"
    server.stop()

    again = server_factory(data_dir=server.data_dir, **WORKERS)
    described = again.client.get(f"/v1/graphs/{record['id']}").json()
    assert described["shards"] == 2 and len(described["shard_residency"]) == 2, described
    same_answer(run(again, record["id"], "mst", {"objective": "max"}), expected)
    # the first job's result was stored and is served after the restart
    np.testing.assert_array_equal(result_arrays(again, first)["edge_ids"], kruskal(graph))
    # fewer workers than shards after a restart: two shards share a worker, same answers
    again.stop()
    fewer = server_factory(data_dir=server.data_dir, MST_CPU_WORKERS="1")
    same_answer(run(fewer, record["id"], "mst", {"objective": "max"}), expected)


@pytest.mark.gpu
@pytest.mark.slow
def test_two_gpus_hold_a_graph_larger_than_one_and_answer_exactly(server_factory: ServerFactory) -> None:
    """On 2 GPUs, with MST_WORKER_MEMORY_BYTES so the graph does not fit one: sharded by itself,
    every answer the engine's. Prints the sizes and times (run with -s to see them)."""
    cupy = pytest.importorskip("cupy")
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs 2 GPUs")
    n, m = 1 << 20, 8_000_000
    whole = gpu_core.estimate_device_bytes(n, m, np.int32, backend="gpu").peak
    half = gpu_core.estimate_device_bytes(n, m // 2, np.int32, backend="gpu").peak
    union = gpu_core.estimate_device_bytes(n, 2 * (n - 1), np.int32, backend="gpu").peak
    cap = (max(half, union) + whole) // 2
    assert max(half, union) < cap < whole
    server = server_factory(
        MST_BACKEND="gpu",
        MST_GPUS="0,1",
        MST_WORKER_MEMORY_BYTES=str(cap),
        MST_MAX_EDGES=str(50_000_000),
        MST_MAX_UPLOAD_BYTES=str(2 << 30),
        MST_MAX_WAIT_S="300",
    )
    rng = np.random.default_rng(12)
    graph = EdgeGraph(
        rng.integers(0, n, m).astype(np.int32),
        rng.integers(0, n, m).astype(np.int32),
        rng.integers(0, 1000, m).astype(np.int32),  # many ties
        n,
    )
    started = time.perf_counter()
    record = upload(server, graph)
    upload_s = time.perf_counter() - started
    assert record["shards"] == 2, record
    assert {p["backend"] for p in record["shard_residency"]} == {"gpu"}
    assert len({p["worker"] for p in record["shard_residency"]}) == 2
    reference = gpu_core.Graph(graph.src, graph.dst, graph.weight, n, backend="cpu")
    exclude = list(range(0, m, 1000))
    steps: list[tuple[str, dict[str, Any]]] = [
        ("mst", {}),
        ("mst", {"objective": "max"}),
        ("components", {"exclude": exclude}),
    ]
    for task, params in steps:
        started = time.perf_counter()
        job, arrays = run(server, record["id"], task, params)
        print(
            f"2 GPUs, {m} edges in 2 shards: upload {upload_s:.2f} s; {task} {params.get('objective', '')} "
            f"job {time.perf_counter() - started:.3f} s, compute {job['result']['compute_ms']:.1f} ms"
        )
        if task == "mst":
            forest = reference.minimum_spanning_forest(objective=params.get("objective", "min"))
            np.testing.assert_array_equal(arrays["edge_ids"], forest.edge_ids)
            np.testing.assert_array_equal(arrays["weights"], forest.weights)
        else:
            np.testing.assert_array_equal(arrays["labels"], reference.component_labels(exclude=exclude))
    # the same graph forced unsharded is refused (it does not fit one worker), as before sharding
    assert upload(server, graph, shards=1, expect=413)["code"] == "graph_exceeds_worker_memory"


def test_graphs_spread_over_cpu_workers_by_what_each_holds(server_factory: ServerFactory) -> None:
    """CPU workers share the host's memory, so a new graph goes to the one holding the fewest
    bytes: graphs of one size uploaded one after another land evenly, each worker busy with its
    own graphs' jobs (by the workers' free memory they piled up on one or two)."""
    server = server_factory(MST_CPU_WORKERS="3")
    # ready is one worker taking requests (worker 0 starts first); graphs go to workers taking them
    deadline = time.monotonic() + 60
    while not all(w["state"] == "ready" for w in server.client.get("/readyz").json()["workers"]):
        assert time.monotonic() < deadline, server.client.get("/readyz").json()
        time.sleep(0.05)
    placed = []
    for seed in range(6):
        graph = random_graph(seed, 500, 4_000, dtype=np.int32)
        record = server.upload_npz(graph.src, graph.dst, graph.weight, graph.num_vertices)
        placed.append(record["residency"]["worker"])
    assert sorted(placed) == [0, 0, 1, 1, 2, 2], placed
    # each worker's count reaches the board after its reply (its numbers are published between runs)
    deadline = time.monotonic() + 10
    while True:
        held = [w["resident_graphs"] for w in server.client.get("/readyz").json()["workers"]]
        if held == [2, 2, 2]:
            break
        assert time.monotonic() < deadline, held
        time.sleep(0.05)
