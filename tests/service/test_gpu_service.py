"""The service on a real GPU worker with a graph of 10^7 edges (runs where a CUDA device is visible)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

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


def test_new_weights_reach_the_device_in_pinned_pieces(server_factory: ServerFactory) -> None:
    # a full replacement of 3M weights (24 MB of float64: three pieces of the staging reader),
    # then a truncated .npy, which is refused without touching the weights in place
    import io

    import gpu_core
    from gpu_core._backend import staging as _staging

    server = server_factory(
        MST_BACKEND="gpu", MST_MAX_EDGES=str(5_000_000), MST_MAX_UPLOAD_BYTES=str(1 << 30)
    )
    rng = np.random.default_rng(11)
    n, m = 500_000, 3_000_000
    assert m * 8 > 2 * _staging.PIECE
    src, dst = rng.integers(0, n, m).astype(np.int32), rng.integers(0, n, m).astype(np.int32)
    graph = server.upload_npz(src, dst, rng.integers(0, 100, m).astype(np.int32), n)
    new = rng.random(m)
    body = io.BytesIO()
    np.save(body, new)
    put = server.client.put(
        f"/v1/graphs/{graph['id']}/weights",
        content=body.getvalue(),
        headers={"content-type": "application/octet-stream"},
    )
    assert put.status_code == 200 and put.json()["weight_dtype"] == "float64", put.text
    expected = gpu_core.minimum_spanning_forest(src, dst, new, num_vertices=n, backend="cpu")
    job = server.submit(graph["id"], wait=300).json()
    edge_ids, weights, _ = server.result_npz(job["id"])
    assert np.array_equal(edge_ids, expected.edge_ids) and np.array_equal(weights, expected.weights)
    cut = server.client.put(
        f"/v1/graphs/{graph['id']}/weights",
        content=body.getvalue()[:-8],
        headers={"content-type": "application/octet-stream"},
    )
    assert cut.status_code == 422 and "bytes of data" in cut.json()["detail"], cut.text
    again = server.submit(graph["id"], wait=300).json()
    assert again["weights_version"] == job["weights_version"]  # refused by the API: no version
    assert np.array_equal(server.result_npz(again["id"])[0], expected.edge_ids)


def _visible_gpus() -> int:
    """The GPUs the service will see: nvidia-smi's, narrowed by CUDA_VISIBLE_DEVICES as CUDA narrows them."""
    import os
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    present = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return present
    return min(present, len([d for d in visible.split(",") if d.strip()]))


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


@pytest.mark.skipif(
    shutil.which("nvidia-cuda-mps-control") is None, reason="needs NVIDIA's MPS control program"
)
def test_workers_sharing_a_gpu_run_under_the_services_own_mps(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    """MST_WORKERS_PER_GPU=2 (MST_MPS=auto): the supervisor's daemon serves both workers, whose forests
    are exact; one SIGKILLed, the other serves on and the killed one comes back; the daemon is gone
    once the service stops."""
    server = server_factory(
        MST_BACKEND="gpu",
        MST_GPUS="0",
        MST_WORKERS_PER_GPU="2",
        MST_STANDBY_WORKER="off",
        MST_RESULT_DIR=str(tmp_path / "results"),
    )
    ready = server.client.get("/readyz").json()
    assert len(ready["workers"]) == 2 and all(w["mps"] and w["backend"] == "gpu" for w in ready["workers"]), (
        ready
    )
    rng = np.random.default_rng(7)
    n, m = 8_000, 40_000  # within the test servers' MST_MAX_EDGES and upload size
    graphs: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def exact(graph_id: str) -> None:
        job = server.submit(graph_id, wait=60).json()
        assert job["status"] == "succeeded", job
        edge_ids, weights, _ = server.result_npz(job["id"])
        src, dst, weight = graphs[graph_id]
        expected_total, components = scipy_forest_total(src, dst, weight, n)
        assert int(weights.astype(np.int64).sum()) == expected_total and edge_ids.size == n - components
        assert (tmp_path / "results" / f"{job['id']}.npz").is_file()

    for _ in range(4):  # placed by free memory: both workers get graphs
        src = rng.integers(0, n, m).astype(np.int32)
        dst = rng.integers(0, n, m).astype(np.int32)
        weight = rng.integers(0, 1000, m).astype(np.int32)  # ties: the edge id decides
        graph_id = server.upload_npz(src, dst, weight, n)["id"]
        graphs[graph_id] = (src, dst, weight)
        exact(graph_id)
    # a worker SIGKILLed under MPS: the other one serves on (the same process), the killed one comes back
    holders = {graph_id: server.worker_pid(graph_id) for graph_id in graphs}
    assert len(set(holders.values())) == 2, holders
    killed = holders[next(iter(graphs))]
    os.kill(killed, signal.SIGKILL)
    for graph_id, pid in holders.items():
        if pid != killed:
            exact(graph_id)
            assert server.worker_pid(graph_id) == pid
    deadline = time.monotonic() + 120
    while any(w["pid"] in (None, killed) for w in server.client.get("/readyz").json()["workers"]):
        assert time.monotonic() < deadline, "the killed worker did not come back"
        time.sleep(0.1)
    for graph_id in graphs:
        exact(graph_id)
    # the control daemon's and its server's process names, cut to 15 characters by the kernel
    mps_processes = ["pgrep", "-x", "nvidia-cuda-mps"]
    servers = subprocess.run(mps_processes, capture_output=True, text=True, check=False)
    assert servers.stdout.strip(), "no MPS process while the workers run"
    server.stop()
    deadline = time.monotonic() + 20
    while subprocess.run(mps_processes, capture_output=True, check=False).returncode == 0:
        assert time.monotonic() < deadline, "the service's MPS daemon outlived it"
        time.sleep(0.2)
