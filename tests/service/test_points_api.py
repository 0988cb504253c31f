"""Point sets over HTTP: upload (JSON, npz, npy), the three tasks, reuse of trees, restart, bad input.

Answers are checked against the engine called directly (itself checked against brute force in
tests/gpu_core/points/test_points.py), SciPy's single linkage and scikit-learn's HDBSCAN.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.cluster.hierarchy import linkage
from sklearn.cluster import HDBSCAN
from sklearn.metrics import adjusted_rand_score

import gpu_core
from service.settings import Settings

from .conftest import ServerFactory
from .live import OCTET, LiveServer


def blobs(seed: int = 0, n: int = 240, d: int = 2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-20, 20, (4, d))
    return np.concatenate([c + rng.normal(0, 1.0, (n // 4, d)) for c in centers])


def npz_points(points: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, points=points)
    return buffer.getvalue()


def upload(server: LiveServer, points: np.ndarray, fmt: str = "npz") -> dict[str, Any]:
    if fmt == "json":
        response = server.client.post("/v1/points", json={"points": points.tolist()})
    else:
        buffer = io.BytesIO()
        np.save(buffer, points) if fmt == "npy" else np.savez(buffer, points=points)
        response = server.client.post(
            "/v1/points", params={"format": fmt}, content=buffer.getvalue(), headers={"content-type": OCTET}
        )
    assert response.status_code == 201, response.text
    assert response.headers["location"] == f"/v1/points/{response.json()['id']}"
    record: dict[str, Any] = response.json()
    return record


def run(
    server: LiveServer, points_id: str, task: str, params: dict[str, Any] | None = None
) -> tuple[dict, dict]:
    response = server.client.post(
        f"/v1/points/{points_id}/jobs", json={"task": task, "params": params or {}}, params={"wait": 60}
    )
    assert response.status_code == 200, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    return job, server.client.get(f"/v1/jobs/{job['id']}/result").json()


def check_tasks(server: LiveServer, points: np.ndarray, points_id: str) -> None:
    tree = gpu_core.euclidean_mst(points, backend="cpu")
    job, result = run(server, points_id, "emst")
    assert result["src"] == tree.src.tolist() and result["dst"] == tree.dst.tolist()
    assert result["weights"] == tree.weights.tolist() and job["result"]["total_weight"] == tree.total_weight
    mr = gpu_core.euclidean_mst(points, min_samples=5, backend="cpu")
    _, result = run(server, points_id, "emst", {"min_samples": 5})
    assert result["weights"] == mr.weights.tolist()
    assert result["core_distances"] == mr.core_distances.tolist()  # type: ignore[union-attr]
    _, result = run(server, points_id, "single_linkage")
    expected = linkage(points, "single")
    got = np.array(result["linkage"])
    np.testing.assert_allclose(got[:, 2], expected[:, 2], rtol=1e-12)
    assert result["reused_tree"] is True  # the emst job's tree
    for params in ({"min_cluster_size": 10}, {"min_cluster_size": 15, "min_samples": 5}):
        job, result = run(server, points_id, "hdbscan", params)
        reference = HDBSCAN(**params, copy=True).fit(points)
        assert adjusted_rand_score(result["labels"], reference.labels_) == 1.0
        np.testing.assert_allclose(result["probabilities"], reference.probabilities_, atol=1e-12)
        assert job["result"]["num_components"] == len(set(reference.labels_) - {-1})
    # another min_cluster_size with the same min_samples: the tree (and hierarchy) is reused
    job, _ = run(server, points_id, "hdbscan", {"min_cluster_size": 20, "min_samples": 5})
    assert job["result"]["reused_tree"] is True


def test_points_upload_tasks_and_restart(server_factory: ServerFactory, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = server_factory(data)
    points = blobs()
    record = upload(server, points)
    assert record["num_points"] == 240 and record["dims"] == 2 and record["dtype"] == "float64"
    check_tasks(server, points, record["id"])
    # JSON and npy uploads of float32 points give the same trees
    as_json = upload(server, points.astype(np.float32), "json")
    as_npy = upload(server, points.astype(np.float32), "npy")
    _, a = run(server, as_json["id"], "emst")
    _, b = run(server, as_npy["id"], "emst")
    assert a["weights"] == b["weights"] and as_npy["dtype"] == "float32"
    listed = [p["id"] for p in server.client.get("/v1/points").json()["point_sets"]]
    assert listed == [record["id"], as_json["id"], as_npy["id"]]
    assert record["id"] not in [g["id"] for g in server.client.get("/v1/graphs").json()["graphs"]]
    # binary result
    job, _ = run(server, record["id"], "hdbscan", {"min_cluster_size": 10})
    response = server.client.get(f"/v1/jobs/{job['id']}/result", headers={"accept": OCTET})
    with np.load(io.BytesIO(response.content), allow_pickle=False) as npz:
        assert set(npz.files) == {"labels", "probabilities"}
    # a restart reloads the point sets; the trees are computed again
    server.stop()
    server = server_factory(data)
    job, result = run(server, record["id"], "emst")
    assert result["weights"] == gpu_core.euclidean_mst(points, backend="cpu").weights.tolist()
    assert job["result"]["reused_tree"] is False
    assert server.client.delete(f"/v1/points/{as_json['id']}").status_code == 204
    assert server.client.get(f"/v1/points/{as_json['id']}").status_code == 404


@pytest.mark.gpu
def test_points_on_a_gpu_worker(server_factory: ServerFactory, tmp_path: Path) -> None:
    """A GPU worker: its first point set warms up the device path (dendrogram, condensed tree,
    selection); every task's answer equals the CPU engine's, bit for bit, and survives a restart."""
    data = tmp_path / "data"
    server = server_factory(data, MST_BACKEND="gpu")
    assert all(w["backend"] == "gpu" for w in server.client.get("/readyz").json()["workers"])
    small = blobs()
    check_tasks(server, small, upload(server, small)["id"])  # as on the CPU worker
    rng = np.random.default_rng(5)
    points = np.concatenate([blobs(1, 4000), rng.uniform(-25, 25, (2000, 2))])  # clusters and noise
    record = upload(server, points)
    tree = gpu_core.euclidean_mst(points, backend="cpu")
    job, result = run(server, record["id"], "emst")
    assert result["weights"] == tree.weights.tolist() and job["result"]["total_weight"] == tree.total_weight
    cases: list[dict[str, Any]] = [
        {"min_cluster_size": 8},
        {"min_cluster_size": 12, "min_samples": 4, "cluster_selection_method": "leaf"},
        {"min_cluster_size": 9, "cluster_selection_epsilon": 0.5},  # the selection on the host
    ]
    for params in cases:
        expected = gpu_core.hdbscan(points, backend="cpu", **params)
        _, result = run(server, record["id"], "hdbscan", params)
        assert result["labels"] == expected.labels.tolist(), params
        assert result["probabilities"] == expected.probabilities.tolist(), params
        assert expected.num_clusters >= 2
    server.stop()
    server = server_factory(data, MST_BACKEND="gpu")
    job, result = run(server, record["id"], "hdbscan", {"min_cluster_size": 8})
    assert job["result"]["reused_tree"] is False
    assert result["labels"] == gpu_core.hdbscan(points, min_cluster_size=8, backend="cpu").labels.tolist()


@pytest.mark.parametrize(
    ("body", "code", "detail"),
    [
        ({"points": [[0.0, 1.0], [2.0]]}, 422, "points[1]"),
        ({"points": []}, 422, "points"),
        ({"points": [[]]}, 422, "points"),
        ({"points": [[0.0, "x"]]}, 422, "points"),
        ({"points": [[1.0, 2.0]], "colour": 1}, 422, "colour"),
    ],
)
def test_bad_point_uploads(live: LiveServer, body: dict, code: int, detail: str) -> None:
    response = live.client.post("/v1/points", json=body)
    assert response.status_code == code, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert detail in response.json()["detail"]


def test_points_of_up_to_the_engines_limit_of_coordinates(live: LiveServer) -> None:
    """Embeddings (hundreds to a thousand coordinates) upload and compute by brute force; one more
    coordinate than the limit is a 422 that names it, for JSON rows and for files alike."""
    limit = gpu_core.MAX_DIMENSIONS
    assert limit >= 1024
    rng = np.random.default_rng(11)
    points = np.concatenate([c + rng.normal(0, 0.05, (30, limit)) for c in rng.uniform(-1, 1, (3, limit))])
    points = np.round(points, 3)  # short JSON numbers: the test server takes 1 MB of JSON
    for fmt in ("json", "npy"):
        record = upload(live, points, fmt)
        assert record["dims"] == limit and record["num_points"] == 90
        _, result = run(live, record["id"], "emst", {"min_samples": 4})
        expected = gpu_core.euclidean_mst(points, min_samples=4, backend="cpu")
        assert result["weights"] == expected.weights.tolist() and result["src"] == expected.src.tolist()
        _, result = run(live, record["id"], "hdbscan", {"min_cluster_size": 10})
        expected_labels = gpu_core.hdbscan(points, min_cluster_size=10, backend="cpu").labels
        assert result["labels"] == expected_labels.tolist()
    wide = np.zeros((3, limit + 1))
    response = live.client.post("/v1/points", json={"points": wide.tolist()})
    assert response.status_code == 422 and str(limit) in response.json()["detail"], response.text
    buffer = io.BytesIO()
    np.save(buffer, wide)
    response = live.client.post(
        "/v1/points", params={"format": "npy"}, content=buffer.getvalue(), headers={"content-type": OCTET}
    )
    assert response.status_code == 422 and f"between 1 and {limit} coordinates" in response.json()["detail"]


def test_bad_point_files_and_jobs(live: LiveServer) -> None:
    for body, detail in (
        (npz_points(np.zeros((3, 2, 2))), "two-dimensional"),
        (npz_points(np.array([[0.0, np.nan], [1.0, 1.0]])), "point 0"),
        (io.BytesIO(b"not an npz").getvalue(), "npz"),
    ):
        response = live.client.post("/v1/points", content=body, headers={"content-type": OCTET})
        assert response.status_code == 422, response.text
        assert detail in response.json()["detail"]
    points_id = upload(live, blobs(1, 40))["id"]
    for job, detail in (
        ({"task": "mst"}, "task"),
        ({"task": "hdbscan", "params": {"min_cluster_size": 1}}, "params.min_cluster_size"),
        ({"task": "emst", "params": {"min_samples": 0}}, "params.min_samples"),
        ({"task": "emst", "params": {"k": 3}}, "params.k"),
    ):
        response = live.client.post(f"/v1/points/{points_id}/jobs", json=job)
        assert response.status_code == 422, response.text
        assert detail in response.json()["detail"]
    graph_id = live.upload_npz([0], [1], [1.0])["id"]
    response = live.client.post(f"/v1/graphs/{graph_id}/jobs", json={"task": "emst"})
    assert response.status_code == 422 and response.json()["field"] == "task"
    assert live.client.get(f"/v1/points/{graph_id}").status_code == 404  # a graph is not a point set
    assert live.client.get("/v1/points/p_nope").json()["code"] == "point_set_not_found"
    # more min_samples than points: the job fails and says why
    response = live.client.post(
        f"/v1/points/{points_id}/jobs",
        json={"task": "emst", "params": {"min_samples": 41}},
        params={"wait": 30},
    )
    assert response.json()["status"] == "failed" and "min_samples" in response.json()["error"]["message"]


def test_client_point_verbs(live: LiveServer) -> None:
    from service.client import Client

    points = blobs(3, 120)
    with Client(live.url) as mst:
        record = mst.upload_points(points)
        assert record["id"] in [p["id"] for p in mst.point_sets()]
        tree = mst.emst(record["id"], min_samples=3)
        expected = gpu_core.euclidean_mst(points, min_samples=3, backend="cpu")
        assert tree["weights"].tolist() == expected.weights.tolist() and "core_distances" in tree
        clusters = mst.hdbscan(record["id"], min_cluster_size=10)
        reference = HDBSCAN(min_cluster_size=10, copy=True).fit(points)
        assert adjusted_rand_score(clusters["labels"], reference.labels_) == 1.0
        z = mst.single_linkage(record["id"])
        np.testing.assert_allclose(z[:, 2], linkage(points, "single")[:, 2], rtol=1e-12)
        mst.delete_points(record["id"])
        assert record["id"] not in [p["id"] for p in mst.point_sets()]


def test_cli_point_verbs(live: LiveServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from service.client import main

    points = blobs(4, 80)
    np.save(tmp_path / "p.npy", points)
    assert main(["--url", live.url, "upload-points", str(tmp_path / "p.npy")]) == 0
    points_id = json.loads(capsys.readouterr().out)["id"]
    assert main(["--url", live.url, "emst", points_id, "--out", str(tmp_path / "t.npz")]) == 0
    assert json.loads(capsys.readouterr().out)["src"] == [79]
    with np.load(tmp_path / "t.npz") as npz:
        assert npz["weights"].tolist() == gpu_core.euclidean_mst(points, backend="cpu").weights.tolist()
    assert main(["--url", live.url, "hdbscan", points_id, "--min-cluster-size", "8"]) == 0
    assert json.loads(capsys.readouterr().out)["labels"] == [80]
    assert main(["--url", live.url, "single-linkage", points_id]) == 0
    assert json.loads(capsys.readouterr().out)["linkage"] == [79, 4]


@pytest.mark.slow
def test_another_min_samples_reuses_the_index(server_factory: ServerFactory, tmp_path: Path) -> None:
    """The first tree of a point set builds its spatial index; a tree of another min_samples, or an
    emst after an hdbscan, is computed on it (``reused_index``); a restart builds it again. The
    answers are the engine's own, computed from the points with no index kept."""
    data = tmp_path / "data"
    server = server_factory(data)
    points = blobs(5, 400, 3)
    points_id = upload(server, points)["id"]

    def hdbscan(server: LiveServer, mcs: int, ms: int, reused_index: bool) -> dict[str, Any]:
        job, result = run(server, points_id, "hdbscan", {"min_cluster_size": mcs, "min_samples": ms})
        expected = gpu_core.hdbscan(points, min_cluster_size=mcs, min_samples=ms, backend="cpu")
        assert result["labels"] == expected.labels.tolist()
        assert result["probabilities"] == expected.probabilities.tolist()
        assert job["result"]["reused_index"] is reused_index and result["reused_index"] is reused_index
        assert job["result"]["reused_tree"] is False
        return job

    def emst(server: LiveServer, ms: int, reused_tree: bool) -> dict[str, Any]:
        job, result = run(server, points_id, "emst", {"min_samples": ms})
        expected = gpu_core.euclidean_mst(points, min_samples=ms, backend="cpu")
        assert result["src"] == expected.src.tolist() and result["dst"] == expected.dst.tolist()
        assert result["weights"] == expected.weights.tolist()
        assert job["result"]["total_weight"] == expected.total_weight
        assert job["result"]["reused_index"] is True and job["result"]["reused_tree"] is reused_tree
        return job

    first = hdbscan(server, 10, 5, reused_index=False)  # builds the index
    second = hdbscan(server, 10, 16, reused_index=True)  # a new tree on the same index
    emst(server, 1, reused_tree=False)  # the Euclidean tree on it too
    emst(server, 16, reused_tree=True)  # hdbscan's tree: neither tree nor index built
    graph_id = server.upload_npz([0, 1], [1, 2], [1.0, 2.0])["id"]
    graph_job = server.submit(graph_id, wait=30).json()
    assert graph_job["result"]["reused_index"] is None and graph_job["result"]["reused_tree"] is None
    # a restart reloads the points, not the index: the first tree builds it again, the same answers
    server.stop()
    server = server_factory(data)
    hdbscan(server, 12, 16, reused_index=False)
    emst(server, 5, reused_tree=False)
    for job, flag in ((first, False), (second, True)):  # stored with the jobs
        assert server.client.get(f"/v1/jobs/{job['id']}").json()["result"]["reused_index"] is flag


