"""One-shot computations batched into one disjoint-union run (service/runtime/worker/batching.py).

The batched answer of every member must equal, bit for bit, the answer of a run of its own:
edge ids, weights, component count and total weight (float totals included). Unit tests on the
batching functions (CPU backend), then a live server taking many one-shots at once, one of them
invalid (it gets its own 4xx; the others are unaffected).
"""

from __future__ import annotations

import functools
import io
import json
import re
import threading
from typing import Any

import httpx
import numpy as np
import pytest

import gpu_core
from service.runtime.worker.batching import batched_forests, default_vertices, fits_union
from tests.utils.graphs import EdgeGraph, random_graph

from .conftest import ServerFactory
from .live import OCTET, LiveServer, npz_body

ARROW = "application/vnd.apache.arrow.stream"


def _members(dtype: Any, count: int = 7) -> list[EdgeGraph]:
    graphs = [
        random_graph(
            seed, 40 + 13 * seed, 150 + 40 * seed, dtype=dtype, num_weights=6, components=1 + seed % 3
        )
        for seed in range(count)
    ]
    graphs.append(random_graph(99, 25, 0, dtype=dtype))  # no edges: 25 isolated vertices
    graphs.append(random_graph(98, 60, 200, dtype=dtype, isolated=10, num_weights=None))
    return graphs


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_batched_forests_equal_single_runs(dtype: Any) -> None:
    members = _members(dtype)
    batched = batched_forests([(g.src, g.dst, g.weight, g.num_vertices) for g in members], "cpu")
    assert len(batched) == len(members)
    for graph, got in zip(members, batched, strict=True):
        alone = gpu_core.Graph(
            graph.src, graph.dst, graph.weight, graph.num_vertices, backend="cpu"
        ).minimum_spanning_forest()
        assert got.edge_ids.tolist() == alone.edge_ids.tolist(), graph.name
        assert got.weights.dtype == alone.weights.dtype
        assert got.weights.tobytes() == alone.weights.tobytes()
        assert got.num_components == alone.num_components
        assert got.num_vertices == alone.num_vertices
        assert repr(got.total_weight) == repr(alone.total_weight)  # exactly, floats too


def test_what_may_join_a_union() -> None:
    w = np.ones(3)
    assert fits_union([0, 1, 2], [1, 2, 0], w, 3)
    assert not fits_union([0, 1, 3], [1, 2, 0], w, 3)  # an id out of range: runs alone, refused there
    assert not fits_union([0, -1, 2], [1, 2, 0], w, 3)
    assert not fits_union([0.0, 1.0, 2.0], [1, 2, 0], w, 3)
    assert not fits_union([0, 1], [1, 2, 0], w, 3)
    assert not fits_union([0, 1, 2], [1, 2, 0], w, None)
    assert default_vertices(np.array([0, 4]), np.array([2, 1])) == 5
    assert default_vertices(np.array([], dtype=np.int32), np.array([], dtype=np.int32)) == 0
    assert default_vertices(np.array([0.5]), np.array([1])) is None


def _post_oneshot(server: LiveServer, body: bytes) -> httpx.Response:
    return server.client.post("/v1/mst", content=body, headers={"content-type": OCTET, "accept": OCTET})


def _oneshot(server: LiveServer, body: bytes, out: list[Any], index: int) -> None:
    out[index] = _post_oneshot(server, body)


def _big_job(server: LiveServer) -> str:
    rng = np.random.default_rng(5)
    n, m = 400_000, 1_500_000
    src, dst = rng.integers(0, n, m).astype(np.int32), rng.integers(0, n, m).astype(np.int32)
    graph_id = server.upload_npz(src, dst, rng.integers(-1000, 1000, m).astype(np.int32), n)["id"]
    job_id: str = server.submit(graph_id).json()["id"]
    server.poll(job_id, until=("running", "succeeded"))
    return job_id


