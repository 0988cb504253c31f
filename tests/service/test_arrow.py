"""Arrow IPC and Parquet uploads, Arrow IPC results, Accept negotiation (406), a server without pyarrow."""

from __future__ import annotations

import dataclasses
import io
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest

from tests.utils.graphs import random_graph

from .conftest import ServerFactory
from .live import OCTET, LiveServer
from .oracle import check_forest

ARROW = "application/vnd.apache.arrow.stream"
PARQUET = "application/vnd.apache.parquet"


def table_of(graph, weight_type=None, num_vertices: int | None = None) -> pa.Table:
    weight = pa.array(graph.weight, type=weight_type) if weight_type is not None else pa.array(graph.weight)
    metadata = None if num_vertices is None else {"num_vertices": str(num_vertices)}
    return pa.table(
        {"src": pa.array(graph.src), "dst": pa.array(graph.dst), "weight": weight}, metadata=metadata
    )


def arrow_bytes(table: pa.Table, chunk: int | None = None) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=chunk)
    return sink.getvalue()


def parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def read_arrow_result(body: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(body)).read_all()


def upload(live: LiveServer, body: bytes, content_type: str, fmt: str | None = None):
    params = {"format": fmt} if fmt else None
    return live.client.post("/v1/graphs", content=body, params=params, headers={"content-type": content_type})


def solve(live: LiveServer, graph_id: str) -> dict:
    job = live.submit(graph_id, wait=30).json()
    assert job["status"] == "succeeded", job
    return job


@pytest.mark.parametrize(
    ("fmt", "content_type"),
    [("arrow", ARROW), ("arrow", OCTET), ("parquet", PARQUET), ("parquet", OCTET)],
)
@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64"])
def test_uploads_keep_dtype_and_give_the_exact_forest(live: LiveServer, fmt, content_type, dtype):
    graph = random_graph(7, 300, 1500, dtype=np.dtype(dtype))
    table = table_of(graph, num_vertices=graph.num_vertices + 5)  # 5 isolated vertices more
    body = arrow_bytes(table, chunk=400) if fmt == "arrow" else parquet_bytes(table)
    response = upload(live, body, content_type, fmt if content_type == OCTET else None)
    assert response.status_code == 201, response.text
    record = response.json()
    assert record["source_format"] == fmt and record["weight_dtype"] == dtype
    assert record["num_vertices"] == graph.num_vertices + 5 and record["num_edges"] == graph.num_edges
    job = solve(live, record["id"])
    ids, weights, _ = live.result_npz(job["id"])
    wider = dataclasses.replace(graph, num_vertices=graph.num_vertices + 5)  # same edges, n + 5
    check_forest(ids, weights, job["result"]["total_weight"], job["result"]["num_components"], wider)


def test_narrow_integer_and_half_float_weights_are_widened_exactly(live: LiveServer):
    graph = random_graph(3, 50, 200, dtype=np.dtype("int64"))
    small = np.asarray(graph.weight) % 100
    for arrow_type, dtype in [(pa.int8(), "int32"), (pa.uint16(), "int32"), (pa.uint32(), "int64")]:
        table = table_of(graph.with_weight(small), weight_type=arrow_type)
        record = upload(live, arrow_bytes(table), ARROW).json()
        assert record["weight_dtype"] == dtype, record
    halves = pa.array(np.asarray(graph.weight % 50, dtype=np.float16))
    table = pa.table({"src": graph.src, "dst": graph.dst, "weight": halves})
    assert upload(live, arrow_bytes(table), ARROW).json()["weight_dtype"] == "float32"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"not arrow at all", "not a valid arrow graph"),
        (arrow_bytes(pa.table({"src": [0], "dst": [1]})), "missing column(s) weight"),
        (arrow_bytes(pa.table({"src": [0, 1], "dst": [1, 2], "weight": [1.0, None]})), "null values"),
        (arrow_bytes(pa.table({"src": [0], "dst": [1], "weight": ["heavy"]})), "must hold numbers"),
    ],
)
def test_bad_arrow_bodies_are_422_naming_the_problem(live: LiveServer, body, words):
    response = upload(live, body, ARROW)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert words in response.json()["detail"]


def test_null_weight_names_the_row(live: LiveServer):
    body = arrow_bytes(pa.table({"src": [0, 1, 2], "dst": [1, 2, 0], "weight": [1.0, 2.0, None]}))
    problem = upload(live, body, ARROW).json()
    assert problem["field"] == "weight" and problem["index"] == 2


def test_content_type_and_format_must_agree(live: LiveServer):
    graph = random_graph(1, 10, 20)
    response = upload(live, arrow_bytes(table_of(graph)), ARROW, fmt="parquet")
    assert response.status_code == 400 and response.json()["field"] == "format"


