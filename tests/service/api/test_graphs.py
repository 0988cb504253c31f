"""/v1/graphs against a live server: JSON and binary uploads, list, describe, delete, bad input."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.utils.graphs import random_graph

from ..live import OCTET, LiveServer, npz_body, settled
from ..oracle import check_forest

PROBLEM = "application/problem+json"


def spool_state(live: LiveServer) -> tuple[set[str], set[str], int]:
    spool = live.data_dir / "spool"

    def read() -> tuple[set[str], set[str], int]:
        graphs = {p.name for p in (spool / "graphs").iterdir()}
        tmp = {p.name for p in (spool / "tmp").iterdir()}
        return graphs, tmp, len(live.client.get("/v1/graphs").json()["graphs"])

    return settled(read)


@pytest.fixture
def nothing_stored(live: LiveServer) -> Iterator[None]:
    """The test's requests must leave the spool and the graph list as they were."""
    before = spool_state(live)
    yield
    assert spool_state(live) == before


def problem(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body["title"] and body["detail"] and body["type"]
    if code is not None:
        assert body["code"] == code, body
    return body


def post_json(live: LiveServer, body: Any) -> Any:
    return live.client.post("/v1/graphs", json=body)


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64"])
def test_npz_upload_submit_poll_result_matches_engine_and_scipy(live: LiveServer, dtype: str) -> None:
    g = random_graph(7, 300, 1500, dtype=dtype, num_weights=40, components=3, isolated=5)
    graph = live.upload_npz(g.src, g.dst, g.weight, g.num_vertices)
    assert graph["num_vertices"] == g.num_vertices and graph["num_edges"] == g.num_edges
    assert graph["weight_dtype"] == dtype and graph["source_format"] == "npz"
    assert graph["residency"]["status"] == "resident" and graph["residency"]["device_bytes"] > 0

    submitted = live.submit(graph["id"])
    assert submitted.status_code == 202
    job = submitted.json()
    assert submitted.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["status"] in ("queued", "running", "succeeded") and job["graph_id"] == graph["id"]
    done = live.poll(job["id"])
    assert done["status"] == "succeeded", done
    assert done["started_at"] >= done["created_at"] and done["finished_at"] >= done["started_at"]
    summary = done["result"]
    assert summary["compute_ms"] >= 0

    as_json = live.client.get(f"/v1/jobs/{job['id']}/result").json()
    check_forest(
        as_json["edge_ids"], as_json["weights"], as_json["total_weight"], as_json["num_components"], g
    )
    assert as_json["total_weight"] == summary["total_weight"]
    assert as_json["num_edges"] == summary["num_edges"] == len(as_json["edge_ids"])

    edge_ids, weights, headers = live.result_npz(job["id"])
    assert edge_ids.dtype == np.int64 and weights.dtype == np.dtype(dtype)
    check_forest(edge_ids, weights, json.loads(headers["x-mst-total-weight"]), summary["num_components"], g)
    assert edge_ids.tolist() == as_json["edge_ids"]


def test_json_upload_and_location(live: LiveServer) -> None:
    g = random_graph(3, 50, 200, dtype="int64", components=2)
    response = post_json(
        live,
        {
            "src": g.src.tolist(),
            "dst": g.dst.tolist(),
            "weight": g.weight.tolist(),
            "num_vertices": g.num_vertices,
        },
    )
    assert response.status_code == 201, response.text
    graph = response.json()
    assert response.headers["location"] == f"/v1/graphs/{graph['id']}"
    assert graph["source_format"] == "json" and graph["weight_dtype"] == "int64"
    assert live.client.get(response.headers["location"]).json() == graph
    job = live.submit(graph["id"], wait=30).json()
    result = live.client.get(f"/v1/jobs/{job['id']}/result").json()
    check_forest(result["edge_ids"], result["weights"], result["total_weight"], result["num_components"], g)


@pytest.mark.parametrize(
    ("weights", "extra", "dtype"),
    [
        ([1, 2, 3], {}, "int64"),
        ([1, 2.5, 3], {}, "float64"),
        ([1.0, 2.0, 3.0], {}, "float64"),
        ([1, 2, 3], {"weight_dtype": "int32"}, "int32"),
        ([1, 2.5, 3], {"weight_dtype": "float32"}, "float32"),
        ([2**53, 1.5, 0], {}, "float64"),
    ],
)
def test_json_weight_dtype_rule(
    live: LiveServer, weights: list[Any], extra: dict[str, Any], dtype: str
) -> None:
    response = post_json(live, {"src": [0, 1, 2], "dst": [1, 2, 0], "weight": weights, **extra})
    assert response.status_code == 201, response.text
    assert response.json()["weight_dtype"] == dtype


def test_json_int64_weights_stay_exact(live: LiveServer) -> None:
    # 2**60 and 2**60 + 1 are one float64: only an exact int64 path picks edge 1 over edge 0.
    graph = post_json(live, {"src": [0, 0], "dst": [1, 1], "weight": [2**60 + 1, 2**60]}).json()
    job = live.submit(graph["id"], wait=30).json()
    result = live.client.get(f"/v1/jobs/{job['id']}/result").json()
    assert result["edge_ids"] == [1] and result["total_weight"] == 2**60


@pytest.mark.parametrize("fmt", ["edgelist", "mtx", "dimacs"])
def test_text_formats(live: LiveServer, fmt: str) -> None:
    bodies = {
        "edgelist": b"# a triangle and a pendant\n0 1 5\n1 2 1\n2 0 2\n2 3 7\n",
        "mtx": b"%%MatrixMarket matrix coordinate integer general\n4 4 4\n1 2 5\n2 3 1\n3 1 2\n3 4 7\n",
        "dimacs": b"c triangle\np sp 4 4\na 1 2 5\na 2 3 1\na 3 1 2\na 3 4 7\n",
    }
    response = live.client.post(
        "/v1/graphs", params={"format": fmt}, content=bodies[fmt], headers={"content-type": OCTET}
    )
    assert response.status_code == 201, response.text
    graph = response.json()
    assert (graph["num_vertices"], graph["num_edges"], graph["source_format"]) == (4, 4, fmt)
    job = live.submit(graph["id"], wait=30).json()
    result = live.client.get(f"/v1/jobs/{job['id']}/result").json()
    assert result["edge_ids"] == [1, 2, 3] and result["total_weight"] == 10


def test_list_get_delete(live: LiveServer) -> None:
    a = live.upload_npz([0, 1], [1, 2], [1.5, 2.5])
    b = live.upload_npz([0], [1], [7])
    listed = [g["id"] for g in live.client.get("/v1/graphs").json()["graphs"]]
    assert listed.index(a["id"]) < listed.index(b["id"])
    described = live.client.get(f"/v1/graphs/{a['id']}").json()
    assert described["num_edges"] == 2 and described["residency"]["backend"] == "cpu"
    spool_file = live.data_dir / "spool" / "graphs" / f"{a['id']}.npz"
    assert spool_file.exists()

    assert live.client.delete(f"/v1/graphs/{a['id']}").status_code == 204
    assert not spool_file.exists()
    problem(live.client.get(f"/v1/graphs/{a['id']}"), 404, "graph_not_found")
    problem(live.client.delete(f"/v1/graphs/{a['id']}"), 404, "graph_not_found")
    problem(live.submit(a["id"]), 404, "graph_not_found")
    assert a["id"] not in [g["id"] for g in live.client.get("/v1/graphs").json()["graphs"]]
    assert live.submit(b["id"], wait=30).json()["status"] == "succeeded"


def test_ids_are_random(live: LiveServer) -> None:
    ids = [live.upload_npz([0], [1], [1])["id"] for _ in range(3)]
    assert len(set(ids)) == 3
    assert all(len(i) == 34 and i.startswith("g_") for i in ids)
    assert len({i[2:6] for i in ids}) == 3  # not a counter


# -- bad input: 4xx problem+json naming what is wrong, nothing stored ---------------------------


@pytest.mark.usefixtures("nothing_stored")
class TestBadUploads:
    def test_invalid_json(self, live: LiveServer) -> None:
        r = live.client.post(
            "/v1/graphs", content=b'{"src": [0, 1', headers={"content-type": "application/json"}
        )
        body = problem(r, 400, "invalid_request")
        assert "not valid JSON" in body["detail"]

    def test_missing_column(self, live: LiveServer) -> None:
        body = problem(post_json(live, {"src": [0], "weight": [1]}), 422, "invalid_upload")
        assert body["field"] == "dst" and "dst" in body["detail"]

    def test_unknown_member(self, live: LiveServer) -> None:
        body = problem(post_json(live, {"src": [0], "dst": [1], "weight": [1], "wieght": 1}), 422)
        assert body["field"] == "wieght"

    def test_wrong_lengths(self, live: LiveServer) -> None:
        body = problem(post_json(live, {"src": [0, 1], "dst": [1, 2], "weight": [1]}), 422, "invalid_upload")
        assert "same length" in body["detail"] and "2, 2 and 1" in body["detail"]

    def test_wrong_lengths_binary(self, live: LiveServer) -> None:
        r = live.client.post(
            "/v1/graphs", content=npz_body([0, 1], [1, 2], [1.0]), headers={"content-type": OCTET}
        )
        body = problem(r, 422, "invalid_shape")
        assert "same length" in body["detail"]

    def test_vertex_id_out_of_range_names_the_index(self, live: LiveServer) -> None:
        body = problem(
            post_json(live, {"src": [0, 1, 2], "dst": [1, 9, 0], "weight": [1, 2, 3], "num_vertices": 3}),
            422,
            "vertex_out_of_range",
        )
        assert (body["field"], body["index"]) == ("dst", 1)
        assert "dst[1]" in body["detail"] and "9" in body["detail"]

    def test_negative_id_binary_names_the_index(self, live: LiveServer) -> None:
        r = live.client.post(
            "/v1/graphs", content=npz_body([0, 1, -4], [1, 2, 0], [1, 2, 3]), headers={"content-type": OCTET}
        )
        body = problem(r, 422, "vertex_out_of_range")
        assert (body["field"], body["index"]) == ("src", 2)

    def test_nan_json(self, live: LiveServer) -> None:
        r = live.client.post(
            "/v1/graphs",
            content=b'{"src":[0,1,2],"dst":[1,2,0],"weight":[1.0,NaN,2]}',
            headers={"content-type": "application/json"},
        )
        body = problem(r, 422, "non_finite_weight")
        assert (body["field"], body["index"]) == ("weight", 1)

    def test_nan_and_inf_binary(self, live: LiveServer) -> None:
        for bad, index in ((np.nan, 2), (np.inf, 2)):
            w = np.array([1.0, 2.0, bad], dtype=np.float32)
            r = live.client.post(
                "/v1/graphs", content=npz_body([0, 1, 2], [1, 2, 0], w), headers={"content-type": OCTET}
            )
            body = problem(r, 422, "non_finite_weight")
            assert body["index"] == index

    def test_boolean_and_string_ids(self, live: LiveServer) -> None:
        body = problem(post_json(live, {"src": [0, True], "dst": [1, 2], "weight": [1, 2]}), 422)
        assert (body["field"], body["index"]) == ("src", 1)
        body = problem(post_json(live, {"src": [0, 1], "dst": [1, 2], "weight": [1, "2"]}), 422)
        assert (body["field"], body["index"]) == ("weight", 1)

    def test_int_weight_out_of_range_of_dtype(self, live: LiveServer) -> None:
        body = problem(
            post_json(live, {"src": [0, 1], "dst": [1, 2], "weight": [1, 2**31], "weight_dtype": "int32"}),
            422,
            "invalid_upload",
        )
        assert (body["field"], body["index"]) == ("weight", 1)
        body = problem(
            post_json(live, {"src": [0, 1], "dst": [1, 2], "weight": [1, 2**64]}), 422, "invalid_upload"
        )
        assert body["index"] == 1

    def test_inexact_float64_refused(self, live: LiveServer) -> None:
        body = problem(
            post_json(live, {"src": [0, 1, 2], "dst": [1, 2, 0], "weight": [0.5, 1, 2**53 + 1]}), 422
        )
        assert (body["field"], body["index"]) == ("weight", 2) and "exactly" in body["detail"]

    def test_unsupported_dtype_binary(self, live: LiveServer) -> None:
        r = live.client.post(
            "/v1/graphs",
            content=npz_body([0], [1], np.array([1], dtype=np.uint8)),
            headers={"content-type": OCTET},
        )
        body = problem(r, 422, "unsupported_dtype")
        assert body["field"] == "weight"

    def test_unknown_format(self, live: LiveServer) -> None:
        r = live.client.post(
            "/v1/graphs", params={"format": "gml"}, content=b"x", headers={"content-type": OCTET}
        )
        body = problem(r, 422, "invalid_request")
        assert body["field"] == "format" and "npz" in body["detail"]

    def test_format_with_json(self, live: LiveServer) -> None:
        r = live.client.post(
            "/v1/graphs", params={"format": "npz"}, json={"src": [0], "dst": [1], "weight": [1]}
        )
        assert problem(r, 400)["field"] == "format"

    def test_not_a_graph_file(self, live: LiveServer) -> None:
        for fmt, body in (("npz", b"not a zip"), ("npz", b""), ("mtx", b"hello"), ("edgelist", b"0 x 1\n")):
            r = live.client.post(
                "/v1/graphs", params={"format": fmt}, content=body, headers={"content-type": OCTET}
            )
            assert problem(r, 422, "invalid_graph")["field"] == "body"

    def test_unsupported_media_type(self, live: LiveServer) -> None:
        r = live.client.post("/v1/graphs", content=b"0 1 1", headers={"content-type": "text/plain"})
        problem(r, 415, "unsupported_media_type")

    def test_too_large_binary_by_content_length(self, live: LiveServer) -> None:
        r = live.client.post("/v1/graphs", content=b"\0" * 2_000_001, headers={"content-type": OCTET})
        assert "2000000" in problem(r, 413, "payload_too_large")["detail"]

    def test_too_large_binary_streamed(self, live: LiveServer) -> None:
        def chunks() -> Iterator[bytes]:
            for _ in range(40):
                yield b"\0" * 65536  # 2.6 MB, no Content-Length

        r = live.client.post("/v1/graphs", content=chunks(), headers={"content-type": OCTET})
        problem(r, 413, "payload_too_large")

    def test_too_large_json(self, live: LiveServer) -> None:
        big = {"src": [0] * 200_000, "dst": [1] * 200_000, "weight": [1] * 200_000}
        problem(post_json(live, big), 413, "payload_too_large")

    def test_too_many_edges(self, live: LiveServer) -> None:
        m = 50_001
        r = live.client.post(
            "/v1/graphs",
            content=npz_body(np.zeros(m, np.int32), np.ones(m, np.int32), np.ones(m, np.float32)),
            headers={"content-type": OCTET},
        )
        assert "50000" in problem(r, 413, "payload_too_large")["detail"]


def test_unknown_ids_are_404(live: LiveServer) -> None:
    problem(live.client.get("/v1/graphs/g_0123"), 404, "graph_not_found")
    problem(live.client.get("/v1/graphs/../../etc/passwd"), 404)
    problem(live.client.post("/v1/graphs/nope/mst"), 404, "graph_not_found")
