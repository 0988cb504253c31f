"""Every guarantee across the API processes of one service (issue 44): related requests sent through
different processes, on a live server of two API processes and two CPU workers.

A client reaches a given API process by opening connections until the kernel hands one to it
(each answer says which process gave it: ``X-MST-API-Process``); a keep-alive connection then stays
with that process. What is checked, each through at least two processes:

* a job submitted through one is read, awaited (``?wait=`` on its status), cancelled, and its
  result fetched (as its file is written, and after) through the other;
* a key's quotas hold under concurrent uploads landing on both: 24 against a quota of 6 accept
  exactly 6; the queued-jobs quota counts jobs submitted through both;
* a job computes on the weights its graph had when it was submitted, whichever process took the
  update; ownership (404 for another key) holds everywhere;
* ``/metrics`` counts every process: the same sums whichever process is scraped;
* a killed API process loses nothing acknowledged: its open request ends with an error, the other
  serves on, it is replaced, and the jobs it queued finish;
* after a restart every acknowledged graph, point set, model, job and result is there; with
  MST_RESULT_DIR (results on a file system of their own) too, and lost results are computed again.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from service.timing import parse_header
from tests.utils.graphs import random_graph

from .conftest import ServerFactory
from .live import CRASH_HOOK_ENV, OCTET, LiveServer, npz_body
from .oracle import check_forest
from .test_queries import kruskal, npy_body

TWO = {"MST_API_WORKERS": "2", "MST_CPU_WORKERS": "2", **CRASH_HOOK_ENV}
KEY_A = "multi-key-a-0123456789"
KEY_B = "multi-key-b-9876543210"


def through(server: LiveServer, slot: int, key: str | None = None, tries: int = 200) -> httpx.Client:
    """A keep-alive client whose connection is served by API process ``slot``."""
    headers = {} if key is None else {"authorization": f"Bearer {key}"}
    for _ in range(tries):
        client = httpx.Client(base_url=server.url, timeout=60, headers=headers)
        if client.get("/healthz").json()["api_process"] == slot:
            return client
        client.close()
    raise AssertionError(f"no connection reached API process {slot} in {tries} tries")


@contextmanager
def processes(server: LiveServer, key: str | None = None) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    first, second = through(server, 0, key), through(server, 1, key)
    try:
        yield first, second
    finally:
        first.close()
        second.close()


def upload(http: httpx.Client, graph: Any) -> dict[str, Any]:
    body = npz_body(graph.src, graph.dst, graph.weight, graph.num_vertices)
    response = http.post("/v1/graphs", content=body, headers={"content-type": OCTET})
    assert response.status_code == 201, response.text
    record: dict[str, Any] = response.json()
    return record


def poll(http: httpx.Client, job_id: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.01)


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One server of two API processes and two workers for the module's tests that need no keys."""
    from .conftest import SHARED_ENV

    root = tmp_path_factory.mktemp("two")
    server = LiveServer(root / "data", {**SHARED_ENV, **TWO}, root / "server.log").start()
    yield server
    server.stop()


def test_a_job_is_read_awaited_and_fetched_through_another_process(two: LiveServer) -> None:
    graph = random_graph(1, 300, 2_000, dtype="float64", num_weights=50)
    tree = kruskal(graph)
    with processes(two) as (p0, p1):
        record = upload(p0, graph)
        assert p1.get(f"/v1/graphs/{record['id']}").json()["id"] == record["id"]
        # submitted through 0 (202), its status awaited through 1
        job = p0.post(f"/v1/graphs/{record['id']}/mst").json()
        done = p1.get(f"/v1/jobs/{job['id']}", params={"wait": 30}).json()
        assert done["status"] == "succeeded" and done["result"]["num_edges"] == len(tree)
        for http in (p1, p0):
            result = http.get(f"/v1/jobs/{job['id']}/result").json()
            check_forest(
                result["edge_ids"], result["weights"], result["total_weight"], result["num_components"], graph
            )
        # answered through 0 (?wait=), its result fetched through 1 at once: its file may still be being
        # written by the worker, which 1 asks to say when it is
        for _ in range(5):
            answered = p0.post(f"/v1/graphs/{record['id']}/mst", params={"wait": 30}).json()
            response = p1.get(f"/v1/jobs/{answered['id']}/result", headers={"accept": OCTET})
            assert response.status_code == 200, response.text
            with np.load(io.BytesIO(response.content)) as npz:
                assert npz["edge_ids"].tolist() == tree


