"""Admission and eviction against a live CPU server with a small MST_WORKER_MEMORY_BYTES.

Sizes (``gpu_core.estimate_device_bytes`` on the CPU backend, int32 weights): a graph of
100 000 edges needs about 7.5 MB to build and holds 2.4 MB once built. With a cap of 10.5 MB
a second graph builds next to a first one, a third does not fit next to two: uploading A, B,
C evicts A (the least recently used); a job on A loads it back, evicting B (now the least
recently used), and answers the same forest. A one-shot computation evicts nothing: a 507 when it does
not fit. A graph whose build needs more than the cap is a 413 that says how much it needs.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import gpu_core

from .conftest import ServerFactory
from .live import OCTET, LiveServer, npz_body

M = 100_000
N = 20_000
CAP = 10_500_000
ENV = {"MST_WORKER_MEMORY_BYTES": str(CAP), "MST_MAX_UPLOAD_BYTES": "10000000", "MST_MAX_EDGES": "1000000"}


def edges(seed: int, m: int = M) -> tuple[Any, Any, Any]:
    rng = np.random.default_rng(seed)
    src = rng.integers(0, N, m).astype(np.int32)
    dst = rng.integers(0, N, m).astype(np.int32)
    return src, dst, rng.integers(-1000, 1000, m).astype(np.int32)


def status(server: LiveServer, graph_id: str) -> str:
    value: str = server.client.get(f"/v1/graphs/{graph_id}").json()["residency"]["status"]
    return value


def test_lru_eviction_makes_room_and_a_job_loads_the_graph_back(server_factory: ServerFactory) -> None:
    estimate = gpu_core.estimate_device_bytes(N, M, np.int32, backend="cpu")
    assert estimate.resident + estimate.peak <= CAP < 2 * estimate.resident + estimate.peak
    server = server_factory(**ENV)
    graphs = {name: edges(seed) for seed, name in enumerate("ABC")}
    ids = {name: server.upload_npz(*graphs[name], N)["id"] for name in "AB"}
    assert status(server, ids["A"]) == status(server, ids["B"]) == "resident"
    ids["C"] = server.upload_npz(*graphs["C"], N)["id"]
    assert [status(server, ids[x]) for x in "ABC"] == ["evicted", "resident", "resident"]
    described = server.client.get(f"/v1/graphs/{ids['A']}").json()
    assert described["residency"]["device_bytes"] == 0 and described["num_edges"] == M

    job = server.submit(ids["A"], wait=30).json()
    assert job["status"] == "succeeded", job
    assert [status(server, ids[x]) for x in "ABC"] == ["resident", "evicted", "resident"]
    expected = gpu_core.minimum_spanning_forest(*graphs["A"], num_vertices=N, backend="cpu")
    edge_ids, weights, _ = server.result_npz(job["id"])
    assert np.array_equal(edge_ids, expected.edge_ids) and np.array_equal(weights, expected.weights)
    assert job["result"]["total_weight"] == expected.total_weight

    # B comes back the same way, and every graph still answers its own forest
    for name in "BCA":
        again = server.submit(ids[name], wait=30).json()
        forest = gpu_core.minimum_spanning_forest(*graphs[name], num_vertices=N, backend="cpu")
        assert again["result"]["total_weight"] == forest.total_weight, (name, again)
    # a worker publishes its numbers between runs, after its reply: wait for them
    deadline = time.monotonic() + 10
    while True:
        worker = server.client.get("/readyz").json()["workers"][0]
        if worker["resident_graphs"] == 2 and worker["evicted_graphs"] == 1:
            break
        assert time.monotonic() < deadline, worker
        time.sleep(0.05)

    # a one-shot computation evicts nothing: with two graphs resident it does not fit, a 507
    oneshot = server.client.post("/v1/mst", content=npz_body(*edges(7), N), headers={"content-type": OCTET})
    assert oneshot.status_code == 507, oneshot.text
    problem = oneshot.json()
    assert problem["code"] == "insufficient_memory", problem
    needed = gpu_core.estimate_device_bytes(N, M, np.int32, backend="cpu").peak
    assert problem["needed_bytes"] == needed and problem["capacity_bytes"] == CAP
    assert CAP - 2 * estimate.resident <= problem["available_bytes"] < needed  # two graphs held
    assert [status(server, ids[x]) for x in "ABC"] == ["resident", "evicted", "resident"]

    # evicted graphs stay evicted over a restart of the service, and still answer
    server.stop()
    server = server_factory(server.data_dir, **ENV)
    job = server.submit(ids["B"], wait=30).json()
    forest = gpu_core.minimum_spanning_forest(*graphs["B"], num_vertices=N, backend="cpu")
    assert job["result"]["total_weight"] == forest.total_weight, job


def test_a_graph_larger_than_the_worker_is_413_with_the_numbers(server_factory: ServerFactory) -> None:
    server = server_factory(**ENV)
    small = server.upload_npz(*edges(1, 1000), N)
    response = server.client.post(
        "/v1/graphs", content=npz_body(*edges(2, 3 * M), N), headers={"content-type": OCTET}
    )
    assert response.status_code == 413, response.text
    problem = response.json()
    assert problem["code"] == "graph_exceeds_worker_memory"
    needed = gpu_core.estimate_device_bytes(N, 3 * M, np.int32, backend="cpu").peak
    assert problem["needed_bytes"] == needed and problem["capacity_bytes"] == CAP
    assert str(needed) in problem["detail"]
    # nothing was evicted or lost for it, and nothing of it is stored
    assert status(server, small["id"]) == "resident"
    assert [g["id"] for g in server.client.get("/v1/graphs").json()["graphs"]] == [small["id"]]
