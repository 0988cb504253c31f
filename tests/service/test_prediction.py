"""Models resident with their point sets and predictions over HTTP (``/v1/points/{id}/models``).

Answers are checked against the library on the same parameters: :class:`gpu_core.HDBSCAN`
fitted on the same points, then :func:`gpu_core.approximate_predict` and
:func:`gpu_core.membership_vector` (themselves oracle-tested against the hdbscan library in
tests/gpu_core), so the service must answer those arrays exactly.
"""

from __future__ import annotations

import functools
import io
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import gpu_core
from service.timing import parse_header

from .conftest import ServerFactory
from .live import OCTET, LiveServer
from .test_points_api import blobs, upload
from .test_restarts import ready_after

ARROW = "application/vnd.apache.arrow.stream"
PARAMS = {"min_cluster_size": 10, "min_samples": 5}


def queries(seed: int = 1, q: int = 50, d: int = 2) -> np.ndarray:
    """New points: some near the blobs, some far from any (noise)."""
    rng = np.random.default_rng(seed)
    near = blobs(0, d=d)[rng.integers(0, 240, q - 5)] + rng.normal(0, 0.5, (q - 5, d))
    return np.concatenate([near, rng.uniform(60, 80, (5, d))])


def library(points: np.ndarray, new: np.ndarray, params: dict[str, Any], backend: str = "cpu") -> Any:
    model = gpu_core.HDBSCAN(**params, prediction_data=True, backend=backend).fit(points)  # type: ignore[arg-type]
    labels, probabilities = gpu_core.approximate_predict(model, new)
    return model, labels, probabilities, gpu_core.membership_vector(model, new)


def fit(client: httpx.Client, points_id: str, params: dict[str, Any]) -> dict[str, Any]:
    response = client.post(f"/v1/points/{points_id}/models", json=params)
    assert response.status_code == 201, response.text
    record: dict[str, Any] = response.json()
    assert response.headers["location"] == f"/v1/points/{points_id}/models/{record['id']}"
    return record


def predict(
    client: httpx.Client, points_id: str, model_id: str, new: np.ndarray, membership: bool = True, **kw: Any
) -> httpx.Response:
    return client.post(
        f"/v1/points/{points_id}/models/{model_id}/predict",
        json={"points": new.tolist()},
        params={"membership": str(membership).lower()},
        **kw,
    )


def check_equal(answer: dict[str, Any], expected: Any) -> None:
    _, labels, probabilities, membership = expected
    assert np.array_equal(np.asarray(answer["labels"]), labels)
    assert np.array_equal(np.asarray(answer["probabilities"]), probabilities)
    assert np.array_equal(np.asarray(answer["membership"]).reshape(membership.shape), membership)


@pytest.fixture(scope="module")
def fitted(live: LiveServer) -> tuple[str, str, np.ndarray]:
    points = blobs()
    record = upload(live, points)
    model = fit(live.client, record["id"], PARAMS)
    return record["id"], model["id"], points


#: the defaults' selection, leaves, an epsilon with a single cluster allowed, and no cluster at all
MODELS = [
    PARAMS,
    {"min_cluster_size": 15, "cluster_selection_method": "leaf"},
    {"min_cluster_size": 5, "cluster_selection_epsilon": 3.0, "allow_single_cluster": True},
    {"min_cluster_size": 200, "min_samples": 5},
]


@pytest.mark.parametrize("params", MODELS)
def test_predictions_equal_the_librarys(live: LiveServer, params: dict[str, Any]) -> None:
    points = blobs()
    record = upload(live, points)
    model = fit(live.client, record["id"], params)
    expected = library(points, queries(), params)
    assert model["num_clusters"] == int(expected[0].labels_.max()) + 1
    assert model["num_noise"] == int((expected[0].labels_ < 0).sum())
    assert (
        model["params"].items() >= params.items() and len(model["params"]) == 8
    )  # the metric and its parameters too
    response = predict(live.client, record["id"], model["id"], queries())
    assert response.status_code == 200, response.text
    check_equal(response.json(), expected)
    assert response.json()["model_id"] == model["id"] and response.json()["num_points"] == 50
    plain = predict(live.client, record["id"], model["id"], queries(), membership=False).json()
    assert "membership" not in plain and plain["labels"] == response.json()["labels"]


