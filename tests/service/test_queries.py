"""Queries of a resident graph over HTTP: max forests, what-ifs, clusters, dendrograms, new weights, cache.

Every answer is checked against an independent reference (Kruskal on exact numbers, SciPy's
connected_components and single linkage); the weight-update race (jobs submitted before and after
a change) runs against a real server, and a restart reloads the new weights.
"""

from __future__ import annotations

import io
import time
from typing import Any

import numpy as np
import pytest
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial.distance import pdist, squareform

from service.timing import parse_header
from tests.utils.graphs import EdgeGraph, random_graph
from tests.utils.oracles import UnionFind

from .conftest import ServerFactory
from .live import OCTET, LiveServer, npz_body


def kruskal(graph: EdgeGraph, weight: Any = None, *, objective: str = "min", exclude: Any = ()) -> list[int]:
    w = np.asarray(graph.weight if weight is None else weight).tolist()
    s, d = graph.src.tolist(), graph.dst.tolist()
    gone = set(np.asarray(exclude).tolist())
    sign = 1 if objective == "min" else -1
    uf = UnionFind(graph.num_vertices)
    order = sorted((i for i in range(len(w)) if i not in gone), key=lambda i: (sign * w[i], i))
    return sorted(i for i in order if uf.union(s[i], d[i]))


def upload(server: LiveServer, graph: EdgeGraph) -> str:
    graph_id: str = server.upload_npz(graph.src, graph.dst, graph.weight, graph.num_vertices)["id"]
    return graph_id


def run_job(server: LiveServer, graph_id: str, task: str, params: dict[str, Any] | None = None, **query: Any):
    response = server.client.post(
        f"/v1/graphs/{graph_id}/jobs",
        json={"task": task, "params": params or {}},
        params={"wait": 30, **query},
    )
    assert response.status_code == 200, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    return job, server.client.get(f"/v1/jobs/{job['id']}/result").json()


