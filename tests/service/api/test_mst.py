"""POST /v1/mst (one shot) against a live server."""

from __future__ import annotations

import io
import json

import numpy as np

from tests.utils.graphs import random_graph

from ..live import OCTET, LiveServer, npz_body, settled
from ..oracle import check_forest
from .test_graphs import problem


def counts(live: LiveServer) -> tuple[int, int, int]:
    spool = live.data_dir / "spool"
    return settled(
        lambda: (
            len(live.client.get("/v1/graphs").json()["graphs"]),
            len(list((spool / "results").iterdir())),
            len(list((spool / "tmp").iterdir())),
        )
    )


def test_one_shot_json_in_json_out(live: LiveServer) -> None:
    before = counts(live)
    g = random_graph(11, 120, 600, dtype="float64", num_weights=None, components=2, isolated=3)
    body = {
        "src": g.src.tolist(),
        "dst": g.dst.tolist(),
        "weight": g.weight.tolist(),
        "num_vertices": g.num_vertices,
    }
    response = live.client.post("/v1/mst", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert "job_id" not in result and result["compute_ms"] >= 0
    check_forest(result["edge_ids"], result["weights"], result["total_weight"], result["num_components"], g)
    assert counts(live) == before  # nothing stored, temporaries removed


def test_one_shot_binary_in_binary_out(live: LiveServer) -> None:
    before = counts(live)
    g = random_graph(12, 500, 4000, dtype="int32", num_weights=30)
    response = live.client.post(
        "/v1/mst",
        content=npz_body(g.src, g.dst, g.weight, g.num_vertices),
        headers={"content-type": OCTET, "accept": OCTET},
    )
    assert response.status_code == 200 and response.headers["content-type"] == OCTET
    with np.load(io.BytesIO(response.content)) as npz:
        edge_ids, weights = npz["edge_ids"], npz["weights"]
    assert weights.dtype == np.int32
    check_forest(
        edge_ids,
        weights,
        json.loads(response.headers["x-mst-total-weight"]),
        int(response.headers["x-mst-num-components"]),
        g,
    )
    assert float(response.headers["x-mst-compute-ms"]) >= 0
    assert counts(live) == before


def test_one_shot_text_format(live: LiveServer) -> None:
    response = live.client.post(
        "/v1/mst",
        params={"format": "edgelist"},
        content=b"0 1 2\n1 2 1\n0 2 1\n",
        headers={"content-type": OCTET},
    )
    assert response.status_code == 200
    assert response.json()["edge_ids"] == [1, 2]


def test_one_shot_errors(live: LiveServer) -> None:
    before = counts(live)
    body = problem(
        live.client.post("/v1/mst", json={"src": [0, 5], "dst": [1, 0], "weight": [1, 1], "num_vertices": 2}),
        422,
        "vertex_out_of_range",
    )
    assert (body["field"], body["index"]) == ("src", 1)
    problem(
        live.client.post("/v1/mst", content=b"junk", headers={"content-type": OCTET}), 422, "invalid_graph"
    )
    problem(live.client.post("/v1/mst", content=b"\0" * 2_000_001, headers={"content-type": OCTET}), 413)
    assert counts(live) == before
