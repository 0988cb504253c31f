"""``MST_API_PROCESSES=2``: a runtime process and two front processes answer as one process does.

Each answer through the fronts is compared with the same request's answer from a
single-process server with the same settings (bodies byte for byte, ids and
timings aside), forests are checked against the oracles, and the processes are
killed and stopped to see that the service keeps answering and ends cleanly.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from gpu_core.formats import pyarrow_available
from tests.utils.graphs import random_graph

from .api.test_jobs import frozen_worker
from .conftest import SHARED_ENV, ServerFactory
from .live import OCTET, LiveServer, npz_body
from .oracle import check_forest

FRONTS = {"MST_API_PROCESSES": "2"}
#: members of JSON answers that differ between two servers (ids, clocks, timings)
VARYING = {"id", "job_id", "graph_id", "created_at", "started_at", "finished_at", "compute_ms", "instance"}
#: headers that differ between two servers
VARYING_HEADERS = {
    "date",
    "location",
    "x-mst-compute-ms",
    "content-disposition",
    "content-length",
    "etag",
    "last-modified",
    "server-timing",
}
_ID = re.compile(r"\b[gjpo]_[0-9a-f]{32}\b")


def normal(value: Any) -> Any:
    """A JSON answer without what differs between servers."""
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items() if k not in VARYING}
    if isinstance(value, list):
        return [normal(v) for v in value]
    return _ID.sub("<id>", value) if isinstance(value, str) else value


def same(front: httpx.Response, single: httpx.Response) -> None:
    """The same answer, ids and timings aside."""
    assert front.status_code == single.status_code, (front.text, single.text)
    front_headers = {k: v for k, v in front.headers.items() if k not in VARYING_HEADERS}
    single_headers = {k: v for k, v in single.headers.items() if k not in VARYING_HEADERS}
    assert front_headers == single_headers
    if "json" in front.headers.get("content-type", ""):
        assert normal(front.json()) == normal(single.json())
    else:
        assert front.content == single.content


def front_pids(server: LiveServer) -> list[int]:
    path = server.data_dir / "run" / "fronts.pid"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (not yet reaped) is gone too
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, LiveServer]]:
    """A server with two fronts and a single-process one, same settings."""
    root = tmp_path_factory.mktemp("fronts")
    fronts = LiveServer(root / "f", {**SHARED_ENV, **FRONTS}, root / "fronts.log").start()
    single = LiveServer(root / "s", dict(SHARED_ENV), root / "single.log").start()
    yield fronts, single
    fronts.stop()
    single.stop()


def both(pair: tuple[LiveServer, LiveServer], method: str, path: str, **kwargs: Any) -> list[httpx.Response]:
    return [server.client.request(method, path, **kwargs) for server in pair]


def test_graphs_jobs_and_results_answer_as_one_process(pair: tuple[LiveServer, LiveServer]) -> None:
    g = random_graph(11, 200, 900, dtype=np.float64, num_weights=30, components=2, isolated=3)
    body = npz_body(g.src, g.dst, g.weight, g.num_vertices)
    uploads = both(pair, "POST", "/v1/graphs", content=body, headers={"content-type": OCTET})  # relayed
    same(*uploads)
    ids = [u.json()["id"] for u in uploads]
    same(*[s.client.get(f"/v1/graphs/{i}") for s, i in zip(pair, ids, strict=True)])
    jobs = [s.client.post(f"/v1/graphs/{i}/mst", params={"wait": 30}) for s, i in zip(pair, ids, strict=True)]
    same(*jobs)
    assert jobs[0].json()["status"] == "succeeded"
    assert jobs[0].headers["location"] == f"/v1/jobs/{jobs[0].json()['id']}"
    job_ids = [j.json()["id"] for j in jobs]
    same(*[s.client.get(f"/v1/jobs/{j}") for s, j in zip(pair, job_ids, strict=True)])
    accepts = ["application/json", OCTET, f"{OCTET};q=0.5, application/json"]
    if pyarrow_available():
        accepts.append("application/vnd.apache.arrow.stream")
    for accept in [None, *accepts]:
        headers = {"accept": accept} if accept else {}
        answers = [
            s.client.get(f"/v1/jobs/{j}/result", headers=headers) for s, j in zip(pair, job_ids, strict=True)
        ]
        if answers[0].headers["content-type"] == "application/vnd.apache.arrow.stream":
            assert answers[0].status_code == answers[1].status_code == 200  # compute_ms is in the stream
        else:
            same(*answers)
        if answers[0].headers["content-type"] == OCTET:
            with np.load(io.BytesIO(answers[0].content), allow_pickle=False) as npz:
                total = json.loads(answers[0].headers["x-mst-total-weight"])
                components = int(answers[0].headers["x-mst-num-components"])
                check_forest(npz["edge_ids"], npz["weights"], total, components, g)
    ranged = [
        s.client.get(f"/v1/jobs/{j}/result", headers={"accept": OCTET, "range": "bytes=0-9"})
        for s, j in zip(pair, job_ids, strict=True)
    ]
    same(*ranged)  # a Range request is relayed
    assert ranged[0].status_code == 206 and len(ranged[0].content) == 10
    queued = [
        s.client.post(f"/v1/graphs/{i}/mst", params={"cache": "true"}) for s, i in zip(pair, ids, strict=True)
    ]
    assert [q.status_code for q in queued] in ([202, 202], [200, 200])
    for server, job in zip(pair, queued, strict=True):
        assert server.poll(job.json()["id"])["status"] == "succeeded"
    listed = [s.client.get("/v1/jobs") for s in pair]
    assert listed[0].status_code == listed[1].status_code


def test_a_chunked_upload_streams_through_the_relay(pair: tuple[LiveServer, LiveServer]) -> None:
    g = random_graph(21, 20_000, 45_000, dtype=np.float32, num_weights=None)  # MST_MAX_EDGES: 50,000
    body = npz_body(g.src, g.dst, g.weight, g.num_vertices)
    assert len(body) > 500_000

    def pieces() -> Iterator[bytes]:  # no Content-Length: Transfer-Encoding: chunked
        for start in range(0, len(body), 65_536):
            yield body[start : start + 65_536]

    uploads = [s.client.post("/v1/graphs", content=pieces(), headers={"content-type": OCTET}) for s in pair]
    same(*uploads)
    assert uploads[0].status_code == 201
    server = pair[0]
    job = server.submit(uploads[0].json()["id"], wait=30).json()
    edge_ids, weights, headers = server.result_npz(job["id"])
    total, components = json.loads(headers["x-mst-total-weight"]), int(headers["x-mst-num-components"])
    check_forest(edge_ids, weights, total, components, g)


def test_weights_points_and_deletes_answer_as_one_process(pair: tuple[LiveServer, LiveServer]) -> None:
    graphs = both(pair, "POST", "/v1/graphs", json={"src": [0, 1, 2], "dst": [1, 2, 0], "weight": [1, 2, 3]})
    same(*graphs)
    ids = [g.json()["id"] for g in graphs]
    same(
        *[
            s.client.put(f"/v1/graphs/{i}/weights", json={"weight": [5, 1, 1]})
            for s, i in zip(pair, ids, strict=True)
        ]
    )
    patched = [
        s.client.patch(f"/v1/graphs/{i}/weights", json={"edge_ids": [2], "weights": [9]})
        for s, i in zip(pair, ids, strict=True)
    ]
    same(*patched)
    results = []
    for server, i in zip(pair, ids, strict=True):
        job = server.client.post(f"/v1/graphs/{i}/mst", params={"wait": 30}).json()
        results.append(server.client.get(f"/v1/jobs/{job['id']}/result"))
    same(*results)
    assert results[0].json()["edge_ids"] == [0, 1]  # weights 5, 1, 9: edges 1 (1) and 0 (5)
    points = np.random.default_rng(3).random((40, 2))
    sets = both(pair, "POST", "/v1/points", json={"points": points.tolist()})
    same(*sets)
    emst = [
        s.client.post(
            f"/v1/points/{p.json()['id']}/jobs", json={"task": "emst", "params": {}}, params={"wait": 30}
        )
        for s, p in zip(pair, sets, strict=True)
    ]
    same(*emst)
    same(*[s.client.get(f"/v1/jobs/{e.json()['id']}/result") for s, e in zip(pair, emst, strict=True)])
    same(*[s.client.delete(f"/v1/graphs/{i}") for s, i in zip(pair, ids, strict=True)])
    same(*[s.client.post(f"/v1/graphs/{i}/mst") for s, i in zip(pair, ids, strict=True)])  # 404 now


def test_one_shots_answer_as_one_process(pair: tuple[LiveServer, LiveServer]) -> None:
    g = random_graph(5, 100, 400, dtype=np.int32)
    body = npz_body(g.src, g.dst, g.weight, g.num_vertices)
    for accept in (None, OCTET):
        headers = {"content-type": OCTET, **({"accept": accept} if accept else {})}
        answers = both(pair, "POST", "/v1/mst", content=body, headers=headers)
        same(*answers)
        if accept is None:
            result = answers[0].json()
            check_forest(
                result["edge_ids"], result["weights"], result["total_weight"], result["num_components"], g
            )
    same(
        *both(
            pair,
            "POST",
            "/v1/mst",
            content=b"0 1 4\n1 2 3\n",
            params={"format": "edgelist"},
            headers={"content-type": OCTET},
        )
    )
    same(*both(pair, "POST", "/v1/mst", json={"src": [0], "dst": [1], "weight": [2]}))
    same(
        *both(
            pair,
            "POST",
            "/v1/mst",
            content=b"0 1 4\n",
            params={"format": "nope"},
            headers={"content-type": OCTET},
        )
    )
    assert not [p for server in pair for p in (server.data_dir / "spool" / "tmp").iterdir()]


@pytest.mark.parametrize(
    "arrays",
    [
        {"src": [0, 5], "dst": [1, 2], "weight": [1, 2], "num_vertices": 3},  # a vertex id past n
        {"src": [0, -1], "dst": [1, 2], "weight": [1, 2]},  # a negative id
        {"src": [0.5, 1.0], "dst": [1, 2], "weight": [1, 2]},  # float ids
        {"src": [0, 1], "dst": [1, 2], "weight": [1.0, float("nan")]},  # a NaN weight
        {"src": [0, 1], "dst": [1, 2, 3], "weight": [1, 2]},  # lengths differ
        {"src": [0, 1], "dst": [1, 2], "weight": [1, 2], "num_vertices": 1 << 40},  # past MST_MAX_VERTICES
        {"src": [[0, 1]], "dst": [[1, 2]], "weight": [[1, 2]]},  # two-dimensional
        {"src": [0], "dst": [1], "weight": [True]},  # boolean weights
    ],
)
def test_plain_npz_one_shots_the_engine_refuses_answer_as_one_process(
    pair: tuple[LiveServer, LiveServer], arrays: dict[str, Any]
) -> None:
    """A front parses a plain npz one-shot itself and sends the worker where its edges lie: the worker's
    limits and the engine's checks still apply, and word the same problem."""
    buffer = io.BytesIO()
    members: dict[str, Any] = {name: np.asarray(value) for name, value in arrays.items()}
    np.savez(buffer, **members)
    front, single = both(pair, "POST", "/v1/mst", content=buffer.getvalue(), headers={"content-type": OCTET})
    assert 400 <= single.status_code < 500, single.text
    same(front, single)


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    [
        ("GET", "/v1/jobs/nope", {}),
        ("GET", "/v1/jobs/j_0123456789abcdef0123456789abcdef", {}),
        ("GET", "/v1/jobs/j_0123456789abcdef0123456789abcdef/result", {}),
        ("GET", "/v1/jobs/j_0123456789abcdef0123456789abcdef/result", {"headers": {"accept": "text/html"}}),
        ("POST", "/v1/graphs/../../etc/passwd/mst", {}),
        ("POST", "/v1/graphs/g_0123456789abcdef0123456789abcdef/mst", {"params": {"wait": "5"}}),
        ("POST", "/v1/graphs/g_0123456789abcdef0123456789abcdef/mst", {"params": {"wait": "-1"}}),
        ("POST", "/v1/mst", {"content": b"x"}),  # 415: no content type
        ("POST", "/v1/mst", {"content": b"x", "headers": {"content-type": OCTET, "accept": "text/html"}}),
        ("POST", "/v1/mst", {"content": b"not an npz", "headers": {"content-type": OCTET}}),
        ("GET", "/no/such/route", {}),
        ("DELETE", "/v1/mst", {}),
        ("POST", "/v1/graphs", {"content": b"{", "headers": {"content-type": "application/json"}}),
        ("POST", "/v1/graphs", {"content": b"x" * 2_000_001, "headers": {"content-type": OCTET}}),
    ],
)
def test_errors_answer_as_one_process(
    pair: tuple[LiveServer, LiveServer], method: str, path: str, kwargs: dict[str, Any]
) -> None:
    front, single = both(pair, method, path, **kwargs)
    assert front.status_code >= 400
    same(front, single)
    assert front.content == single.content  # byte for byte: no id or clock in these