def test_binary_bodies_and_answers_round_trip(live: LiveServer, fitted: tuple[str, str, np.ndarray]) -> None:
    points_id, model_id, points = fitted
    new = queries(2, 40).astype(np.float32)
    expected = library(points, new, PARAMS)
    url = f"/v1/points/{points_id}/models/{model_id}/predict"
    npz, npy = io.BytesIO(), io.BytesIO()
    np.savez(npz, points=new)
    np.save(npy, new)
    bodies = [({"format": "npz"}, npz.getvalue(), OCTET), ({"format": "npy"}, npy.getvalue(), OCTET)]
    pa = pytest.importorskip("pyarrow")
    import pyarrow.ipc

    for table in (
        pa.table({"x": new[:, 0], "y": new[:, 1]}),
        pa.table({"p": pa.FixedSizeListArray.from_arrays(pa.array(new.ravel()), 2)}),
    ):
        sink = pa.BufferOutputStream()
        with pyarrow.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        bodies.append(({}, sink.getvalue().to_pybytes(), ARROW))
    for params, body, kind in bodies:
        for accept in ("application/json", OCTET, ARROW):
            response = live.client.post(
                url, params={**params, "membership": "true"}, content=body,
                headers={"content-type": kind, "accept": accept},
            )  # fmt: skip
            assert response.status_code == 200, (params, kind, accept, response.text)
            assert response.headers["x-mst-num-points"] == "40"
            if accept == OCTET:
                with np.load(io.BytesIO(response.content), allow_pickle=False) as file:
                    answer = {name: file[name] for name in file.files}
            elif accept == ARROW:
                table = pyarrow.ipc.open_stream(response.content).read_all()
                answer = {name: table.column(name).to_pylist() for name in table.column_names}
            else:
                answer = response.json()
            check_equal(answer, expected)


def test_a_prediction_says_where_its_time_went(live: LiveServer, fitted: tuple[str, str, np.ndarray]) -> None:
    """``Server-Timing``: the route's steps, and the worker's round trip in its parts (the request's
    way there, the worker's own steps, the reply's way back), which add up to it."""
    points_id, model_id, _ = fitted
    started = time.perf_counter()
    response = predict(live.client, points_id, model_id, queries(), membership=False)
    elapsed_ms = (time.perf_counter() - started) * 1e3
    assert response.status_code == 200, response.text
    steps = parse_header(response.headers["server-timing"])
    assert list(steps) == ["lookup", "receive", "worker", "send", "w-predict", "reply", "encode"]
    assert all(ms >= 0 for ms in steps.values())
    assert steps["lookup"] + steps["receive"] + steps["worker"] + steps["encode"] <= elapsed_ms
    assert steps["send"] + steps["w-predict"] + steps["reply"] <= steps["worker"] + 0.01  # (rounding)

    npz = io.BytesIO()
    np.savez(npz, points=queries())
    response = live.client.post(
        f"/v1/points/{points_id}/models/{model_id}/predict",
        content=npz.getvalue(),
        headers={"content-type": OCTET, "accept": OCTET},
    )
    assert response.status_code == 200, response.text
    steps = parse_header(response.headers["server-timing"])  # the worker read the npz: w-read
    assert list(steps) == ["lookup", "receive", "worker", "send", "w-read", "w-predict", "reply", "encode"]
    assert steps["send"] + steps["w-read"] + steps["w-predict"] + steps["reply"] <= steps["worker"] + 0.01