def test_a_job_queued_through_one_process_is_cancelled_and_its_graph_deleted_through_another(
    two: LiveServer,
) -> None:
    with processes(two) as (p0, p1), two.hold() as weight:
        held = upload(p0, random_graph(2, 50, 200, dtype="int64"))
        graph = p0.post(
            "/v1/graphs", json={"src": [0, 1, 2], "dst": [1, 2, 0], "weight": [1, 2, weight]}
        ).json()
        running = p0.post(f"/v1/graphs/{graph['id']}/mst").json()
        two.wait_held(weight)
        queued = p0.post(f"/v1/graphs/{graph['id']}/mst").json()
        doomed = p0.post(f"/v1/graphs/{graph['id']}/mst").json()
        assert p1.get(f"/v1/jobs/{running['id']}").json()["status"] == "running"
        assert p1.delete(f"/v1/jobs/{running['id']}").status_code == 409
        cancelled = p1.delete(f"/v1/jobs/{queued['id']}")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        assert p0.get(f"/v1/jobs/{queued['id']}").json()["status"] == "cancelled"
        assert p1.delete(f"/v1/graphs/{graph['id']}").status_code == 204
        gone = p0.get(f"/v1/jobs/{doomed['id']}").json()
        assert (gone["status"], gone["error"]["type"]) == ("cancelled", "graph_deleted")
        assert p0.get(f"/v1/graphs/{graph['id']}").status_code == 404
    p0 = through(two, 0)
    assert poll(p0, running["id"])["status"] == "succeeded"  # begun before the delete
    assert poll(p0, queued["id"])["status"] == "cancelled"
    p0.close()
    assert held["id"]


def test_a_job_computes_on_the_weights_it_was_submitted_against_whichever_process_took_the_update(
    two: LiveServer,
) -> None:
    graph = random_graph(3, 400, 3_000, dtype="int32", num_weights=None)
    with two.hold() as weight, processes(two) as (p0, p1), ThreadPoolExecutor(1) as pool:
        graph.weight[5] = weight  # its jobs hold while the gate is there
        new = np.ascontiguousarray(np.asarray(graph.weight)[::-1])
        record = upload(p0, graph)
        running = p0.post(f"/v1/graphs/{record['id']}/mst").json()
        two.wait_held(weight)
        before = p0.post(f"/v1/graphs/{record['id']}/mst").json()  # acknowledged before the update
        update = pool.submit(
            p1.put,
            f"/v1/graphs/{record['id']}/weights",
            content=npy_body(new),
            headers={"content-type": OCTET},
        )
        time.sleep(0.3)
        assert not update.done()  # it waits its turn on the worker, behind the jobs
        (two.hold_dir / str(weight)).unlink()  # the running job goes on
        answer = update.result(timeout=60)
        assert answer.status_code == 200 and answer.json()["weights_version"] == 1, answer.text
        after = p0.post(f"/v1/graphs/{record['id']}/mst", params={"wait": 30}).json()
        first = poll(p1, before["id"])
        assert (poll(p1, running["id"])["weights_version"], first["weights_version"]) == (0, 0)
        assert after["weights_version"] == 1
        assert p1.get(f"/v1/jobs/{before['id']}/result").json()["edge_ids"] == kruskal(graph)
        assert p1.get(f"/v1/jobs/{after['id']}/result").json()["edge_ids"] == kruskal(graph, new)


def test_metrics_count_every_process_the_same_whichever_is_scraped(two: LiveServer) -> None:
    def finished(http: httpx.Client) -> float:
        for line in http.get("/metrics").text.splitlines():
            if line.startswith('mst_jobs_finished_total{status="succeeded"}'):
                return float(line.split()[-1])
        return 0.0

    with processes(two) as (p0, p1):
        graph = p0.post("/v1/graphs", json={"src": [0, 1], "dst": [1, 2], "weight": [1, 2]}).json()
        before = finished(p0)
        for http in (p0, p1, p0, p1, p1):
            assert (
                http.post(f"/v1/graphs/{graph['id']}/mst", params={"wait": 30}).json()["status"]
                == "succeeded"
            )
        assert finished(p0) == finished(p1) == before + 5
        texts = [http.get("/metrics").text for http in (p0, p1)]
    requests = [
        sum(
            float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith('mst_http_requests_total{method="POST",route="/v1/graphs/{graph_id}/mst"')
        )
        for text in texts
    ]
    assert requests[0] == requests[1] >= 5