def test_healthz_answers_in_the_front_and_metrics_count_its_requests(
    pair: tuple[LiveServer, LiveServer],
) -> None:
    same(*both(pair, "GET", "/healthz"))
    server = pair[0]
    graph = server.upload_npz([0, 1], [1, 2], [1, 1])["id"]
    for _ in range(3):
        assert server.submit(graph, wait=30).status_code == 200

    def submits() -> float:
        for line in server.client.get("/metrics").text.splitlines():
            labels = ('route="/v1/graphs/{graph_id}/mst"', 'method="POST"', 'status="200"')
            if line.startswith("mst_http_requests_total{") and all(x in line for x in labels):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    deadline = time.monotonic() + 5
    while submits() < 3 and time.monotonic() < deadline:  # the fronts send their counts each second
        time.sleep(0.2)
    assert submits() >= 3


KEY_A = "key-a-0123456789abcdef"
KEY_B = "key-b-fedcba9876543210"


def test_api_keys_through_the_fronts(server_factory: ServerFactory) -> None:
    server = server_factory(MST_API_KEYS=f"{KEY_A},{KEY_B}", **FRONTS)
    with (
        httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {KEY_A}"}) as a,
        httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {KEY_B}"}) as b,
    ):
        keys_through_the_fronts(server, a, b)