def npy_body(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def test_max_forest_and_what_if(live: LiveServer) -> None:
    graph = random_graph(31, 120, 700, dtype="int32", num_weights=6, components=2)
    graph_id = upload(live, graph)
    job = live.client.post(f"/v1/graphs/{graph_id}/mst", params={"wait": 30, "objective": "max"}).json()
    assert job["status"] == "succeeded" and job["params"] == {"objective": "max"}
    result = live.client.get(f"/v1/jobs/{job['id']}/result").json()
    assert result["edge_ids"] == kruskal(graph, objective="max")
    assert result["total_weight"] == int(graph.weight[result["edge_ids"]].sum())
    tree = kruskal(graph)
    exclude = [*tree[::3], 5, 6, 7]
    job, result = run_job(live, graph_id, "mst", {"exclude": exclude})
    assert result["edge_ids"] == kruskal(graph, exclude=exclude)
    assert job["task"] == "mst" and job["params"] == {"exclude": exclude}
    _, result = run_job(live, graph_id, "mst", {"objective": "max", "exclude": exclude})
    assert result["edge_ids"] == kruskal(graph, objective="max", exclude=exclude)
    # binary result of a what-if: the same arrays
    response = live.client.get(f"/v1/jobs/{job['id']}/result", headers={"accept": OCTET})
    with np.load(io.BytesIO(response.content), allow_pickle=False) as npz:
        assert npz["edge_ids"].tolist() == kruskal(graph, exclude=exclude)
    # and the graph is untouched
    _, plain = run_job(live, graph_id, "mst")
    assert plain["edge_ids"] == tree


def test_components_and_clusters(live: LiveServer) -> None:
    rng = np.random.default_rng(4)
    points = rng.random((80, 2))
    distances = squareform(pdist(points))
    src, dst = np.triu_indices(80, 1)
    graph = EdgeGraph(src, dst, distances[src, dst], 80, "complete")
    graph_id = upload(live, graph)
    expected = linkage(points, "single")
    job, result = run_job(live, graph_id, "dendrogram")
    got = np.array(result["linkage"])
    np.testing.assert_array_equal(got[:, [0, 1, 3]], expected[:, [0, 1, 3]])
    np.testing.assert_allclose(got[:, 2], expected[:, 2], rtol=1e-12)
    assert job["result"]["num_edges"] == 79
    for k in (1, 4, 17):
        job, result = run_job(live, graph_id, "clusters", {"k": k})
        flat = fcluster(expected, k, "maxclust")
        assert (
            len(set(zip(result["labels"], flat.tolist(), strict=True)))
            == k
            == job["result"]["num_components"]
        )
    height = float(expected[40, 2])
    _, result = run_job(live, graph_id, "clusters", {"threshold": height})
    flat = fcluster(expected, height, "distance").tolist()
    assert len(set(zip(result["labels"], flat, strict=True))) == len(set(flat)) == len(set(result["labels"]))
    # components (binary result too), with and without some edges
    sparse = random_graph(8, 300, 260, dtype="float64", components=5, isolated=10)
    sparse_id = upload(live, sparse)
    job, result = run_job(live, sparse_id, "components")
    adj = coo_matrix((np.ones(sparse.num_edges), (sparse.src, sparse.dst)), shape=(300, 300))
    count, labels = connected_components(adj, directed=False)
    assert result["labels"] == labels.tolist() and job["result"]["num_components"] == count
    response = live.client.get(f"/v1/jobs/{job['id']}/result", headers={"accept": OCTET})
    with np.load(io.BytesIO(response.content), allow_pickle=False) as npz:
        assert npz["labels"].tolist() == labels.tolist()
    exclude = list(range(0, sparse.num_edges, 2))
    keep = np.arange(1, sparse.num_edges, 2)
    _, result = run_job(live, sparse_id, "components", {"exclude": exclude})
    adj = coo_matrix((np.ones(keep.size), (sparse.src[keep], sparse.dst[keep])), shape=(300, 300))
    assert result["labels"] == connected_components(adj, directed=False)[1].tolist()


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"task": "median"}, "task"),
        ({"task": "clusters", "params": {}}, "exactly one"),
        ({"task": "clusters", "params": {"k": 2, "threshold": 1.0}}, "exactly one"),
        ({"task": "clusters", "params": {"k": 0}}, "params.k"),
        ({"task": "mst", "params": {"objective": "median"}}, "params.objective"),
        ({"task": "mst", "params": {"exclude": [0, 99]}}, "params.exclude[1]"),
        ({"task": "mst", "params": {"colour": "red"}}, "params.colour"),
        ({"task": "dendrogram", "params": {"k": 2}}, "params.k"),
    ],
)
def test_bad_jobs_are_refused_with_the_parameter_named(live: LiveServer, body: dict, detail: str) -> None:
    graph_id = live.upload_npz([0, 1, 2], [1, 2, 0], [1.0, 2.0, 3.0])["id"]
    response = live.client.post(f"/v1/graphs/{graph_id}/jobs", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert detail in response.json()["detail"]


def test_a_job_that_cannot_be_answered_fails_with_a_reason(live: LiveServer) -> None:
    graph_id = live.upload_npz([0, 2], [1, 3], [1, 1])["id"]  # two components
    response = live.client.post(
        f"/v1/graphs/{graph_id}/jobs", json={"task": "dendrogram"}, params={"wait": 30}
    )
    job = response.json()
    assert job["status"] == "failed" and "connected graph" in job["error"]["message"]
    response = live.client.post(
        f"/v1/graphs/{graph_id}/jobs", json={"task": "clusters", "params": {"k": 1}}, params={"wait": 30}
    )
    assert response.json()["status"] == "failed" and "[2, 4]" in response.json()["error"]["message"]


@pytest.mark.slow
def test_new_weights_race_and_restart(server_factory: ServerFactory, tmp_path: Any) -> None:
    data = tmp_path / "data"
    server = server_factory(data)
    graph = random_graph(12, 3000, 40_000, dtype="int32", num_weights=50)
    graph_id = upload(server, graph)
    rng = np.random.default_rng(9)
    new = rng.integers(-100, 100, graph.num_edges).astype(np.float32)  # and a new dtype
    before = [server.submit(graph_id).json() for _ in range(8)]
    response = server.client.put(
        f"/v1/graphs/{graph_id}/weights", content=npy_body(new), headers={"content-type": OCTET}
    )
    assert response.status_code == 200, response.text
    record = response.json()
    assert record["weights_version"] == 1 and record["weight_dtype"] == "float32"
    after = [server.submit(graph_id).json() for _ in range(4)]
    old_tree, new_tree = kruskal(graph), kruskal(graph, new)
    assert old_tree != new_tree
    for jobs, version, tree in ((before, 0, old_tree), (after, 1, new_tree)):
        for job in jobs:
            done = server.poll(job["id"])
            assert done["status"] == "succeeded" and done["weights_version"] == version
            result = server.client.get(f"/v1/jobs/{job['id']}/result").json()
            assert result["edge_ids"] == tree, version

    # some weights, as JSON (exact in float32) and as an npz
    ids = [3, 17, 400]
    response = server.client.patch(
        f"/v1/graphs/{graph_id}/weights", json={"edge_ids": ids, "weights": [-500, 0.5, -7]}
    )
    assert response.status_code == 200 and response.json()["weights_version"] == 2
    new[ids] = [-500, 0.5, -7]
    buffer = io.BytesIO()
    np.savez(buffer, edge_ids=np.array([5, 6]), weights=np.array([-600, -601], dtype=np.int64))
    response = server.client.patch(
        f"/v1/graphs/{graph_id}/weights",
        params={"format": "npz"},
        content=buffer.getvalue(),
        headers={"content-type": OCTET},
    )
    assert response.status_code == 200 and response.json()["weights_version"] == 3
    new[[5, 6]] = [-600, -601]
    job = server.submit(graph_id, wait=30).json()
    assert job["weights_version"] == 3
    assert server.client.get(f"/v1/jobs/{job['id']}/result").json()["edge_ids"] == kruskal(graph, new)

    # refused updates change nothing; a cut-off .npy is refused by the API, naming the shortfall
    cut = server.client.put(
        f"/v1/graphs/{graph_id}/weights", content=npy_body(new)[:-2], headers={"content-type": OCTET}
    )
    assert cut.status_code == 422 and "bytes of data, the file has" in cut.json()["detail"], cut.text
    for bad in (
        server.client.put(
            f"/v1/graphs/{graph_id}/weights", content=npy_body(new[:-1]), headers={"content-type": OCTET}
        ),
        server.client.patch(f"/v1/graphs/{graph_id}/weights", json={"edge_ids": [1], "weights": [0.1]}),
        server.client.patch(f"/v1/graphs/{graph_id}/weights", json={"edge_ids": [10**6], "weights": [1]}),
        server.client.put(
            f"/v1/graphs/{graph_id}/weights",
            content=b'{"weight": [' + b",".join([b"NaN"] * graph.num_edges) + b"]}",
            headers={"content-type": "application/json"},
        ),
    ):
        assert 400 <= bad.status_code < 500, bad.text
        assert bad.headers["content-type"] == "application/problem+json"
    record = server.client.get(f"/v1/graphs/{graph_id}").json()
    assert record["weight_dtype"] == "float32"
    job = server.submit(graph_id, wait=30).json()
    assert job["weights_version"] == record["weights_version"]  # refused updates: versions, no change
    assert server.client.get(f"/v1/jobs/{job['id']}/result").json()["edge_ids"] == kruskal(graph, new)

    # a restart reloads the new weights
    server.stop()
    server = server_factory(data)
    assert server.client.get(f"/v1/graphs/{graph_id}").json()["weights_version"] == record["weights_version"]
    job = server.submit(graph_id, wait=60).json()
    assert job["status"] == "succeeded", job
    assert server.client.get(f"/v1/jobs/{job['id']}/result").json()["edge_ids"] == kruskal(graph, new)


def test_cached_answers(live: LiveServer) -> None:
    graph = random_graph(14, 200, 900, dtype="int64", num_weights=None)
    graph_id = upload(live, graph)
    first = live.submit(graph_id, wait=30).json()
    assert first["result"]["cached"] is False
    hit = live.client.post(f"/v1/graphs/{graph_id}/mst", params={"wait": 30, "cache": "true"}).json()
    assert hit["status"] == "succeeded" and hit["result"]["cached"] is True and hit["id"] != first["id"]
    assert hit["result"]["compute_ms"] == first["result"]["compute_ms"]
    response = live.client.get(f"/v1/jobs/{hit['id']}/result", headers={"accept": OCTET})
    assert response.headers["x-mst-cached"] == "true"
    assert live.client.get(f"/v1/jobs/{hit['id']}/result").json()["edge_ids"] == kruskal(graph)
    fresh = live.submit(graph_id, wait=30).json()  # the default computes
    assert fresh["result"]["cached"] is False
    # other parameters, or other weights: not the same job
    other = live.client.post(
        f"/v1/graphs/{graph_id}/mst", params={"wait": 30, "cache": "true", "objective": "max"}
    ).json()
    assert other["result"]["cached"] is False
    live.client.patch(f"/v1/graphs/{graph_id}/weights", json={"edge_ids": [0], "weights": [-(10**12)]})
    after = live.client.post(f"/v1/graphs/{graph_id}/mst", params={"wait": 30, "cache": "true"}).json()
    assert after["result"]["cached"] is False and after["weights_version"] == 1


@pytest.mark.gpu
def test_queries_on_the_gpu_backend(server_factory: ServerFactory) -> None:
    """The same answers from a GPU worker: max, what-if, components, clusters, dendrogram, new weights."""
    server = server_factory(MST_BACKEND="gpu")
    test_max_forest_and_what_if(server)
    test_components_and_clusters(server)
    graph = random_graph(12, 3000, 40_000, dtype="int64", num_weights=50)
    graph_id = upload(server, graph)
    new = np.random.default_rng(2).integers(-100, 100, graph.num_edges).astype(np.float64)
    before = [server.submit(graph_id).json() for _ in range(4)]
    response = server.client.put(
        f"/v1/graphs/{graph_id}/weights", content=npy_body(new), headers={"content-type": OCTET}
    )
    assert response.status_code == 200, response.text
    after = server.submit(graph_id, wait=30).json()
    for job in before:
        assert server.poll(job["id"])["weights_version"] == 0
        assert server.client.get(f"/v1/jobs/{job['id']}/result").json()["edge_ids"] == kruskal(graph)
    assert after["weights_version"] == 1
    assert server.client.get(f"/v1/jobs/{after['id']}/result").json()["edge_ids"] == kruskal(graph, new)


def test_uploads_and_weight_updates_say_where_their_time_went(live: LiveServer) -> None:
    """``Server-Timing``: the API's steps and, inside the worker's round trip, the worker's own."""
    graph = random_graph(4, 500, 4_000, dtype="int32", num_weights=50)
    started = time.perf_counter()
    response = live.client.post(
        "/v1/graphs",
        content=npz_body(graph.src, graph.dst, graph.weight, graph.num_vertices),
        headers={"content-type": OCTET},
    )
    elapsed_ms = (time.perf_counter() - started) * 1e3
    assert response.status_code == 201, response.text
    steps = parse_header(response.headers["server-timing"])
    assert list(steps)[:2] == ["receive", "worker"] and list(steps)[-1] == "durable"
    assert {"w-parse", "w-build", "w-prepare"} <= set(steps)
    api = steps["receive"] + steps["worker"] + steps["durable"]
    assert all(ms >= 0 for ms in steps.values()) and api <= elapsed_ms
    assert steps["w-parse"] + steps["w-build"] + steps["w-prepare"] <= steps["worker"]

    graph_id = response.json()["id"]
    new = np.random.default_rng(1).integers(-9, 9, graph.num_edges).astype(np.int32)
    response = live.client.put(
        f"/v1/graphs/{graph_id}/weights", content=npy_body(new), headers={"content-type": OCTET}
    )
    assert response.status_code == 200, response.text
    steps = parse_header(response.headers["server-timing"])
    assert list(steps) == ["receive", "fsync", "worker", "w-apply", "w-prepare", "w-publish", "w-commit"]
    assert steps["w-apply"] + steps["w-prepare"] + steps["w-publish"] + steps["w-commit"] <= steps["worker"]
    _, result = run_job(live, graph_id, "mst")
    assert result["edge_ids"] == kruskal(graph, new)


def _until_gone(paths: list[Any], timeout_s: float = 10.0) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(p.exists() for p in paths):
        time.sleep(0.02)
    return [p for p in paths if p.exists()]


def test_replaced_weights_and_deleted_graphs_leave_no_files(live: LiveServer) -> None:
    """The files a weights update replaces are removed after its answer, a deleted graph's payload
    before the answer (both in threads, off the event loop): nothing is left in the spool."""
    graph = random_graph(5, 300, 2_000, dtype="int64")
    graph_id = upload(live, graph)
    spool = live.data_dir / "spool"
    for seed in (1, 2, 3):  # the second and the third replace the weights file of the one before
        new = np.random.default_rng(seed).integers(-50, 50, graph.num_edges)
        response = live.client.put(
            f"/v1/graphs/{graph_id}/weights", content=npy_body(new), headers={"content-type": OCTET}
        )
        assert response.status_code == 200, response.text
    assert np.array_equal(np.load(spool / "graphs" / f"{graph_id}.weights.npy"), new)
    assert _until_gone(list((spool / "trash").iterdir())) == []
    _, result = run_job(live, graph_id, "mst")
    assert result["edge_ids"] == kruskal(graph, new)
    assert live.client.delete(f"/v1/graphs/{graph_id}").status_code == 204
    payload = [spool / "graphs" / f"{graph_id}.npz", spool / "graphs" / f"{graph_id}.weights.npy"]
    assert [p for p in payload if p.exists()] == []
    assert live.client.get(f"/v1/graphs/{graph_id}").status_code == 404
