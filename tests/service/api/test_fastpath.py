"""The hot-path lane (``service.api.fastpath``) answers exactly as the FastAPI routes do.

A query parameter the routes ignore (``?lane=fastapi``) sends a request past the
fast lane to FastAPI, so every pair below is the same request through both.
"""

from __future__ import annotations

from typing import Any

import pytest

from service.api.fastpath import match

from ..live import LiveServer
from .test_jobs import frozen_worker

OCTET = "application/octet-stream"
SLOW = {"lane": "fastapi"}  # ignored by the routes, not taken by the fast lane


def both(live: LiveServer, method: str, path: str, **kwargs: Any) -> tuple[Any, Any]:
    fast = live.client.request(method, path, **kwargs)
    params = {**kwargs.pop("params", {}), **SLOW}
    slow = live.client.request(method, path, params=params, **kwargs)
    return fast, slow


def same_answer(fast: Any, slow: Any) -> None:
    assert fast.status_code == slow.status_code
    assert fast.headers["content-type"] == slow.headers["content-type"]
    assert fast.content == slow.content


@pytest.fixture(scope="module")
def finished_job(live: LiveServer) -> dict[str, Any]:
    graph = live.upload_npz([0, 1, 2, 0], [1, 2, 0, 3], [3, 1, 2, 7], 6)
    job: dict[str, Any] = live.submit(graph["id"], wait=30).json()
    assert job["status"] == "succeeded"
    return job


def test_job_status_is_the_same_through_both_lanes(live: LiveServer, finished_job: dict[str, Any]) -> None:
    same_answer(*both(live, "GET", f"/v1/jobs/{finished_job['id']}"))


@pytest.mark.parametrize("accept", [None, "application/json", OCTET, f"{OCTET};q=0.5, application/json"])
def test_results_are_the_same_through_both_lanes(
    live: LiveServer, finished_job: dict[str, Any], accept: str | None
) -> None:
    headers = {"accept": accept} if accept else {}
    fast, slow = both(live, "GET", f"/v1/jobs/{finished_job['id']}/result", headers=headers)
    same_answer(fast, slow)
    for name in ("x-mst-num-edges", "x-mst-total-weight", "x-mst-compute-ms", "content-disposition"):
        assert fast.headers.get(name) == slow.headers.get(name)


@pytest.mark.parametrize(
    "path",
    ["/v1/jobs/j_nosuchjob", "/v1/jobs/j_nosuchjob/result", "/v1/graphs/g_nosuchgraph/mst"],
)
def test_not_found_problems_are_the_same_through_both_lanes(live: LiveServer, path: str) -> None:
    method = "POST" if path.endswith("/mst") else "GET"
    fast, slow = both(live, method, path)
    assert fast.status_code == 404
    same_answer(fast, slow)


def test_a_result_before_success_is_the_same_409_through_both_lanes(live: LiveServer) -> None:
    graph = live.upload_npz([0], [1], [1])
    with frozen_worker(live):  # the job cannot finish meanwhile
        job = live.submit(graph["id"]).json()
        live.poll(job["id"], until=("running",))  # handed to the worker: no change between the lanes
        fast, slow = both(live, "GET", f"/v1/jobs/{job['id']}/result")
    assert fast.status_code == 409
    same_answer(fast, slow)


def test_submit_answers_the_same_through_both_lanes(live: LiveServer) -> None:
    graph = live.upload_npz([0, 1], [1, 2], [5, 4])
    fast, slow = both(live, "POST", f"/v1/graphs/{graph['id']}/mst", params={"wait": "30"})
    assert fast.status_code == slow.status_code == 200
    a, b = fast.json(), slow.json()
    assert a["id"] != b["id"]
    assert fast.headers["location"] == f"/v1/jobs/{a['id']}"
    for record in (a, b):
        del record["id"], record["created_at"], record["started_at"], record["finished_at"]
        del record["result"]["compute_ms"]
    assert a == b


def test_submit_without_wait_answers_202_with_the_queued_job(live: LiveServer) -> None:
    graph = live.upload_npz([0, 1], [1, 2], [5, 4])
    response = live.client.post(f"/v1/graphs/{graph['id']}/mst")
    assert response.status_code in (200, 202)  # 200 only if it finished before the answer was built
    assert response.json()["status"] in ("queued", "running", "succeeded")


@pytest.mark.parametrize("wait", ["-1", "abc", "nan"])
def test_bad_waits_go_to_fastapi_and_get_its_422(live: LiveServer, wait: str) -> None:
    graph = live.upload_npz([0, 1], [1, 2], [5, 4])
    response = live.client.post(f"/v1/graphs/{graph['id']}/mst", params={"wait": wait})
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["field"] == "wait"


def test_fast_lane_requests_are_counted_under_their_route(
    live: LiveServer, finished_job: dict[str, Any]
) -> None:
    def count() -> float:
        text = live.client.get("/metrics").text
        for line in text.splitlines():
            labels = ('route="/v1/jobs/{job_id}"', 'method="GET"', 'status="200"')
            if line.startswith("mst_http_requests_total{") and all(x in line for x in labels):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    before = count()
    for _ in range(3):
        assert live.client.get(f"/v1/jobs/{finished_job['id']}").status_code == 200
    assert count() == before + 3


def _scope(
    method: str, path: str, query: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None
) -> Any:
    return {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": query,
        "root_path": "",
        "headers": headers or [],
    }


@pytest.mark.parametrize(
    "scope, template",
    [
        (_scope("POST", "/v1/graphs/g_1/mst"), "/v1/graphs/{graph_id}/mst"),
        (_scope("POST", "/v1/graphs/g_1/mst", b"wait=2.5"), "/v1/graphs/{graph_id}/mst"),
        (_scope("POST", "/v1/graphs/g_1/mst", b"wait=1e3"), None),
        (_scope("POST", "/v1/graphs/g_1/mst", b"wait=1&wait=2"), None),
        (_scope("POST", "/v1/graphs/g_1/mst/"), None),
        (_scope("GET", "/v1/graphs/g_1/mst"), None),
        (_scope("GET", "/v1/jobs/j_1"), "/v1/jobs/{job_id}"),
        (_scope("GET", "/v1/jobs/j_1", b"x=1"), None),
        (_scope("HEAD", "/v1/jobs/j_1"), None),
        (_scope("DELETE", "/v1/jobs/j_1"), None),
        (_scope("GET", "/v1/jobs/j_1/result"), "/v1/jobs/{job_id}/result"),
        (_scope("GET", "/v1/jobs/j_1/result", headers=[(b"range", b"bytes=0-9")]), None),
        (_scope("GET", "/v1/jobs/j_1/result/x"), None),
        ({**_scope("GET", "/v1/jobs/j_1"), "root_path": "/api"}, None),
    ],
)
def test_the_fast_lane_takes_only_plain_hot_path_requests(scope: Any, template: str | None) -> None:
    found = match(scope)
    assert (found.route if found else None) == template