def test_bad_points_are_422_naming_the_problem(live: LiveServer, fitted: tuple[str, str, np.ndarray]) -> None:
    points_id, model_id, _ = fitted
    url = f"/v1/points/{points_id}/models/{model_id}/predict"

    def problem(response: httpx.Response, status: int = 422) -> dict[str, Any]:
        assert response.status_code == status, response.text
        assert response.headers["content-type"].startswith("application/problem+json")
        body: dict[str, Any] = response.json()
        return body

    wrong = problem(live.client.post(url, json={"points": [[1.0, 2.0, 3.0]]}))
    assert "3 coordinates" in wrong["detail"] and "fitted on 2" in wrong["detail"], wrong
    assert "empty" in problem(live.client.post(url, json={"points": []}))["detail"]
    ragged = problem(live.client.post(url, json={"points": [[1.0, 2.0], [1.0]]}))
    assert "points[1]" in ragged["detail"]
    for bad in (np.nan, np.inf, -np.inf):
        new = queries(3, 10)
        new[7, 1] = bad
        body = io.BytesIO()
        np.save(body, new)
        response = live.client.post(url, params={"format": "npy"}, content=body.getvalue(),
                                    headers={"content-type": OCTET})  # fmt: skip
        detail = problem(response)["detail"]
        assert "7" in detail and ("finite" in detail or "NaN" in detail or "inf" in detail), detail
    empty = io.BytesIO()
    np.save(empty, np.zeros((0, 2)))
    response = live.client.post(url, params={"format": "npy"}, content=empty.getvalue(),
                                headers={"content-type": OCTET})  # fmt: skip
    problem(response)
    problem(live.client.post(url, content=b"not an npz", headers={"content-type": OCTET}))
    problem(live.client.post(url, content=b"x", headers={"content-type": "text/plain"}), 415)
    problem(live.client.post(url, json={"points": [[1, 2]]}, headers={"accept": "text/html"}), 406)
    problem(live.client.post(f"/v1/points/{points_id}/models", json={"min_cluster_size": 1}))
    problem(live.client.post(f"/v1/points/{points_id}/models", json={"bogus": 1}))


def test_unknown_and_deleted_models_are_404(live: LiveServer) -> None:
    points = blobs()
    record = upload(live, points)
    model = fit(live.client, record["id"], PARAMS)
    base = f"/v1/points/{record['id']}/models"
    assert live.client.get(f"{base}/{model['id']}").json()["num_clusters"] == model["num_clusters"]
    assert [m["id"] for m in live.client.get(base).json()["models"]] == [model["id"]]
    for url in (
        f"{base}/m_{'0' * 32}/predict",
        f"{base}/nonsense/predict",
        f"/v1/points/p_{'0' * 32}/models/{model['id']}/predict",
    ):
        response = live.client.post(url, json={"points": [[0.0, 0.0]]})
        assert response.status_code == 404, response.text
    other = upload(live, points)  # a model belongs to its own point set only
    assert live.client.post(f"/v1/points/{other['id']}/models/{model['id']}/predict",
                            json={"points": [[0.0, 0.0]]}).status_code == 404  # fmt: skip
    assert live.client.delete(f"{base}/{model['id']}").status_code == 204
    gone = predict(live.client, record["id"], model["id"], queries())
    assert gone.status_code == 404 and gone.json()["code"] == "model_not_found"
    again = fit(live.client, record["id"], PARAMS)
    assert live.client.delete(f"/v1/points/{record['id']}").status_code == 204
    assert predict(live.client, record["id"], again["id"], queries()).status_code == 404