def keys_through_the_fronts(server: LiveServer, a: httpx.Client, b: httpx.Client) -> None:
    graph = a.post("/v1/graphs", json={"src": [0, 1], "dst": [1, 2], "weight": [1, 2]})
    assert graph.status_code == 201
    g = graph.json()["id"]
    job = a.post(f"/v1/graphs/{g}/mst", params={"wait": 30}).json()
    assert a.get(f"/v1/jobs/{job['id']}/result").json()["edge_ids"] == [0, 1]
    for path in (f"/v1/jobs/{job['id']}", f"/v1/jobs/{job['id']}/result", f"/v1/graphs/{g}", "/v1/graphs"):
        anonymous = server.client.get(path)
        assert anonymous.status_code == 401
        assert anonymous.headers["www-authenticate"].startswith("Bearer")
        assert anonymous.headers["content-type"] == "application/problem+json"
    wrong = server.client.post(
        f"/v1/graphs/{g}/mst", headers={"authorization": "Bearer not-a-valid-key-at-all"}
    )
    assert wrong.status_code == 401 and 'error="invalid_token"' in wrong.headers["www-authenticate"]
    for response in (
        b.get(f"/v1/jobs/{job['id']}"),
        b.get(f"/v1/jobs/{job['id']}/result"),
        b.post(f"/v1/graphs/{g}/mst"),
        b.get(f"/v1/graphs/{g}"),
        b.delete(f"/v1/graphs/{g}"),
    ):
        assert response.status_code == 404, response.text
    assert b.get("/v1/graphs").json() == {"graphs": []} or not b.get("/v1/graphs").json().get("graphs")
    assert server.client.get("/healthz").status_code == 200
    assert server.client.get("/readyz").status_code == 200
    one_shot = b.post("/v1/mst", json={"src": [0], "dst": [1], "weight": [3]})
    assert one_shot.status_code == 200 and one_shot.json()["edge_ids"] == [0]