def test_a_killed_api_process_loses_nothing_acknowledged_and_is_replaced(two: LiveServer) -> None:
    with processes(two) as (p0, p1), two.hold() as weight:
        pid = p0.get("/healthz").json()["pid"]
        graph = p0.post(
            "/v1/graphs", json={"src": [0, 1, 2], "dst": [1, 2, 0], "weight": [1, 2, weight]}
        ).json()
        held = p0.post(f"/v1/graphs/{graph['id']}/mst").json()  # acknowledged: recorded, queued on the worker
        two.wait_held(weight)
        queued = p0.post(f"/v1/graphs/{graph['id']}/mst").json()
        waiting: list[Any] = []

        def wait_on_0() -> None:
            try:
                waiting.append(p0.post(f"/v1/graphs/{graph['id']}/mst", params={"wait": 30}))
            except httpx.HTTPError as exc:
                waiting.append(exc)

        thread = threading.Thread(target=wait_on_0)
        thread.start()
        time.sleep(0.3)
        __import__("os").kill(pid, signal.SIGKILL)
        thread.join(30)
        assert waiting and isinstance(waiting[0], httpx.HTTPError), waiting  # its open request: an error
        assert p1.get("/healthz").status_code == 200  # the other serves on
        assert p1.get(f"/v1/jobs/{held['id']}").json()["status"] == "running"
    # the held job and the one queued behind it were acknowledged: they finish, recorded by their worker
    p1 = through(two, 1)
    assert poll(p1, held["id"])["status"] == "succeeded"
    assert poll(p1, queued["id"])["status"] == "succeeded"
    p1.close()
    deadline = time.monotonic() + 60
    while True:  # a new API process in slot 0
        try:
            p0 = through(two, 0, tries=20)
            again = p0.get("/healthz").json()
            assert again["pid"] != pid
            assert p0.get(f"/v1/jobs/{queued['id']}").json()["status"] == "succeeded"
            p0.close()
            break
        except (AssertionError, httpx.HTTPError):
            assert time.monotonic() < deadline, two.log()
            time.sleep(0.2)


def test_quotas_hold_under_concurrent_requests_through_both_processes(server_factory: ServerFactory) -> None:
    server = server_factory(
        **TWO, MST_API_KEYS=f"{KEY_A},{KEY_B}", MST_QUOTA_GRAPHS="6", MST_QUOTA_QUEUED_JOBS="2"
    )
    clients = [through(server, slot, KEY_A) for slot in (0, 1) for _ in range(4)]
    try:
        body = npz_body([0, 1], [1, 2], [1.0, 2.0])

        def post(i: int) -> int:
            response = clients[i % len(clients)].post(
                "/v1/graphs", content=body, headers={"content-type": OCTET}
            )
            return response.status_code

        with ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(post, range(24)))
        assert sorted(codes) == [201] * 6 + [429] * 18, codes
        graphs = clients[0].get("/v1/graphs").json()["graphs"]
        assert len(graphs) == 6 and len(clients[4].get("/v1/graphs").json()["graphs"]) == 6
        # the queued-jobs quota: jobs through both processes count together
        with server.hold() as weight:
            held = clients[0].post("/v1/graphs", json={"src": [0, 1], "dst": [1, 2], "weight": [1, weight]})
            assert held.status_code == 429  # (its graph quota is used up: delete one first)
            assert clients[0].delete(f"/v1/graphs/{graphs[0]['id']}").status_code == 204
            held = clients[0].post("/v1/graphs", json={"src": [0, 1], "dst": [1, 2], "weight": [1, weight]})
            assert held.status_code == 201, held.text
            first = clients[0].post(f"/v1/graphs/{held.json()['id']}/mst")
            server.wait_held(weight)
            second = clients[4].post(f"/v1/graphs/{held.json()['id']}/mst")
            assert (first.status_code, second.status_code) == (202, 202)
            third = clients[5].post(f"/v1/graphs/{graphs[1]['id']}/mst")
            assert third.status_code == 429 and third.json()["quota"] == "MST_QUOTA_QUEUED_JOBS"
    finally:
        for client in clients:
            client.close()


