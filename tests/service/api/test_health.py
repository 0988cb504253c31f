"""/healthz, /readyz, /metrics and the problem answers of unknown routes, against a live server."""

from __future__ import annotations

import re

from ..live import LiveServer
from .test_graphs import problem


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the exposition text (summed over the labels not given)."""
    total, found = 0.0, False
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", line)
        if not m:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
            found = True
    assert found, f"no sample {name}{labels}"
    return total


def test_healthz(live: LiveServer) -> None:
    response = live.client.get("/healthz")
    body = response.json()
    assert response.status_code == 200 and body["status"] == "ok" and body["pid"] > 0
    assert body["api_process"] == int(response.headers["x-mst-api-process"]) in (0, 1)


def test_readyz_describes_the_worker(live: LiveServer) -> None:
    response = live.client.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ready"
    workers = body["workers"]
    assert [w["index"] for w in workers] == [0, 1]  # the shared server's two workers
    for worker in workers:
        assert worker["state"] in ("ready", "reloading") and worker["backend"] == "cpu"
        assert worker["pid"] > 0 and worker["heartbeat_age_s"] < 5 and worker["total_bytes"] > 0
        assert worker["requests_waiting"] >= 0 and worker["standby"] is None


def test_metrics_count_requests_jobs_and_resident_graphs(live: LiveServer) -> None:
    before = live.client.get("/metrics").text
    graph = live.upload_npz([0, 1, 2], [1, 2, 0], [1.0, 2.0, 3.0])
    for _ in range(3):
        assert live.submit(graph["id"], wait=30).status_code == 200
    live.client.get("/v1/graphs/g_missing")
    response = live.client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    after = response.text
    route = "/v1/graphs/{graph_id}/mst"
    ok = f'route="{route}",status="200"'  # (other tests may have left only 4xx samples of the route)
    assert (
        metric(after, "mst_http_requests_total", route=route, status="200")
        - (metric(before, "mst_http_requests_total", route=route, status="200") if ok in before else 0)
        == 3
    )
    assert metric(after, "mst_http_requests_total", route="/v1/graphs/{graph_id}", status="404") >= 1
    assert metric(after, "mst_jobs_finished_total", status="succeeded") >= 3
    assert metric(after, "mst_job_duration_seconds_count") >= 3
    assert metric(after, "mst_job_compute_seconds_count") >= 3
    assert metric(after, "mst_queue_depth") >= 0
    assert metric(after, "mst_resident_graphs") >= 1  # (other tests add and delete theirs meanwhile)
    worker = str(graph["residency"]["worker"])
    assert metric(after, "mst_device_bytes", worker=worker) >= graph["residency"]["device_bytes"] > 0
    assert metric(after, "mst_worker_up", worker="0") == metric(after, "mst_worker_up", worker="1") == 1


def test_job_status_polls_are_counted_under_their_route(live: LiveServer) -> None:
    graph = live.upload_npz([0, 1, 2, 0], [1, 2, 0, 3], [3, 1, 2, 7], 6)
    job = live.submit(graph["id"], wait=30).json()
    assert job["status"] == "succeeded"

    def count() -> float:
        text = live.client.get("/metrics").text
        for line in text.splitlines():
            labels = ('route="/v1/jobs/{job_id}"', 'method="GET"', 'status="200"')
            if line.startswith("mst_http_requests_total{") and all(x in line for x in labels):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    before = count()
    for _ in range(3):
        assert live.client.get(f"/v1/jobs/{job['id']}").status_code == 200
    assert count() == before + 3


def test_unknown_route_and_method_are_problems(live: LiveServer) -> None:
    problem(live.client.get("/v2/nothing"), 404, "not_found")
    problem(live.client.put("/v1/graphs"), 405, "method_not_allowed")