def test_a_worker_without_the_warm_up_is_ready_after_its_probe_and_its_first_jobs_are_exact(
    server_factory: ServerFactory,
) -> None:
    """MST_WARM_UP=none (the test servers' setting): the worker runs no task before it is ready,
    and the first jobs of each kind load what they need themselves, with the same answers."""
    server = server_factory(MST_WARM_UP="none")
    [worker] = server.client.get("/readyz").json()["workers"]
    assert worker["warm_up"] == {"mode": "none"}, worker
    assert "probe" in worker["startup_ms"] and "warm_up_tasks" not in worker["startup_ms"], worker
    points = blobs()
    record = upload(server, points)
    expected = gpu_core.hdbscan(points, min_cluster_size=10, backend="cpu")
    _, result = run(server, record["id"], "hdbscan", {"min_cluster_size": 10})
    assert result["labels"] == expected.labels.tolist() and expected.num_clusters >= 2
    check_tasks(server, points, record["id"])
    assert Settings.model_fields["warm_up"].default == "all"  # what a deployment gets
    warmed = server_factory(server.data_dir.parent / "data-warmed", MST_WARM_UP="all")
    [worker] = warmed.client.get("/readyz").json()["workers"]
    assert worker["warm_up"] == {"mode": "cpu"} and "warm_up_tasks" in worker["startup_ms"], worker