def test_a_full_queue_answers_503_with_retry_after_through_the_fronts(server_factory: ServerFactory) -> None:
    server = server_factory(MST_MAX_QUEUED_JOBS="2", MST_DISPATCH_DEPTH="1", **FRONTS)
    graph = server.upload_npz([0, 1], [1, 2], [1, 1])["id"]
    with frozen_worker(server):
        running = server.submit(graph).json()["id"]
        server.poll(running, until=("running",))
        queued = [server.submit(graph).json()["id"] for _ in range(2)]
        started = time.monotonic()
        answers = [
            server.client.post(f"/v1/graphs/{graph}/mst"),
            server.client.post(f"/v1/graphs/{graph}/mst", params={"wait": "20"}),
            server.client.post(f"/v1/graphs/{graph}/mst", params={"lane": "relayed"}),
            server.client.post(
                "/v1/mst", content=b"0 1 1\n", params={"format": "edgelist"}, headers={"content-type": OCTET}
            ),
        ]
        assert time.monotonic() - started < 10
        for response in answers:
            assert response.status_code == 503, response.text
            assert response.headers["retry-after"] == "1"
            assert response.json()["code"] == "queue_full"
        assert answers[0].content == answers[2].content  # the front's answer and the runtime's alike
        assert server.client.delete(f"/v1/jobs/{queued[0]}").status_code == 200
    for job in (running, queued[1]):
        assert server.poll(job)["status"] == "succeeded"


