"""Metrics over HTTP (issue 45): point-set jobs and models take ``metric`` and ``metric_params``, answer
``gpu_core``'s arrays for them, show them in the records, refuse bad ones with a 422 naming what is
wrong (nothing stored is touched); ``RemoteHDBSCAN`` (the bundled client's estimator) against a live
server is ``gpu_core.HDBSCAN``'s answer, and scikit-learn's ``clone`` works on it."""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any

import numpy as np
import pytest

import gpu_core
from service.client import RemoteHDBSCAN

from .live import LiveServer
from .test_points_api import blobs, run, upload
from .test_prediction import fit, predict

METRICS: list[dict[str, Any]] = [
    {"metric": "manhattan"},
    {"metric": "chebyshev"},
    {"metric": "minkowski", "metric_params": {"p": 3}},
    {"metric": "cosine"},
]


def lat_lon(n: int = 240) -> np.ndarray:
    rng = np.random.default_rng(3)
    centres = np.array([[0.8, 0.2], [-0.3, 2.0], [0.1, -1.5]])
    return np.concatenate([c + rng.normal(0, 0.03, (n // 3, 2)) for c in centres])


@pytest.mark.parametrize("metric", [*METRICS, {"metric": "haversine"}], ids=lambda m: m["metric"])
def test_jobs_answer_the_engines_arrays(live: LiveServer, metric: dict[str, Any]) -> None:
    points = lat_lon() if metric["metric"] == "haversine" else blobs(d=3) + 1.0
    points_id = upload(live, points)["id"]
    kw = {"metric": metric["metric"], "metric_params": metric.get("metric_params")}
    job, result = run(live, points_id, "emst", {"min_samples": 4, **metric})
    assert job["params"] == {"min_samples": 4, **metric}
    tree = gpu_core.metric_mst(points, min_samples=4, backend="cpu", **kw)
    assert np.array_equal(result["weights"], tree.weights) and np.array_equal(result["src"], tree.src)
    _, result = run(live, points_id, "hdbscan", {"min_cluster_size": 10, **metric})
    want = gpu_core.hdbscan(points, min_cluster_size=10, backend="cpu", **kw)
    assert np.array_equal(result["labels"], want.labels)
    assert np.array_equal(result["probabilities"], want.probabilities)
    _, result = run(live, points_id, "single_linkage", metric)
    assert np.array_equal(np.asarray(result["linkage"]), gpu_core.single_linkage(points, backend="cpu", **kw))
    # the Euclidean tree of the same point set is another index and other trees
    _, result = run(live, points_id, "emst", {"min_samples": 4})
    assert np.array_equal(
        result["weights"], gpu_core.euclidean_mst(points, min_samples=4, backend="cpu").weights
    )


@pytest.mark.parametrize("metric", METRICS[1:], ids=lambda m: m["metric"])
def test_models_predict_as_the_engine_with_their_metric(live: LiveServer, metric: dict[str, Any]) -> None:
    points = blobs(d=3) + 1.0
    points_id = upload(live, points)["id"]
    model = fit(live.client, points_id, {"min_cluster_size": 10, "min_samples": 5, **metric})
    assert model["params"]["metric"] == metric["metric"]
    assert model["params"]["metric_params"] == metric.get("metric_params")
    new = points[:30] + 0.2
    answer = predict(live.client, points_id, model["id"], new).json()
    local = gpu_core.HDBSCAN(min_cluster_size=10, min_samples=5, backend="cpu", **metric).fit(points)
    labels, probabilities = gpu_core.approximate_predict(local, new)
    assert np.array_equal(answer["labels"], labels) and np.array_equal(answer["probabilities"], probabilities)
    assert np.array_equal(np.asarray(answer["membership"]), gpu_core.membership_vector(local, new))


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ({"metric": "braycurtis"}, "metric"),
        ({"metric": "precomputed"}, "metric"),
        ({"metric": "cosine", "metric_params": {"p": 2}}, "metric='cosine' takes no metric_params"),
        ({"metric": "minkowski", "metric_params": {"p": 0.5}}, "p >= 1"),
    ],
)
def test_bad_metrics_are_422_and_store_nothing(live: LiveServer, params: dict[str, Any], detail: str) -> None:
    points_id = upload(live, blobs())["id"]
    jobs = live.client.post(f"/v1/points/{points_id}/jobs", json={"task": "hdbscan", "params": params})
    assert jobs.status_code == 422 and detail in jobs.text, jobs.text
    models = live.client.post(f"/v1/points/{points_id}/models", json={"min_cluster_size": 5, **params})
    assert models.status_code == 422 and detail in models.text, models.text
    assert live.client.get(f"/v1/points/{points_id}/models").json()["models"] == []


def test_input_a_metric_refuses_is_a_422_naming_the_row(live: LiveServer) -> None:
    """The points' own refusal of a metric (an out-of-range latitude for haversine, a zero row for
    cosine, three columns for haversine, a span minkowski cannot raise to p) is a 422 at the job's
    or model's submission with the engine's message: no job is queued, nothing stored changes,
    and the point set still answers every metric it can take."""
    points = lat_lon()
    points[17, 0] = 48.85  # degrees
    points_id = upload(live, points)["id"]
    zeros = blobs(d=3)
    zeros[[33, 40]] = 0.0
    zeros_id = upload(live, zeros)["id"]
    wide = blobs(d=3) * 1e120
    wide_id = upload(live, wide)["id"]
    datasets = (points_id, zeros_id, wide_id)

    def jobs_stored() -> int:
        with contextlib.closing(sqlite3.connect(live.data_dir / "mst.sqlite3")) as db:
            marks = ",".join("?" * len(datasets))
            return int(
                db.execute(f"SELECT COUNT(*) FROM jobs WHERE graph_id IN ({marks})", datasets).fetchone()[0]
            )

    cases: list[tuple[str, dict[str, Any], str]] = [
        (points_id, {"metric": "haversine"}, "point 17 has latitude 48.85"),
        (zeros_id, {"metric": "cosine"}, "point 33 is the zero vector"),
        (zeros_id, {"metric": "haversine"}, "got d=3"),
        (wide_id, {"metric": "minkowski", "metric_params": {"p": 3}}, "would overflow a double"),
    ]
    for dataset, params, detail in cases:
        for task in ("emst", "hdbscan", "single_linkage"):
            response = live.client.post(
                f"/v1/points/{dataset}/jobs", json={"task": task, "params": params}, params={"wait": 60}
            )
            assert response.status_code == 422 and detail in response.json()["detail"], response.text
        response = live.client.post(f"/v1/points/{dataset}/models", json={"min_cluster_size": 5, **params})
        assert response.status_code == 422 and detail in response.json()["detail"], response.text
        assert live.client.get(f"/v1/points/{dataset}/models").json()["models"] == []
    assert jobs_stored() == 0
    for dataset, params in ((points_id, {}), (zeros_id, {"metric": "manhattan"}), (wide_id, {})):
        job = live.client.post(
            f"/v1/points/{dataset}/jobs", json={"task": "emst", "params": params}, params={"wait": 60}
        ).json()
        assert job["status"] == "succeeded", job


def test_remote_hdbscan_is_gpu_cores_and_clones(live: LiveServer) -> None:
    from sklearn.base import clone

    points = blobs(d=3) + 1.0
    remote = RemoteHDBSCAN(live.url, min_cluster_size=10, metric="manhattan", allow_single_cluster=False)
    twin = clone(remote)
    assert twin.get_params() == remote.get_params() and twin is not remote
    twin.fit(points)
    local = gpu_core.HDBSCAN(min_cluster_size=10, metric="manhattan", backend="cpu").fit(points)
    assert np.array_equal(twin.labels_, local.labels_) and np.array_equal(
        twin.probabilities_, local.probabilities_
    )
    new = points[:40] + 0.3
    assert np.array_equal(twin.predict(new), local.predict(new))
    labels, probabilities = twin.approximate_predict(new)
    want = gpu_core.approximate_predict(local, new)
    assert np.array_equal(labels, want[0]) and np.array_equal(probabilities, want[1])
    assert np.array_equal(twin.membership_vector(new), gpu_core.membership_vector(local, new))
    with pytest.raises(ValueError, match="alpha"):
        RemoteHDBSCAN(live.url, alpha=2.0).fit(points)
    twin.delete()