def test_ownership_holds_in_every_process(server_factory: ServerFactory) -> None:
    server = server_factory(**TWO, MST_API_KEYS=f"{KEY_A},{KEY_B}")
    a0, b1 = through(server, 0, KEY_A), through(server, 1, KEY_B)
    b0 = through(server, 0, KEY_B)
    try:
        graph = a0.post("/v1/graphs", json={"src": [0, 1], "dst": [1, 2], "weight": [1, 2]}).json()
        job = a0.post(f"/v1/graphs/{graph['id']}/mst", params={"wait": 30}).json()
        for b in (b0, b1):
            for method, path in (
                ("GET", f"/v1/graphs/{graph['id']}"),
                ("POST", f"/v1/graphs/{graph['id']}/mst"),
                ("DELETE", f"/v1/graphs/{graph['id']}"),
                ("GET", f"/v1/jobs/{job['id']}"),
                ("GET", f"/v1/jobs/{job['id']}/result"),
                ("DELETE", f"/v1/jobs/{job['id']}"),
            ):
                assert b.request(method, path).status_code == 404, (method, path)
            assert b.get("/v1/graphs").json()["graphs"] == []
    finally:
        for client in (a0, b1, b0):
            client.close()


def test_after_a_restart_every_acknowledged_thing_is_there(server_factory: ServerFactory) -> None:
    server = server_factory(**TWO)
    points = np.random.default_rng(4).random((300, 2))
    with processes(server) as (p0, p1):
        graph = upload(p0, random_graph(5, 200, 900, dtype="int64", num_weights=None))
        point_set = p1.post("/v1/points", json={"points": points.tolist()}).json()
        model = p0.post(f"/v1/points/{point_set['id']}/models", json={"min_cluster_size": 10}).json()
        job = p1.post(f"/v1/graphs/{graph['id']}/mst", params={"wait": 30}).json()
        result = p0.get(f"/v1/jobs/{job['id']}/result").json()
        clustered = p0.post(f"/v1/points/{point_set['id']}/jobs", params={"wait": 30},
                            json={"task": "hdbscan", "params": {"min_cluster_size": 10}}).json()  # fmt: skip
        prediction = p1.post(f"/v1/points/{point_set['id']}/models/{model['id']}/predict",
                             json={"points": points[:5].tolist()}).json()  # fmt: skip
    for sig in (signal.SIGTERM, signal.SIGKILL):
        assert server.proc is not None
        children = _children(server.proc.pid)
        assert len(children) >= 2, children  # its API processes (and workers)
        server.stop(sig)
        _until_gone(children)  # a SIGKILLed supervisor's API processes end too: none keeps the port
        server = server_factory(data_dir=server.data_dir, **TWO)
        with processes(server) as (p0, p1):
            for http in (p0, p1):
                assert http.get(f"/v1/graphs/{graph['id']}").status_code == 200
                assert http.get(f"/v1/points/{point_set['id']}").status_code == 200
                assert (
                    http.get(f"/v1/points/{point_set['id']}/models/{model['id']}").json()["id"] == model["id"]
                )
                assert http.get(f"/v1/jobs/{job['id']}").json() == job
                assert http.get(f"/v1/jobs/{job['id']}/result").json() == result
                assert http.get(f"/v1/jobs/{clustered['id']}").json()["status"] == "succeeded"
                again = http.post(f"/v1/points/{point_set['id']}/models/{model['id']}/predict",
                                  json={"points": points[:5].tolist()}).json()  # fmt: skip
                assert again["labels"] == prediction["labels"]


