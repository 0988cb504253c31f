"""/v1/jobs against a live server: ?wait, status, results, cancel, 409s, concurrency."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest

from service.timing import parse_header
from tests.utils.graphs import random_graph

from ..conftest import ServerFactory
from ..live import OCTET, LiveServer
from ..oracle import check_forest
from .test_graphs import problem


@contextmanager
def frozen_worker(live: LiveServer, graph_id: str | None = None) -> Iterator[None]:
    """SIGSTOP the graph's worker (worker 0 without one) briefly: its jobs stay queued meanwhile."""
    pid = live.worker_pid(graph_id)
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def wait_status(live: LiveServer, job_id: str, status: str, timeout: float = 10.0) -> None:
    live.poll(job_id, timeout, until=(status,))


def test_wait_answers_200_with_the_finished_job(live: LiveServer) -> None:
    graph = live.upload_npz([0, 1, 2], [1, 2, 0], [3, 1, 2])
    response = live.submit(graph["id"], wait=30)
    assert response.status_code == 200
    job = response.json()
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["status"] == "succeeded" and job["error"] is None
    assert job["result"]["num_edges"] == 2 and job["result"]["total_weight"] == 3
    assert job["result"]["num_components"] == 1 and job["result"]["compute_ms"] >= 0
    assert live.client.get(f"/v1/jobs/{job['id']}").json() == job


def test_wait_times_out_with_202(live: LiveServer) -> None:
    graph = live.upload_npz([0, 1], [1, 2], [1, 1])
    with frozen_worker(live, graph["id"]):
        started = time.monotonic()
        response = live.submit(graph["id"], wait=0.3)
        assert time.monotonic() - started >= 0.3
        assert response.status_code == 202 and response.json()["status"] in ("queued", "running")
    assert live.poll(response.json()["id"])["status"] == "succeeded"


def test_wait_must_be_a_non_negative_number(live: LiveServer) -> None:
    graph = live.upload_npz([0], [1], [1])
    for bad in ("-1", "soon"):
        body = problem(
            live.client.post(f"/v1/graphs/{graph['id']}/mst", params={"wait": bad}), 422, "invalid_request"
        )
        assert body["field"] == "wait"


def test_submit_without_wait_answers_202_with_the_queued_job(live: LiveServer) -> None:
    graph = live.upload_npz([0, 1], [1, 2], [5, 4])
    response = live.client.post(f"/v1/graphs/{graph['id']}/mst")
    assert response.status_code in (200, 202)  # 200 only if it finished before the answer was built
    assert response.json()["status"] in ("queued", "running", "succeeded")


@pytest.mark.parametrize("wait", ["-1", "abc", "nan"])
def test_bad_waits_get_a_422_naming_wait(live: LiveServer, wait: str) -> None:
    graph = live.upload_npz([0, 1], [1, 2], [5, 4])
    response = live.client.post(f"/v1/graphs/{graph['id']}/mst", params={"wait": wait})
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["field"] == "wait"


def test_cancel_result_409_and_graph_delete_with_queued_jobs(live: LiveServer) -> None:
    other = live.upload_npz([0, 1], [1, 2], [1, 2])
    with live.hold() as weight:
        graph = live.upload_npz([0, 1, 2, 3], [1, 2, 3, 0], [4.0, 3.0, 2.0, float(weight)])
        running = live.submit(graph["id"]).json()
        live.wait_held(weight)
        wait_status(live, running["id"], "running")  # its worker began it: the jobs behind it wait
        queued = live.submit(graph["id"]).json()
        doomed = live.submit(graph["id"]).json()
        assert live.client.get(f"/v1/jobs/{queued['id']}").json()["status"] == "queued"

        assert (
            "queued"
            in problem(live.client.get(f"/v1/jobs/{queued['id']}/result"), 409, "job_not_finished")["detail"]
        )
        problem(live.client.get(f"/v1/jobs/{running['id']}/result"), 409, "job_not_finished")
        problem(live.client.delete(f"/v1/jobs/{running['id']}"), 409, "job_not_cancellable")

        cancelled = live.client.delete(f"/v1/jobs/{queued['id']}")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        assert cancelled.json()["finished_at"] is not None
        assert live.client.delete(f"/v1/jobs/{queued['id']}").json()["status"] == "cancelled"  # idempotent
        problem(live.client.get(f"/v1/jobs/{queued['id']}/result"), 409, "job_not_finished")

        # deleting the graph cancels its queued job; the running one still finishes
        assert live.client.delete(f"/v1/graphs/{graph['id']}").status_code == 204
        gone = live.client.get(f"/v1/jobs/{doomed['id']}").json()
        assert gone["status"] == "cancelled" and gone["error"]["type"] == "graph_deleted"
    done = live.poll(running["id"])  # begun before the graph was deleted: it finishes
    assert done["status"] == "succeeded" and done["result"]["total_weight"] == 5.0 + weight
    result = live.client.get(f"/v1/jobs/{running['id']}/result").json()
    assert result["edge_ids"] == [1, 2, 3]
    problem(live.client.delete(f"/v1/jobs/{running['id']}"), 409, "job_not_cancellable")
    assert live.poll(queued["id"])["status"] == "cancelled"  # never ran
    assert live.poll(doomed["id"])["status"] == "cancelled"
    assert live.submit(other["id"], wait=30).json()["status"] == "succeeded"