def test_many_one_shots_at_once_are_exact_and_share_a_run(server_factory: ServerFactory) -> None:
    server = server_factory(MST_MAX_EDGES="10000000", MST_MAX_UPLOAD_BYTES="200000000")
    members = _members(np.float32, count=10)
    bodies = [npz_body(g.src, g.dst, g.weight, g.num_vertices) for g in members]
    bad = npz_body([0, 1, 7], [1, 2, 0], np.ones(3, np.float32), 3)  # vertex 7 of 3
    bodies.insert(4, bad)
    busy = _big_job(server)  # the one-shots below wait together behind it
    answers: list[Any] = [None] * len(bodies)
    threads = [threading.Thread(target=_oneshot, args=(server, b, answers, i)) for i, b in enumerate(bodies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert server.poll(busy)["status"] == "succeeded"
    refused = answers.pop(4)
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    assert "7" in refused.json()["detail"]
    compute_ms = []
    for graph, response in zip(members, answers, strict=True):
        assert response.status_code == 200, response.text
        alone = gpu_core.Graph(
            graph.src, graph.dst, graph.weight, graph.num_vertices, backend="cpu"
        ).minimum_spanning_forest()
        with np.load(io.BytesIO(response.content), allow_pickle=False) as npz:
            assert npz["edge_ids"].tolist() == alone.edge_ids.tolist(), graph.name
            assert npz["weights"].tobytes() == alone.weights.tobytes()
        assert int(response.headers["x-mst-num-components"]) == alone.num_components
        assert float(response.headers["x-mst-total-weight"]) == alone.total_weight
        compute_ms.append(response.headers["x-mst-compute-ms"])
    # members of one union report its run's time: fewer distinct times than one-shots
    assert len(set(compute_ms)) < len(compute_ms), compute_ms


def test_batching_off_gives_the_same_answers(server_factory: ServerFactory) -> None:
    server = server_factory(MST_ONESHOT_BATCH_EDGES="0")
    graph = _members(np.int64, count=2)[1]
    response = server.client.post(
        "/v1/mst",
        content=npz_body(graph.src, graph.dst, graph.weight, graph.num_vertices),
        headers={"content-type": OCTET},
    )
    assert response.status_code == 200, response.text
    alone = gpu_core.minimum_spanning_forest(
        graph.src, graph.dst, graph.weight, num_vertices=graph.num_vertices, backend="cpu"
    )
    assert response.json()["edge_ids"] == alone.edge_ids.tolist()


def _forest_of(response: Any) -> tuple[list[int], bytes, dict[str, str]]:
    """(edge ids, weights' bytes, summary headers) of a one-shot answer in any representation."""
    kind = response.headers["content-type"]
    headers = {
        k: v for k, v in response.headers.items() if k.startswith("x-mst-") and k != "x-mst-compute-ms"
    }
    if kind.startswith("application/json"):
        body = response.json()
        summary = {k: str(body[k]) for k in ("num_edges", "total_weight", "num_components")}
        return body["edge_ids"], json.dumps(body["weights"]).encode(), {**headers, **summary}
    if kind == ARROW:
        import pyarrow.ipc

        table = pyarrow.ipc.open_stream(response.content).read_all()
        meta = {
            k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items() if k != b"compute_ms"
        }
        return table["edge_ids"].to_pylist(), table["weights"].to_numpy().tobytes(), {**headers, **meta}
    with np.load(io.BytesIO(response.content), allow_pickle=False) as npz:
        assert sorted(npz.files) == ["edge_ids", "weights"]
        return npz["edge_ids"].tolist(), npz["weights"].tobytes(), headers


def test_forests_sent_back_in_the_reply_answer_as_result_files_do(
    server_factory: ServerFactory, tmp_path: Any
) -> None:
    """A small one-shot forest comes back from the worker in its reply (MST_ONESHOT_INLINE_BYTES),
    a larger one through a result file: every representation answers the same either way, and no
    file is left behind."""
    pytest.importorskip("pyarrow")
    inline = server_factory(tmp_path / "a")
    files = server_factory(tmp_path / "b", MST_ONESHOT_INLINE_BYTES="1000")
    graphs = [
        random_graph(3, 5, 6, dtype=np.int32),  # a forest of a few dozen bytes: in the reply on both
        random_graph(4, 900, 3000, dtype=np.float64, components=3),  # ~10 kB: a file on the second
    ]
    for graph in graphs:
        alone = gpu_core.Graph(
            graph.src, graph.dst, graph.weight, graph.num_vertices, backend="cpu"
        ).minimum_spanning_forest()
        body = npz_body(graph.src, graph.dst, graph.weight, graph.num_vertices)
        for accept in (None, OCTET, ARROW):
            headers = {"content-type": OCTET, **({"accept": accept} if accept else {})}
            got = [s.client.post("/v1/mst", content=body, headers=headers) for s in (inline, files)]
            assert [r.status_code for r in got] == [200, 200], [r.text for r in got]
            assert got[0].headers["content-type"] == got[1].headers["content-type"]
            assert _forest_of(got[0]) == _forest_of(got[1])
            edge_ids, _, summary = _forest_of(got[0])
            assert edge_ids == alone.edge_ids.tolist(), (graph.name, accept)
            components = summary.get("x-mst-num-components", summary.get("num_components"))
            assert components == str(alone.num_components), summary
    for server in (inline, files):
        assert not list((server.data_dir / "spool" / "tmp").iterdir())


def test_batched_forests_larger_than_the_pipe_come_back_exact(server_factory: ServerFactory) -> None:
    """One-shots computed in one run send their forests back in one write, far larger than the pipe
    holds (~200 kB each here): each arrives whole and exact, and the runs were shared."""
    server = server_factory(MST_MAX_EDGES="10000000", MST_MAX_UPLOAD_BYTES="200000000")
    members = [random_graph(50 + i, 20_000, 40_000, dtype=np.int64, num_weights=None) for i in range(8)]
    bodies = [npz_body(g.src, g.dst, g.weight, g.num_vertices) for g in members]
    busy = _big_job(server)
    answers: list[Any] = [None] * len(bodies)
    threads = [threading.Thread(target=_oneshot, args=(server, b, answers, i)) for i, b in enumerate(bodies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert server.poll(busy)["status"] == "succeeded"
    for graph, response in zip(members, answers, strict=True):
        assert response.status_code == 200, response.text
        alone = gpu_core.Graph(
            graph.src, graph.dst, graph.weight, graph.num_vertices, backend="cpu"
        ).minimum_spanning_forest()
        edge_ids, weights, headers = _forest_of(response)
        assert edge_ids == alone.edge_ids.tolist() and weights == alone.weights.tobytes()
        assert int(headers["x-mst-total-weight"]) == alone.total_weight
    metrics = server.client.get("/metrics").text
    count = float(re.search(r"^mst_oneshot_batch_members_count (\S+)$", metrics, re.M).group(1))  # type: ignore[union-attr]
    total = float(re.search(r"^mst_oneshot_batch_members_sum (\S+)$", metrics, re.M).group(1))  # type: ignore[union-attr]
    assert count >= len(members) and total > count, metrics  # some one-shots shared a run
    assert server.client.get("/readyz").json()["workers"][0]["restarts"] == 0


def test_one_shots_in_a_killed_workers_pipe_run_on_the_next_worker(server_factory: ServerFactory) -> None:
    """One-shots handed to a worker (in its pipe behind a running job) when it is SIGKILLed had not
    started: each is sent to the new worker and answers its exact forest; none hangs."""
    import signal

    server = server_factory(MST_MAX_EDGES="10000000", MST_MAX_UPLOAD_BYTES="200000000")
    members = _members(np.int32, count=4)
    bodies = [npz_body(g.src, g.dst, g.weight, g.num_vertices) for g in members]
    pid = server.worker_pid()
    _big_job(server)
    sends = [functools.partial(_post_oneshot, server, b) for b in bodies]
    # stopped mid-job: the one-shots are uploaded, queued and handed, into the pipe behind it
    with server.sent_while_stopped(pid, sends, then=signal.SIGKILL, join_s=60) as answers:
        assert server.client.get("/readyz").json()["workers"][0]["queue_depth"] == 0
        assert answers == [None] * len(bodies)
    for graph, response in zip(members, answers, strict=True):
        assert response is not None and response.status_code == 200, response
        with np.load(io.BytesIO(response.content), allow_pickle=False) as npz:
            edge_ids = npz["edge_ids"].tolist()
        alone = gpu_core.Graph(graph.src, graph.dst, graph.weight, graph.num_vertices, backend="cpu")
        assert edge_ids == alone.minimum_spanning_forest().edge_ids.tolist()
    assert server.client.get("/readyz").json()["workers"][0]["requests_resent"] >= len(bodies)


@pytest.mark.gpu
def test_gpu_one_shots_at_once_are_exact(server_factory: ServerFactory) -> None:
    """On a GPU worker: many one-shots at once (batched, their forests sent back
    in the replies; one larger than MST_ONESHOT_INLINE_BYTES, through a file) each answer exactly
    the CPU backend's forest of the graph alone."""
    server = server_factory(MST_BACKEND="gpu", MST_ONESHOT_INLINE_BYTES="40000", MST_MAX_EDGES="1000000")
    assert server.client.get("/readyz").json()["workers"][0]["backend"] == "gpu"
    members = [random_graph(200 + i, 2500, 10_000, dtype=np.int32, num_weights=None) for i in range(40)]
    members.append(random_graph(300, 5000, 20_000, dtype=np.int32, num_weights=None))  # ~60 kB: a file
    members += _members(np.float64)
    bodies = [npz_body(g.src, g.dst, g.weight, g.num_vertices) for g in members]
    answers: list[Any] = [None] * len(bodies)
    threads = [threading.Thread(target=_oneshot, args=(server, b, answers, i)) for i, b in enumerate(bodies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for graph, response in zip(members, answers, strict=True):
        assert response is not None and response.status_code == 200, response
        alone = gpu_core.Graph(
            graph.src, graph.dst, graph.weight, graph.num_vertices, backend="cpu"
        ).minimum_spanning_forest()
        edge_ids, weights, headers = _forest_of(response)
        assert edge_ids == alone.edge_ids.tolist() and weights == alone.weights.tobytes(), graph.name
        assert headers["x-mst-total-weight"] == json.dumps(alone.total_weight), graph.name