def test_a_wait_answer_says_where_its_time_went_in_every_process(two: LiveServer) -> None:
    with processes(two) as (p0, p1):
        graph = p0.post("/v1/graphs", json={"src": [0, 1], "dst": [1, 2], "weight": [1, 2]}).json()
        for http in (p0, p1):
            answer = http.post(f"/v1/graphs/{graph['id']}/mst", params={"wait": 30})
            steps = parse_header(answer.headers["server-timing"])
            assert list(steps) == ["submit", "queue", "compute", "reply", "response"], steps


def _children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes (Linux's /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _until_gone(pids: list[int], timeout: float = 30.0) -> None:
    """Wait until every one of ``pids`` has exited (a zombie nobody reaps counts as exited)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                alive.append(pid)
        if not alive:
            return
        assert time.monotonic() < deadline, f"still running after their supervisor stopped: {alive}"
        time.sleep(0.1)


@pytest.fixture
def result_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder for MST_RESULT_DIR on another file system than the data dir where the host has a memory
    file system (/dev/shm: a rename from the spool's tmp folder would fail there), else beside it."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path
    folder = base / f"mst-test-results-{os.getpid()}-{time.monotonic_ns()}"
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_results_in_a_folder_of_their_own_are_served_everywhere_and_outlive_a_restart(
    server_factory: ServerFactory, result_dir: Path
) -> None:
    """MST_RESULT_DIR: the workers write the result files there (nothing in the spool's), every API
    process serves them, a restart of the service keeps them (the same files, not computed again);
    when they are lost (the host's memory file system after a reboot) they are computed again, and a
    410 once the graph's weights changed."""
    env = {**TWO, "MST_RESULT_DIR": str(result_dir)}
    server = server_factory(**env)
    spool_results = server.data_dir / "spool" / "results"
    graphs = [random_graph(40 + k, 300, 2_000, dtype="float32", num_weights=40) for k in range(2)]
    trees = [kruskal(g) for g in graphs]
    jobs: list[str] = []
    with processes(server) as (p0, p1):
        ids = [upload(p0, g)["id"] for g in graphs]
        for k in (0, 1, 0, 1):  # answered through one process, fetched through the other at once
            answered = p0.post(f"/v1/graphs/{ids[k]}/mst", params={"wait": 30}).json()
            assert answered["status"] == "succeeded", answered
            response = p1.get(f"/v1/jobs/{answered['id']}/result", headers={"accept": OCTET})
            assert response.status_code == 200, response.text
            with np.load(io.BytesIO(response.content)) as npz:
                assert npz["edge_ids"].tolist() == trees[k]
            jobs.append(answered["id"])
    assert sorted(p.name for p in result_dir.iterdir()) == sorted(f"{j}.npz" for j in jobs)
    assert not spool_results.exists()  # nothing in the spool
    inodes = {j: (result_dir / f"{j}.npz").stat().st_ino for j in jobs}

    server.stop(signal.SIGTERM)
    server = server_factory(data_dir=server.data_dir, **env)
    with processes(server) as (p0, p1):
        for job_id, k in zip(jobs, (0, 1, 0, 1), strict=True):
            http = p0 if k == 0 else p1
            assert http.get(f"/v1/jobs/{job_id}/result").json()["edge_ids"] == trees[k]
    assert {j: (result_dir / f"{j}.npz").stat().st_ino for j in jobs} == inodes  # served, not recomputed

    server.stop(signal.SIGTERM)
    shutil.rmtree(result_dir)  # what a host's reboot does to a memory file system
    server = server_factory(data_dir=server.data_dir, **env)
    with processes(server) as (p0, p1):
        new = np.random.default_rng(9).integers(-5, 5, 2_000).astype(np.float32)
        put = p1.put(f"/v1/graphs/{ids[1]}/weights", content=npy_body(new), headers={"content-type": OCTET})
        assert put.status_code == 200, put.text
        for job_id, k in zip(jobs, (0, 1, 0, 1), strict=True):
            response = (p1 if k == 0 else p0).get(f"/v1/jobs/{job_id}/result")
            if k == 0:  # its graph is unchanged: computed again, the same forest
                assert response.status_code == 200 and response.json()["edge_ids"] == trees[0], response.text
            else:
                assert response.status_code == 410 and response.json()["code"] == "result_gone", response.text
            assert p0.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded"
    assert sorted(p.name for p in result_dir.iterdir()) == sorted(f"{j}.npz" for j in jobs[0::2])