def test_unknown_job_is_404(live: LiveServer) -> None:
    for method, path in (("GET", "/v1/jobs/j_x"), ("GET", "/v1/jobs/j_x/result"), ("DELETE", "/v1/jobs/j_x")):
        problem(live.client.request(method, path), 404, "job_not_found")


def test_concurrent_clients_on_several_graphs(live: LiveServer) -> None:
    graphs = [
        random_graph(seed, 400, 3000, dtype=dt, num_weights=None, components=2)
        for seed, dt in ((1, "int64"), (2, "float64"), (3, "int32"))
    ]
    ids = [live.upload_npz(g.src, g.dst, g.weight, g.num_vertices)["id"] for g in graphs]

    def client_run(k: int) -> list[tuple[int, str]]:
        out = []
        with httpx.Client(base_url=live.url, timeout=60) as c:
            for i in range(6):
                which = (k + i) % len(ids)
                r = c.post(f"/v1/graphs/{ids[which]}/mst", params={"wait": 30} if i % 2 else None)
                assert r.status_code in (200, 202), r.text
                out.append((which, r.json()["id"]))
        return out

    with ThreadPoolExecutor(6) as pool:
        submitted = [item for chunk in pool.map(client_run, range(6)) for item in chunk]
    assert len({job_id for _, job_id in submitted}) == 36
    totals: dict[int, set[object]] = {}
    for which, job_id in submitted:
        job = live.poll(job_id)
        assert job["status"] == "succeeded", job
        assert job["graph_id"] == ids[which]
        totals.setdefault(which, set()).add(job["result"]["total_weight"])
    for which, g in enumerate(graphs):
        assert len(totals[which]) == 1
        job_id = next(j for w, j in submitted if w == which)
        result = live.client.get(f"/v1/jobs/{job_id}/result").json()
        check_forest(
            result["edge_ids"], result["weights"], result["total_weight"], result["num_components"], g
        )


@pytest.mark.parametrize(
    ("accept", "binary"),
    [
        (None, False),
        ("application/json", False),
        ("*/*", False),
        ("application/octet-stream", True),
        ("application/json;q=0.5, application/octet-stream", True),
        ("application/octet-stream;q=0.2, application/json", False),
    ],
)
def test_result_media_type_follows_accept(live: LiveServer, accept: str | None, binary: bool) -> None:
    graph = live.upload_npz([0, 1], [1, 2], [1, 2])
    job = live.submit(graph["id"], wait=30).json()
    headers = {"accept": accept} if accept else {}
    response = live.client.get(f"/v1/jobs/{job['id']}/result", headers=headers)
    assert response.status_code == 200
    expected = "application/octet-stream" if binary else "application/json"
    assert response.headers["content-type"] == expected