def test_another_keys_model_is_404(server_factory: ServerFactory) -> None:
    keys = ("a" * 32, "b" * 32)
    server = server_factory(MST_API_KEYS=",".join(keys))
    a, b = (httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {k}"}) for k in keys)
    with a, b:
        buffer = io.BytesIO()
        np.savez(buffer, points=blobs())
        created = a.post("/v1/points", content=buffer.getvalue(), headers={"content-type": OCTET}).json()
        model = fit(a, created["id"], PARAMS)
        assert predict(a, created["id"], model["id"], queries()).status_code == 200
        for response in (
            predict(b, created["id"], model["id"], queries()),
            b.get(f"/v1/points/{created['id']}/models/{model['id']}"),
            b.get(f"/v1/points/{created['id']}/models"),
            b.post(f"/v1/points/{created['id']}/models", json=PARAMS),
            b.delete(f"/v1/points/{created['id']}/models/{model['id']}"),
        ):
            assert response.status_code == 404, response.text
        assert server.client.get(f"/v1/points/{created['id']}/models").status_code == 401


def test_models_survive_restarts_and_a_changed_point_set_is_409(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    server = server_factory(data)
    points = blobs()
    record = upload(server, points)
    model = fit(server.client, record["id"], PARAMS)
    first = predict(server.client, record["id"], model["id"], queries()).json()
    # a worker killed: the point set is reloaded, the model fitted again from its parameters
    pid = server.worker_pid()
    os.kill(pid, signal.SIGKILL)
    ready_after(server, pid)
    after_kill = predict(server.client, record["id"], model["id"], queries())
    assert after_kill.status_code == 200, after_kill.text
    assert after_kill.json() == first
    assert "w-fit" in parse_header(after_kill.headers["server-timing"])  # fitted again, and said so
    # the whole service restarted: the same
    server.stop()
    server = server_factory(data)
    assert predict(server.client, record["id"], model["id"], queries()).json() == first
    # the stored points replaced behind the service's back (fewer of them): the model is outdated
    server.stop()
    np.savez(data / "spool" / "graphs" / f"{record['id']}.npz", points=points[:200])
    server = server_factory(data)
    stale = predict(server.client, record["id"], model["id"], queries())
    assert stale.status_code == 409 and stale.json()["code"] == "model_outdated", stale.text
    assert "240 points" in stale.json()["detail"] and "200" in stale.json()["detail"]


def test_model_and_prediction_admission_507_413_with_the_numbers(server_factory: ServerFactory) -> None:
    from service.runtime.worker.prediction import fit_bytes, predict_bytes

    n, d = 4000, 3
    points = np.random.default_rng(0).random((n, d))
    held = 8 * n * d  # the coordinates; the spatial index is built by the first fit (or job)
    needed_fit = fit_bytes(n, d, 10, "cpu", index_built=False)
    cap = needed_fit + held // 2  # a model fits the worker, but not beside its point set: 507
    server = server_factory(MST_WORKER_MEMORY_BYTES=str(cap), MST_MAX_UPLOAD_BYTES="100000000")
    record = upload(server, points)
    response = server.client.post(f"/v1/points/{record['id']}/models", json={"min_cluster_size": 10})
    assert response.status_code == 507, response.text
    problem = response.json()
    assert problem["code"] == "insufficient_memory", problem
    assert problem["needed_bytes"] == needed_fit and problem["capacity_bytes"] == cap, problem
    assert problem["available_bytes"] == cap - held and str(needed_fit) in problem["detail"]
    # a model of more points than the worker can ever fit is a 413
    response = server.client.post(f"/v1/points/{record['id']}/models", json={"min_cluster_size": 10,
                                  "min_samples": 200})  # fmt: skip
    problem = response.json()
    assert response.status_code == 413 and problem["code"] == "point_set_exceeds_worker_memory", problem
    assert problem["needed_bytes"] == fit_bytes(n, d, 200, "cpu", index_built=False) > cap
    # a point set larger than the worker is a 413 with the numbers, before its coordinates are copied
    big = np.random.default_rng(1).random((200_000, d))
    response = server.client.post("/v1/points", content=_npz(big), headers={"content-type": OCTET})
    assert response.status_code == 413, response.text
    problem = response.json()
    needed = 8 * big.size + gpu_core.estimate_point_set_bytes(200_000, d, backend="cpu").resident
    assert problem["code"] == "point_set_exceeds_worker_memory"
    assert problem["needed_bytes"] == needed and problem["capacity_bytes"] == cap
    # with room for the model, a prediction too large for the worker is a 413 naming its bytes
    server.stop()
    small = np.random.default_rng(2).random((300, d))
    cap = 8 * small.size + gpu_core.estimate_point_set_bytes(300, d, backend="cpu").peak * 4 + 2_000_000
    server = server_factory(MST_WORKER_MEMORY_BYTES=str(cap), MST_MAX_UPLOAD_BYTES="100000000")
    record = upload(server, small)
    model = fit(server.client, record["id"], {"min_cluster_size": 10})
    many = np.random.default_rng(3).random((200_000, d))
    response = server.client.post(
        f"/v1/points/{record['id']}/models/{model['id']}/predict", params={"membership": "true"},
        content=_npz(many), headers={"content-type": OCTET},
    )  # fmt: skip
    assert response.status_code == 413, response.text
    problem = response.json()
    assert problem["capacity_bytes"] == cap and problem["needed_bytes"] > cap
    assert problem["needed_bytes"] == predict_bytes(200_000, d, 18, model["num_clusters"], True)


def test_a_models_bytes_count_against_the_device_quota(server_factory: ServerFactory, tmp_path: Path) -> None:
    points = blobs()
    probe = server_factory(tmp_path / "probe")
    record = upload(probe, points)
    model_bytes = fit(probe.client, record["id"], PARAMS)["model_bytes"]
    probe.stop()
    quota = record["residency"]["device_bytes"] + model_bytes - 1  # the point set fits, its model not
    server = server_factory(tmp_path / "quota", MST_QUOTA_DEVICE_BYTES=str(quota))
    record = upload(server, points)
    response = server.client.post(f"/v1/points/{record['id']}/models", json=PARAMS)
    assert response.status_code == 413, response.text
    problem = response.json()
    assert problem["code"] == "quota_exceeded" and problem["quota"] == "MST_QUOTA_DEVICE_BYTES", problem
    assert str(model_bytes) in problem["detail"] and problem["limit"] == quota
    assert server.client.get(f"/v1/points/{record['id']}/models").json()["models"] == []


def test_exemplar_indexes_built_by_a_membership_request_count_on_the_worker(live: LiveServer) -> None:
    """Membership vectors of many points search indexes of the exemplars, built by the first such
    request and kept with the model: the point set's bytes on its worker and the model's record
    grow by what the library's same indexes hold, once; a request of few points computes every
    distance instead."""
    from gpu_core._clustering import prediction

    points, params = blobs(n=8000), {"min_cluster_size": 40, "min_samples": 4}
    record = upload(live, points)
    model = fit(live.client, record["id"], params)

    def held() -> int:
        return int(live.client.get(f"/v1/points/{record['id']}").json()["residency"]["device_bytes"])

    start = held()
    few, many = queries(5, 20), queries(6, 3000)
    for new in (few, many, many):
        response = predict(live.client, record["id"], model["id"], new)
        assert response.status_code == 200, response.text
        if new is few:
            assert held() == start
    library_model = gpu_core.HDBSCAN(**params, prediction_data=True, backend="cpu").fit(points)  # type: ignore[arg-type]
    data = library_model.prediction_data_
    assert prediction.searches_exemplars(data, len(many), on_host=True)  # the premise
    assert not prediction.searches_exemplars(data, len(few), on_host=True)
    gpu_core.membership_vector(library_model, many)
    grown = prediction.exemplar_index_bytes(data)
    assert grown > 0 and held() == start + grown
    # the model's record too (its owner's device quota counts it)
    record_now = live.client.get(f"/v1/points/{record['id']}/models/{model['id']}").json()
    assert record_now["model_bytes"] == model["model_bytes"] + grown


def _npz(points: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, points=points)
    return buffer.getvalue()


@pytest.mark.gpu
def test_gpu_predictions_equal_the_librarys(server_factory: ServerFactory) -> None:
    """On a GPU worker the service answers what the library answers with a GPU model."""
    server = server_factory(MST_BACKEND="gpu")
    points = blobs(d=3)
    record = upload(server, points)
    for params in (PARAMS, {"min_cluster_size": 5, "cluster_selection_epsilon": 3.0}):
        model = fit(server.client, record["id"], params)
        new = queries(4, 60, d=3)
        response = predict(server.client, record["id"], model["id"], new)
        assert response.status_code == 200, response.text
        check_equal(response.json(), library(points, new, params, backend="gpu"))


def test_the_bundled_clients_models_and_predictions(live: LiveServer) -> None:
    """``service.client.Client``: fit, list, predict (npz both ways), delete; the same arrays as
    the library's, and a refused prediction raises with the problem."""
    from service.client import Client, ClientError

    points = blobs()
    with Client(live.url) as mst:
        points_id = mst.upload_points(points)["id"]
        model = mst.fit_model(points_id, **PARAMS)
        assert [m["id"] for m in mst.models(points_id)] == [model["id"]]
        expected = library(points, queries(), PARAMS)
        answer = mst.predict(points_id, model["id"], queries(), membership=True)
        assert answer["labels"].dtype == np.int64
        check_equal(answer, expected)
        assert set(mst.predict(points_id, model["id"], queries())) == {"labels", "probabilities"}
        with pytest.raises(ClientError) as info:
            mst.predict(points_id, model["id"], queries(d=3))
        assert info.value.status == 422 and "3 coordinates" in str(info.value)
        mst.delete_model(points_id, model["id"])
        assert mst.models(points_id) == []


@pytest.mark.parametrize("backend", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_predictions_waiting_together_are_one_batch_each_answered_as_alone(
    server_factory: ServerFactory, backend: str
) -> None:
    """Predictions against one model that wait on its worker together (sent through two API
    processes while the worker is stopped) are predicted as one batch, and each answer is the
    library's for that request's points alone; a request with a NaN coordinate among them gets
    its own 422, and a membership request runs alone with its own answer."""

    server = server_factory(MST_API_WORKERS="2", MST_CPU_WORKERS="1", MST_GPUS="0", MST_BACKEND=backend)
    points = blobs(d=3)
    record = upload(server, points)
    model = fit(server.client, record["id"], PARAMS)
    url = f"/v1/points/{record['id']}/models/{model['id']}/predict"
    news = [queries(10 + i, 30 + 7 * i, d=3) for i in range(10)]
    bad = queries(99, 20, d=3)
    bad[4, 2] = np.nan

    def npy(array: np.ndarray) -> dict[str, Any]:
        body = io.BytesIO()
        np.save(body, array)
        return {"content": body.getvalue(), "headers": {"content-type": OCTET}, "params": {"format": "npy"}}

    # JSON and npy bodies (read by the worker) alike; the NaN one can only come as npy
    bodies = [{"json": {"points": new.tolist()}} if i % 2 else npy(new) for i, new in enumerate(news)]
    bodies += [npy(bad), {"json": {"points": news[0].tolist()}, "params": {"membership": "true"}}]

    def send(i: int) -> httpx.Response:
        with httpx.Client(base_url=server.url, headers=server.client.headers, timeout=60) as client:
            return client.post(url, **bodies[i])

    sends = [functools.partial(send, i) for i in range(len(bodies))]
    with server.sent_while_stopped(server.worker_pid(record["id"]), sends, join_s=60) as answers:
        pass  # the requests wait in the worker's pipes, together
    batched = []
    for new, response in zip(news, answers, strict=False):
        assert response is not None and response.status_code == 200, response
        _, labels, probabilities, _ = library(points, new, PARAMS, backend)
        answer = response.json()
        assert np.array_equal(np.asarray(answer["labels"]), labels)
        assert np.array_equal(np.asarray(answer["probabilities"]), probabilities)
        batched.append(int(response.headers["x-mst-batched"]))
    assert max(batched) >= 2, batched  # they waited together: some were predicted as one batch
    nan = answers[len(news)]
    assert nan is not None and nan.status_code == 422 and "4" in nan.json()["detail"], nan
    membership = answers[-1]
    assert (
        membership is not None
        and membership.status_code == 200
        and membership.headers["x-mst-batched"] == "1"
    )
    check_equal(membership.json(), library(points, news[0], PARAMS, backend))
    assert server.client.get("/readyz").json()["workers"][0]["restarts"] == 0


def test_predictions_in_a_killed_workers_pipe_are_answered_by_its_replacement(
    server_factory: ServerFactory,
) -> None:
    """Predictions handed to a worker that is SIGKILLed before it read them had not started: each
    is sent to the replacement (which fits the model again from its parameters), and every answer
    is the library's for that request's points alone; none hangs, none is lost."""

    server = server_factory(MST_API_WORKERS="2", MST_CPU_WORKERS="1")
    points = blobs(d=2)
    record = upload(server, points)
    model = fit(server.client, record["id"], PARAMS)
    url = f"/v1/points/{record['id']}/models/{model['id']}/predict"
    news = [queries(40 + i, 25 + 3 * i) for i in range(6)]

    def send(i: int) -> httpx.Response:
        with httpx.Client(base_url=server.url, headers=server.client.headers, timeout=120) as client:
            return client.post(url, json={"points": news[i].tolist()}, params={"membership": "false"})

    sends = [functools.partial(send, i) for i in range(len(news))]
    pid = server.worker_pid(record["id"])
    with server.sent_while_stopped(pid, sends, then=signal.SIGKILL) as answers:
        assert answers == [None] * len(news)  # the predictions wait in its pipe, unread
    for new, response in zip(news, answers, strict=True):
        assert response is not None and response.status_code == 200, response
        _, labels, probabilities, _ = library(points, new, PARAMS)
        assert np.array_equal(np.asarray(response.json()["labels"]), labels)
        assert np.array_equal(np.asarray(response.json()["probabilities"]), probabilities)
    worker = server.client.get("/readyz").json()["workers"][0]
    assert worker["restarts"] == 1 and worker["requests_resent"] >= len(news), worker
