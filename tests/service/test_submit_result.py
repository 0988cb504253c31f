"""One round trip for a job and its result: a submission with ``?wait=`` whose Accept asks for a
binary result (npz or Arrow) is answered with the result once the job succeeded, as ``GET
/v1/jobs/{id}/result`` gives it, with ``Location`` naming the job; every other submission is
answered with its job, as before (no 406 for an Accept the result has no representation for)."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc
import pytest

from service.client import Client
from service.timing import parse_header
from tests.utils.graphs import random_graph

from .live import OCTET, LiveServer
from .oracle import check_forest

ARROW = "application/vnd.apache.arrow.stream"


def _npz(body: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(body), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64"])
def test_a_binary_accept_gets_the_exact_forest_in_the_answer(live: LiveServer, dtype: str) -> None:
    graph = random_graph(31, 400, 3000, dtype=np.dtype(dtype), num_weights=4, components=3, self_loops=0.05)
    record = live.upload_npz(graph.src, graph.dst, graph.weight, graph.num_vertices)
    response = live.client.post(
        f"/v1/graphs/{record['id']}/mst", params={"wait": 30}, headers={"accept": OCTET}
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == OCTET
    job_url = response.headers["location"]
    assert job_url.startswith("/v1/jobs/") and response.headers["content-location"] == f"{job_url}/result"
    arrays = _npz(response.content)
    job = live.client.get(job_url).json()
    assert job["status"] == "succeeded" and job["graph_id"] == record["id"]
    check_forest(arrays["edge_ids"], arrays["weights"], job["result"]["total_weight"],
                 job["result"]["num_components"], graph)  # fmt: skip
    assert response.headers["x-mst-num-components"] == str(job["result"]["num_components"])
    # the same bytes the result route gives
    again = live.client.get(f"{job_url}/result", headers={"accept": OCTET})
    assert again.content == response.content
    # where the time went: the job's steps, then the result's
    timing = parse_header(response.headers["server-timing"])
    assert {"queue", "compute", "result-store", "result-encode"} <= set(timing), timing


def test_arrow_on_the_jobs_route_and_points(live: LiveServer) -> None:
    graph = random_graph(32, 300, 2000, dtype=np.dtype("float32"), num_weights=6)
    record = live.upload_npz(graph.src, graph.dst, graph.weight, graph.num_vertices)
    response = live.client.post(
        f"/v1/graphs/{record['id']}/jobs",
        json={"task": "mst", "params": {"objective": "max"}},
        params={"wait": 30},
        headers={"accept": f"{ARROW}, application/json;q=0.5"},
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == ARROW
    table = pa.ipc.open_stream(pa.py_buffer(response.content)).read_all()
    expected = live.client.get(f"{response.headers['location']}/result", headers={"accept": ARROW})
    assert table.equals(pa.ipc.open_stream(pa.py_buffer(expected.content)).read_all())
    assert len(table) > 0

    points = np.random.default_rng(3).random((500, 3))
    body = io.BytesIO()
    np.savez(body, points=points)
    uploaded = live.client.post(
        "/v1/points", params={"format": "npz"}, content=body.getvalue(), headers={"content-type": OCTET}
    ).json()
    response = live.client.post(
        f"/v1/points/{uploaded['id']}/jobs",
        json={"task": "emst", "params": {}},
        params={"wait": 60},
        headers={"accept": OCTET},
    )
    assert response.status_code == 200, response.text
    emst = _npz(response.content)
    assert emst["src"].shape == emst["dst"].shape == emst["weights"].shape == (499,)
    json_result = live.client.get(f"{response.headers['location']}/result").json()
    assert np.allclose(np.sort(emst["weights"]), np.sort(np.asarray(json_result["weights"])))


@pytest.mark.parametrize(
    "accept",
    [None, "application/json", "*/*", "application/json, application/octet-stream;q=0.5", "text/html"],
)
def test_every_other_accept_gets_the_job(live: LiveServer, accept: str | None) -> None:
    graph = random_graph(33, 100, 400)
    record = live.upload_npz(graph.src, graph.dst, graph.weight, graph.num_vertices)
    headers = {} if accept is None else {"accept": accept}
    response = live.client.post(f"/v1/graphs/{record['id']}/mst", params={"wait": 30}, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    job = response.json()
    assert job["status"] == "succeeded" and response.headers["location"] == f"/v1/jobs/{job['id']}"


def test_without_a_wait_or_unfinished_the_answer_is_the_job(live: LiveServer) -> None:
    graph = random_graph(34, 100, 400)
    record = live.upload_npz(graph.src, graph.dst, graph.weight, graph.num_vertices)
    response = live.client.post(f"/v1/graphs/{record['id']}/mst", headers={"accept": OCTET})
    assert response.status_code == 202, response.text
    job: dict[str, Any] = response.json()
    assert job["status"] in ("queued", "running", "succeeded")
    assert live.poll(job["id"])["status"] == "succeeded"


def test_the_bundled_client_takes_a_forest_in_one_request(live: LiveServer) -> None:
    graph = random_graph(35, 500, 4000, dtype=np.dtype("int64"), num_weights=3, components=2)
    with Client(live.url) as mst:
        record = mst.upload_arrays(graph.src, graph.dst, graph.weight, graph.num_vertices)
        sent: list[str] = []  # each request, over httpx or the client's kept connection
        mst._http.event_hooks["request"].append(lambda request: sent.append(request.url.path))
        direct = mst._direct.request
        mst._direct.request = lambda method, url, **kw: sent.append(url) or direct(method, url, **kw)  # type: ignore[method-assign,func-returns-value]
        forest = mst.forest(record["id"], wait=30)
        assert sent == [f"/v1/graphs/{record['id']}/mst"]  # one round trip
        check_forest(forest.edge_ids, forest.weights, forest.total_weight, forest.num_components, graph)
        assert forest.compute_ms >= 0
        maximum = mst.forest(record["id"], wait=30, objective="max")
        job = mst.submit(record["id"], wait=30, objective="max")
        assert maximum.edge_ids.tolist() == mst.result(job["id"]).edge_ids.tolist()