def test_a_killed_front_is_started_again(server_factory: ServerFactory) -> None:
    server = server_factory(**FRONTS)
    graph = server.upload_npz([0, 1, 2], [1, 2, 0], [3, 1, 2])["id"]
    first = front_pids(server)
    assert len(first) == 2
    os.kill(first[0], signal.SIGKILL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (len(front_pids(server)) != 2 or first[0] in front_pids(server)):
        time.sleep(0.1)
    now = front_pids(server)
    assert first[0] not in now and first[1] in now and len(now) == 2
    for _ in range(20):  # new connections each: the kernel spreads them over both fronts
        with httpx.Client(base_url=server.url) as fresh:
            for _attempt in range(50):  # the new front may still be importing
                try:
                    response = fresh.post(f"/v1/graphs/{graph}/mst", params={"wait": 30})
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            assert response.status_code == 200 and response.json()["status"] == "succeeded"


def test_sigterm_stops_every_process(server_factory: ServerFactory) -> None:
    server = server_factory(**FRONTS)
    pids = [*front_pids(server), server.worker_pid()]
    assert server.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    assert not [p for p in pids if alive(p)]
    assert not (server.data_dir / "run" / "fronts.pid").exists()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{server.url}/healthz", timeout=2)


def test_fronts_stop_when_the_runtime_process_is_killed(server_factory: ServerFactory) -> None:
    server = server_factory(**FRONTS)
    pids = front_pids(server)
    server.stop(signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    assert not [p for p in pids if alive(p)]


def test_32_parallel_clients_get_every_forest_right(pair: tuple[LiveServer, LiveServer]) -> None:
    server = pair[0]
    graphs = [random_graph(100 + i, 60, 250, dtype=np.int64, num_weights=10) for i in range(4)]
    ids = [server.upload_npz(g.src, g.dst, g.weight, g.num_vertices)["id"] for g in graphs]
    expected = []  # each graph's forest, checked against the oracles once
    for graph, graph_id in zip(graphs, ids, strict=True):
        edge_ids, weights, headers = server.result_npz(server.submit(graph_id, wait=30).json()["id"])
        total, components = json.loads(headers["x-mst-total-weight"]), int(headers["x-mst-num-components"])
        check_forest(edge_ids, weights, total, components, graph)
        expected.append((edge_ids.tolist(), weights.tolist(), total, components))
    failures: list[str] = []
    done = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + 2.0

    def client(index: int) -> None:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            while time.monotonic() < stop_at:
                which = (index + done[0]) % len(graphs)
                try:
                    job = http.post(f"/v1/graphs/{ids[which]}/mst", params={"wait": 30})
                    assert job.status_code == 200, job.text
                    status = http.get(f"/v1/jobs/{job.json()['id']}")
                    assert status.status_code == 200 and status.json()["status"] == "succeeded"
                    result = http.get(f"/v1/jobs/{job.json()['id']}/result", headers={"accept": OCTET})
                    assert result.status_code == 200, result.text
                    with np.load(io.BytesIO(result.content), allow_pickle=False) as npz:
                        got = (
                            npz["edge_ids"].tolist(),
                            npz["weights"].tolist(),
                            json.loads(result.headers["x-mst-total-weight"]),
                            int(result.headers["x-mst-num-components"]),
                        )
                    assert got == expected[which], f"graph {which}: a different forest"
                except Exception as exc:  # every failure is reported below
                    with lock:
                        failures.append(f"{type(exc).__name__}: {exc}")
                    return
                with lock:
                    done[0] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures[:3]
    assert done[0] >= 32


def test_status_polls_are_answered_by_the_fronts_while_the_runtime_is_stopped(
    server_factory: ServerFactory,
) -> None:
    """A front reads a status poll from SQLite itself: with the runtime process stopped (SIGSTOP, as
    a runtime busy with uploads would be, only longer), polls still answer at once, the same bytes;
    an unknown id is still a 404."""
    server = server_factory(**FRONTS)
    g = random_graph(3, 50, 200)
    graph_id = server.upload_npz(g.src, g.dst, g.weight, g.num_vertices)["id"]
    job = server.client.post(f"/v1/graphs/{graph_id}/mst", params={"wait": 30})
    assert job.json()["status"] == "succeeded", job.text
    before = server.client.get(f"/v1/jobs/{job.json()['id']}")
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        for _ in range(10):
            now = server.client.get(f"/v1/jobs/{job.json()['id']}", timeout=5)
            assert now.status_code == 200 and now.content == before.content
        missing = server.client.get("/v1/jobs/j_0123456789abcdef0123456789abcdef", timeout=5)
        assert missing.status_code == 404 and missing.json()["code"] == "job_not_found", missing.text
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    assert server.client.get(f"/v1/jobs/{job.json()['id']}").content == before.content
