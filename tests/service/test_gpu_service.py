"""The service on a real GPU worker with a graph of 10^7 edges (runs where a CUDA device is visible)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from tests.utils.oracles import scipy_forest_total

from .conftest import ServerFactory

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_gpu_worker_upload_submit_result_with_1e7_edges(server_factory: ServerFactory) -> None:
    server = server_factory(
        MST_BACKEND="gpu",
        MST_MAX_EDGES=str(50_000_000),
        MST_MAX_UPLOAD_BYTES=str(2 << 30),
        MST_MAX_WAIT_S="300",
    )
    ready = server.client.get("/readyz").json()
    assert all(w["backend"] == "gpu" for w in ready["workers"]), ready
    rng = np.random.default_rng(2024)
    n, m = 2_000_000, 10_000_000
    src = rng.integers(0, n, m, dtype=np.int64).astype(np.int32)
    dst = rng.integers(0, n, m, dtype=np.int64).astype(np.int32)
    weight = rng.integers(0, 1 << 20, m, dtype=np.int64).astype(np.int32)
    started = time.perf_counter()
    graph = server.upload_npz(src, dst, weight, n)
    upload_s = time.perf_counter() - started
    assert graph["num_edges"] == m and graph["residency"]["backend"] == "gpu"
    assert graph["residency"]["status"] == "resident" and graph["residency"]["device_bytes"] > 0

    job = server.submit(graph["id"], wait=300).json()
    assert job["status"] == "succeeded", job
    edge_ids, weights, headers = server.result_npz(job["id"])
    total = json.loads(headers["x-mst-total-weight"])
    assert total == int(weights.astype(np.int64).sum()) == job["result"]["total_weight"]
    assert np.all(np.diff(edge_ids) > 0) and np.array_equal(weights, weight[edge_ids])
    expected_total, components = scipy_forest_total(src, dst, weight, n)
    assert total == expected_total and job["result"]["num_components"] == components
    assert edge_ids.size == n - components

    # the same graph again: resident, so only the computation is paid
    again = server.submit(graph["id"], wait=300).json()
    assert again["result"]["total_weight"] == total
    metrics = server.client.get("/metrics").text
    assert "mst_device_bytes" in metrics
    print(
        f"upload {m} edges: {upload_s:.2f} s; compute_ms {job['result']['compute_ms']:.1f}, "
        f"{again['result']['compute_ms']:.1f}"
    )


def _visible_gpus() -> int:
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


@pytest.mark.skipif(_visible_gpus() < 2, reason="needs two or more GPUs (one worker each)")
def test_one_worker_per_gpu_and_graphs_placed_by_free_memory(server_factory: ServerFactory) -> None:
    import gpu_core

    server = server_factory(
        MST_BACKEND="gpu", MST_MAX_EDGES=str(20_000_000), MST_MAX_UPLOAD_BYTES=str(1 << 30)
    )
    workers = server.client.get("/readyz").json()["workers"]
    assert len(workers) == _visible_gpus() and len({w["device"] for w in workers}) == len(workers)
    rng = np.random.default_rng(5)
    placed = []
    for n, m in ((1_000_000, 8_000_000), (50_000, 400_000), (50_000, 400_000)):
        src = rng.integers(0, n, m).astype(np.int32)
        dst = rng.integers(0, n, m).astype(np.int32)
        weight = rng.random(m).astype(np.float32)
        graph = server.upload_npz(src, dst, weight, n)
        placed.append(graph["residency"]["worker"])
        job = server.submit(graph["id"], wait=300).json()
        assert job["status"] == "succeeded", job
        edge_ids, weights, _ = server.result_npz(job["id"])
        expected = gpu_core.minimum_spanning_forest(src, dst, weight, num_vertices=n, backend="cpu")
        assert np.array_equal(edge_ids, expected.edge_ids) and np.array_equal(weights, expected.weights)
    # the big graph takes memory on its GPU, so the next one goes to another worker
    assert placed[1] != placed[0], placed
