"""Per-key quotas (graphs, device bytes, queued jobs) and the global job-queue cap, on live servers."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from .api.test_jobs import frozen_worker
from .conftest import ServerFactory
from .live import LiveServer, npz_body

KEY_A = "quota-key-a-0123456789"
KEY_B = "quota-key-b-9876543210"
OCTET = "application/octet-stream"
KEYS = {"MST_API_KEYS": f"{KEY_A},{KEY_B}"}


def client(server: LiveServer, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {key}"}, timeout=60)


def post_graph(http: httpx.Client, n: int = 2) -> httpx.Response:
    src = list(range(n - 1))
    dst = [v + 1 for v in src]
    return http.post(
        "/v1/graphs", content=npz_body(src, dst, [1] * len(src), n), headers={"content-type": OCTET}
    )


def poll(http: httpx.Client, job_id: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in ("succeeded", "failed", "cancelled") or time.monotonic() > deadline:
            return job
        time.sleep(0.02)


def quota_problem(response: httpx.Response, status: int, quota: str, limit: int, used: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == "quota_exceeded" and quota in body["detail"]
    assert (body["quota"], body["limit"], body["used"]) == (quota, limit, used)
    return body


def test_graph_count_quota_is_per_key(server_factory: ServerFactory) -> None:
    server = server_factory(**KEYS, MST_QUOTA_GRAPHS="2")
    with client(server, KEY_A) as a, client(server, KEY_B) as b:
        first = post_graph(a).json()["id"]
        assert post_graph(a).status_code == 201
        refused = post_graph(a)
        quota_problem(refused, 429, "MST_QUOTA_GRAPHS", 2, 2)
        assert int(refused.headers["retry-after"]) > 0
        assert len(a.get("/v1/graphs").json()["graphs"]) == 2  # nothing stored by the refusal
        assert post_graph(b).status_code == 201  # B has a quota of its own
        assert a.delete(f"/v1/graphs/{first}").status_code == 204
        assert post_graph(a).status_code == 201


def test_concurrent_uploads_cannot_pass_the_graph_quota_together(server_factory: ServerFactory) -> None:
    server = server_factory(**KEYS, MST_QUOTA_GRAPHS="3")
    with client(server, KEY_A) as a, ThreadPoolExecutor(8) as pool:
        codes = sorted(pool.map(lambda _: post_graph(a, 2000).status_code, range(8)))
        assert codes == [201] * 3 + [429] * 5
        assert len(a.get("/v1/graphs").json()["graphs"]) == 3


def test_device_bytes_quota_answers_413_naming_it(live: LiveServer, server_factory: ServerFactory) -> None:
    # what one graph of 1000 vertices takes on a CPU worker, measured on the shared server
    probe = httpx.post(
        f"{live.url}/v1/graphs",
        content=npz_body(list(range(999)), list(range(1, 1000)), [1] * 999, 1000),
        headers={"content-type": OCTET},
    ).json()
    one = probe["residency"]["device_bytes"]
    assert one > 0
    live.client.delete(f"/v1/graphs/{probe['id']}")
    server = server_factory(**KEYS, MST_QUOTA_DEVICE_BYTES=str(one + one // 2))
    with client(server, KEY_A) as a, client(server, KEY_B) as b:
        kept = post_graph(a, 1000)
        assert kept.status_code == 201 and kept.json()["residency"]["device_bytes"] == one
        refused = post_graph(a, 1000)
        body = quota_problem(refused, 413, "MST_QUOTA_DEVICE_BYTES", one + one // 2, one)
        assert "retry-after" not in refused.headers and str(one) in body["detail"]
        assert [g["id"] for g in a.get("/v1/graphs").json()["graphs"]] == [kept.json()["id"]]
        assert post_graph(a, 10).status_code == 201  # a small one still fits
        assert post_graph(b, 1000).status_code == 201
        assert a.delete(f"/v1/graphs/{kept.json()['id']}").status_code == 204
        assert post_graph(a, 1000).status_code == 201


def test_queued_jobs_quota_is_per_key_and_frees_as_jobs_finish(server_factory: ServerFactory) -> None:
    server = server_factory(**KEYS, MST_QUOTA_QUEUED_JOBS="2")
    with client(server, KEY_A) as a, client(server, KEY_B) as b:
        graph_a, graph_b = post_graph(a).json()["id"], post_graph(b).json()["id"]
        with frozen_worker(server):  # (its one worker) jobs stay queued
            first = a.post(f"/v1/graphs/{graph_a}/mst").json()
            second = a.post(f"/v1/graphs/{graph_a}/mst").json()
            for params in (None, {"wait": "5"}):
                refused = a.post(f"/v1/graphs/{graph_a}/mst", params=params)
                quota_problem(refused, 429, "MST_QUOTA_QUEUED_JOBS", 2, 2)
                assert refused.headers["retry-after"] == "1"
            assert b.post(f"/v1/graphs/{graph_b}/mst").status_code == 202
            assert a.delete(f"/v1/jobs/{second['id']}").json()["status"] == "cancelled"  # frees one
            third = a.post(f"/v1/graphs/{graph_a}/mst")
            assert third.status_code == 202
            quota_problem(
                a.post("/v1/mst", content=b"0 1 1\n", params={"format": "edgelist"}),
                429,
                "MST_QUOTA_QUEUED_JOBS",
                2,
                2,
            )
        for job in (first, third.json()):
            assert poll(a, job["id"])["status"] == "succeeded"
        assert a.post(f"/v1/graphs/{graph_a}/mst", params={"wait": 30}).json()["status"] == "succeeded"


def test_a_full_queue_answers_503_with_retry_after_and_never_hangs(server_factory: ServerFactory) -> None:
    # MST_MAX_QUEUED_JOBS counts the requests waiting on the workers, sent and not answered yet
    server = server_factory(MST_MAX_QUEUED_JOBS="2")
    graph = server.upload_npz([0, 1], [1, 2], [1, 1])["id"]
    with frozen_worker(server, graph):
        queued = [server.submit(graph).json()["id"] for _ in range(2)]
        answers = []
        for path, params in ((f"/v1/graphs/{graph}/mst", None), (f"/v1/graphs/{graph}/mst", {"wait": "20"})):
            started = time.monotonic()
            answers.append(server.client.post(path, params=params))
            assert time.monotonic() - started < 5  # answered at once, not after the wait
        one_shot = server.client.post("/v1/mst", content=b"0 1 1\n", params={"format": "edgelist"})
        task = server.client.post(f"/v1/graphs/{graph}/jobs", json={"task": "components", "params": {}})
        weights = server.client.put(f"/v1/graphs/{graph}/weights", json={"weight": [2, 2]})
        for response in (*answers, one_shot, task, weights):
            assert response.status_code == 503, response.text
            assert response.headers["retry-after"] == "1"
            assert (
                response.json()["code"] == "queue_full" and "MST_MAX_QUEUED_JOBS" in response.json()["detail"]
            )
        # a cancelled job leaves the queue when its worker passes it by: still full meanwhile
        assert server.client.delete(f"/v1/jobs/{queued[0]}").status_code == 200
        assert server.submit(graph).status_code == 503
    assert server.poll(queued[1])["status"] == "succeeded"
    assert server.submit(graph, wait=30).json()["status"] == "succeeded"