def test_results_as_arrow_ipc(live: LiveServer):
    graph = random_graph(11, 200, 900, dtype=np.dtype("float32"))
    record = upload(live, arrow_bytes(table_of(graph)), ARROW).json()
    job = solve(live, record["id"])
    response = live.client.get(f"/v1/jobs/{job['id']}/result", headers={"accept": ARROW})
    assert response.status_code == 200 and response.headers["content-type"] == ARROW
    table = read_arrow_result(response.content)
    ids, weights, _ = live.result_npz(job["id"])
    assert table.column("edge_ids").type == pa.int64() and table.column("weights").type == pa.float32()
    assert table.column("edge_ids").to_numpy().tolist() == ids.tolist()
    assert table.column("weights").to_numpy().tolist() == weights.tolist()
    metadata = table.schema.metadata
    assert json.loads(metadata[b"total_weight"]) == job["result"]["total_weight"]
    assert int(metadata[b"num_components"]) == job["result"]["num_components"]
    assert json.loads(response.headers["x-mst-total-weight"]) == job["result"]["total_weight"]


def test_one_shot_arrow_in_arrow_out(live: LiveServer):
    graph = random_graph(5, 120, 500, dtype=np.dtype("int64"))
    response = live.client.post(
        "/v1/mst", content=parquet_bytes(table_of(graph)), headers={"content-type": PARQUET, "accept": ARROW}
    )
    assert response.status_code == 200 and response.headers["content-type"] == ARROW
    table = read_arrow_result(response.content)
    metadata = table.schema.metadata
    check_forest(
        table.column("edge_ids").to_numpy(),
        table.column("weights").to_numpy(),
        json.loads(metadata[b"total_weight"]),
        int(metadata[b"num_components"]),
        graph,
    )


def test_unacceptable_accept_is_406_naming_what_is_offered(live: LiveServer):
    graph = random_graph(2, 20, 40)
    record = live.upload_npz(graph.src, graph.dst, graph.weight)
    job = solve(live, record["id"])
    for path in (f"/v1/jobs/{job['id']}/result", "/v1/jobs/no-such-job/result"):  # before the lookup
        response = live.client.get(path, headers={"accept": "text/csv"})
        assert response.status_code == 406, response.text
        problem = response.json()
        assert problem["code"] == "not_acceptable" and problem["field"] == "accept"
        assert f"application/json, application/octet-stream, {ARROW}" in problem["detail"]
    response = live.client.post(
        "/v1/mst",
        content=arrow_bytes(table_of(graph)),
        headers={"content-type": ARROW, "accept": "image/png"},
    )
    assert response.status_code == 406


@pytest.fixture
def no_pyarrow(tmp_path: Path) -> str:
    """A PYTHONPATH on which ``import pyarrow`` fails, as where the 'arrow' extra is not installed."""
    shadow = tmp_path / "no_pyarrow" / "pyarrow"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("pyarrow is blocked for this test")\n')
    return os.pathsep.join([str(shadow.parent), *filter(None, [os.environ.get("PYTHONPATH")])])


def test_without_pyarrow_uploads_are_415_and_arrow_results_406(server_factory: ServerFactory, no_pyarrow):
    server = server_factory(PYTHONPATH=no_pyarrow)
    graph = random_graph(4, 30, 80)
    body = arrow_bytes(table_of(graph))
    for content_type, fmt in [(ARROW, None), (OCTET, "arrow"), (PARQUET, None), (OCTET, "parquet")]:
        response = upload(server, body, content_type, fmt)
        assert response.status_code == 415, response.text
        assert "pyarrow" in response.json()["detail"] and "mst-service[arrow]" in response.json()["detail"]
    record = server.upload_npz(graph.src, graph.dst, graph.weight)  # the rest works as before
    job = solve(server, record["id"])
    response = server.client.get(f"/v1/jobs/{job['id']}/result", headers={"accept": ARROW})
    assert response.status_code == 406
    detail = response.json()["detail"]
    assert "needs pyarrow" in detail and "offers application/json, application/octet-stream." in detail
    mixed = server.client.get(f"/v1/jobs/{job['id']}/result", headers={"accept": f"{ARROW}, {OCTET};q=0.5"})
    assert mixed.status_code == 200 and mixed.headers["content-type"] == OCTET
    assert server.client.get(f"/v1/jobs/{job['id']}/result").json()["edge_ids"] == ids_of(server, job["id"])
    assert "pyarrow is blocked" not in server.log()  # refused up front, never a traceback


def ids_of(server: LiveServer, job_id: str) -> list[int]:
    ids, _, _ = server.result_npz(job_id)
    return ids.tolist()


@pytest.mark.parametrize(("task", "column"), [("components", "labels"), ("dendrogram", "linkage")])
def test_other_tasks_results_as_arrow_columns(live: LiveServer, task, column):
    graph = random_graph(9, 60, 300, dtype=np.dtype("float64"))  # connected: one component
    record = live.upload_npz(graph.src, graph.dst, graph.weight)
    job = live.client.post(f"/v1/graphs/{record['id']}/jobs", params={"wait": 30}, json={"task": task}).json()
    assert job["status"] == "succeeded", job
    result = f"/v1/jobs/{job['id']}/result"
    table = read_arrow_result(live.client.get(result, headers={"accept": ARROW}).content)
    assert table.schema.metadata[b"task"] == task.encode()
    expected = live.client.get(result).json()[column]
    assert table.column(column).to_pylist() == expected  # a linkage: one list of 4 per row