def test_a_result_that_cannot_be_stored_is_computed_again_when_asked_for(
    server_factory: ServerFactory,
) -> None:
    server = server_factory()
    graph = server.upload_npz([0, 1, 2], [1, 2, 0], [3, 1, 2])
    results = server.data_dir / "spool" / "results"
    results.rename(results.with_name("results.away"))
    results.write_bytes(b"")  # a file where the folder was: the worker's rename into it fails
    try:
        answered = server.submit(graph["id"], wait=30)
        # the answer comes with the forest's summary, before the file is written behind it
        assert answered.status_code == 200 and answered.json()["status"] == "succeeded"
        job_id = answered.json()["id"]
        # asked for, it is computed again, which cannot be stored either: 503, and the job stays succeeded
        body = problem(server.client.get(f"/v1/jobs/{job_id}/result"), 503, "service_unavailable")
        assert "computing it again failed" in body["detail"] and "NotADirectoryError" in body["detail"]
        job = server.client.get(f"/v1/jobs/{job_id}").json()
        assert job["status"] == "succeeded" and job["error"] is None
    finally:
        results.unlink()
        results.with_name("results.away").rename(results)
    edge_ids, weights, _ = server.result_npz(job_id)  # computed again, now stored
    assert edge_ids.tolist() == [1, 2] and weights.tolist() == [1, 2]
    assert (results / f"{job_id}.npz").exists()
    again = server.submit(graph["id"], wait=30).json()  # the worker serves on, and stores again
    assert again["status"] == "succeeded"
    assert server.result_npz(again["id"])[0].tolist() == [1, 2]


def test_a_waited_for_job_cancelled_by_its_graph_delete_answers_and_is_recorded(live: LiveServer) -> None:
    with ThreadPoolExecutor(1) as pool:
        with live.hold() as weight:
            graph = live.upload_npz([0, 1, 2], [1, 2, 0], [1, 2, weight])
            running = live.submit(graph["id"]).json()
            live.wait_held(weight)
            waiting = pool.submit(live.submit, graph["id"], 30)  # queued behind it; its id not out yet
            time.sleep(0.2)
            assert live.client.delete(f"/v1/graphs/{graph['id']}").status_code == 204
            time.sleep(0.2)
            assert not waiting.done()
        answer = waiting.result(timeout=30)
    assert answer.status_code == 200
    job = answer.json()
    assert job["status"] == "cancelled" and job["error"]["type"] == "graph_deleted"
    assert live.client.get(f"/v1/jobs/{job['id']}").json() == job  # recorded when it finished
    assert live.poll(running["id"])["status"] == "succeeded"


def test_job_routes_say_where_their_time_went(live: LiveServer) -> None:
    """``Server-Timing`` on a ``?wait=`` submission (the job's way through the service, the
    worker's own time in it), its status and its result; each part >= 0, together no more than
    the request took as the client saw it."""
    graph = random_graph(5, 300, 2_000, dtype="int32", num_weights=40)
    graph_id = live.upload_npz(graph.src, graph.dst, graph.weight, graph.num_vertices)["id"]

    started = time.perf_counter()
    response = live.submit(graph_id, wait=30)
    elapsed_ms = (time.perf_counter() - started) * 1e3
    assert response.status_code == 200, response.text
    steps = parse_header(response.headers["server-timing"])
    parts = ["submit", "queue", "compute", "reply", "response"]
    assert list(steps) == parts, steps
    assert all(ms >= 0 for ms in steps.values()) and sum(steps.values()) <= elapsed_ms
    # the worker's time holds the engine's (the job's compute_ms) and is not zero
    assert 0 < response.json()["result"]["compute_ms"] <= steps["compute"]
    job_id = response.json()["id"]

    for path, headers, expected in (
        (f"/v1/jobs/{job_id}", {}, ["lookup", "encode"]),
        (f"/v1/jobs/{job_id}/result", {"accept": OCTET}, ["lookup", "store", "encode"]),
        (f"/v1/jobs/{job_id}/result", {}, ["lookup", "store", "encode"]),
    ):
        started = time.perf_counter()
        answer = live.client.get(path, headers=headers)
        elapsed_ms = (time.perf_counter() - started) * 1e3
        assert answer.status_code == 200, answer.text
        steps = parse_header(answer.headers["server-timing"])
        assert list(steps) == expected, (path, steps)
        assert all(ms >= 0 for ms in steps.values()) and sum(steps.values()) <= elapsed_ms
    result = live.client.get(f"/v1/jobs/{job_id}/result").json()
    forest = (result["edge_ids"], result["weights"], result["total_weight"], result["num_components"])
    check_forest(*forest, graph)


def test_a_202_says_how_long_the_job_waited(live: LiveServer) -> None:
    graph = live.upload_npz([0, 1], [1, 2], [1, 1])
    with frozen_worker(live, graph["id"]):
        response = live.submit(graph["id"], wait=0.2)
    assert response.status_code == 202, response.text
    steps = parse_header(response.headers["server-timing"])
    names = list(steps)
    assert names[0] == "submit" and names[-1] == "wait" and steps["wait"] >= 150, steps
    wait_status(live, response.json()["id"], "succeeded")
