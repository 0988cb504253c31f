"""The error tree and its one mapping to problem+json (in process, with a TestClient)."""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Query

from gpu_core import errors as core
from service import errors
from service.api import problems


class InProcess:
    """Requests to an ASGI app in this process (httpx's ASGI transport)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                return await client.get(path, **kwargs)

        return asyncio.run(go())


def app_raising(exc: BaseException) -> InProcess:
    app = FastAPI()
    problems.install_handlers(app)

    @app.get("/boom")
    def boom(n: int = Query(0)) -> None:
        raise exc

    return InProcess(app)


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (errors.GraphNotFoundError("no graph"), 404, "graph_not_found"),
        (errors.JobNotFoundError("no job"), 404, "job_not_found"),
        (errors.JobNotFinishedError("queued"), 409, "job_not_finished"),
        (errors.JobNotCancellableError("running"), 409, "job_not_cancellable"),
        (errors.PayloadTooLargeError("big", field="body"), 413, "payload_too_large"),
        (errors.UnsupportedMediaTypeError("text"), 415, "unsupported_media_type"),
        (errors.InvalidUploadError("bad", field="src", index=3), 422, "invalid_upload"),
        (errors.InvalidRequestError("bad json"), 400, "invalid_request"),
        (errors.WorkerLostError("gone"), 503, "worker_lost"),
        (errors.ServiceUnavailableError("later"), 503, "service_unavailable"),
        (errors.WorkerInternalError("bug"), 500, "worker_internal_error"),
        (core.VertexIdError("'dst[4]' = 9", field="dst", index=4), 422, "vertex_out_of_range"),
        (core.NonFiniteWeightError("nan", field="weight", index=0), 422, "non_finite_weight"),
        (core.EdgeListShapeError("lengths", field="weight"), 422, "invalid_shape"),
        (core.UnsupportedDtypeError("uint8", field="weight"), 422, "unsupported_dtype"),
        (core.GraphValidationError("not npz", field="body"), 422, "invalid_graph"),
        (core.GraphTooLargeError("2**31", limit=2**31 - 1, actual=2**31), 413, "graph_too_large"),
        (core.BackendUnavailableError("no gpu"), 503, "backend_unavailable"),
        (core.DeviceError("cuda"), 500, "device_error"),
    ],
)
def test_problem_for_each_error(exc: Exception, status: int, code: str) -> None:
    response = app_raising(exc).get("/boom")
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status and body["code"] == code
    assert body["type"] == f"urn:mst:problem:{code}" and body["title"]
    assert body["detail"] == str(exc) and body["instance"] == "/boom"
    for name in ("field", "index"):
        value = getattr(exc, name, None)
        assert body.get(name) == value


def test_unexpected_errors_hide_details() -> None:
    response = app_raising(RuntimeError("secret path /x")).get("/boom")
    assert response.status_code == 500 and "secret" not in response.text
    assert response.json()["code"] == "internal_error"


def test_request_validation_names_the_field() -> None:
    body = app_raising(ValueError()).get("/boom", params={"n": "x"}).json()
    assert body["status"] == 422 and body["field"] == "n" and body["detail"].startswith("n:")


@pytest.mark.parametrize(
    "exc",
    [
        errors.InvalidUploadError("bad", field="weight", index=7),
        errors.WorkerLostError("gone"),
        errors.WorkerInternalError("boom"),
    ],
)
def test_service_errors_survive_pickling(exc: errors.ServiceError) -> None:
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc) and back.__dict__ == exc.__dict__ and str(back) == str(exc)


def test_every_error_class_documents_itself() -> None:
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.ServiceError)]
    assert len(classes) >= 14
    for cls in classes:
        assert cls.__doc__ and cls.__doc__.strip().endswith("."), cls
        assert cls.code in (errors.__doc__ or ""), cls
    assert errors.error_type(core.DeviceError("x")) == "device_error"
    assert errors.error_type(KeyError("x")) == "internal_error"


@pytest.mark.parametrize(
    ("exc", "status", "members", "headers"),
    [
        (errors.UnauthorizedError("no key"), 401, {}, {"www-authenticate": 'Bearer realm="mst"'}),
        (
            errors.UnauthorizedError("bad key", challenge='Bearer realm="mst", error="invalid_token"'),
            401,
            {},
            {"www-authenticate": 'Bearer realm="mst", error="invalid_token"'},
        ),
        (
            errors.QuotaExceededError("jobs", quota="MST_QUOTA_QUEUED_JOBS", limit=2, used=2),
            429,
            {"quota": "MST_QUOTA_QUEUED_JOBS", "limit": 2, "used": 2},
            {"retry-after": "1"},
        ),
        (
            errors.QuotaExceededError("graphs", quota="MST_QUOTA_GRAPHS", limit=5, used=5, retry_after=60),
            429,
            {"quota": "MST_QUOTA_GRAPHS", "limit": 5, "used": 5},
            {"retry-after": "60"},
        ),
        (
            errors.DeviceQuotaExceededError("bytes", quota="MST_QUOTA_DEVICE_BYTES", limit=10, used=8),
            413,
            {"quota": "MST_QUOTA_DEVICE_BYTES", "limit": 10, "used": 8},
            {"retry-after": None},
        ),
        (errors.QueueFullError("full"), 503, {}, {"retry-after": "1"}),
    ],
)
def test_errors_with_members_and_headers(
    exc: errors.ServiceError, status: int, members: dict[str, Any], headers: dict[str, str | None]
) -> None:
    response = app_raising(exc).get("/boom")
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["code"] == exc.code and body["detail"] == str(exc)
    assert {k: body[k] for k in members} == members
    for name, value in headers.items():
        assert response.headers.get(name) == value
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc) and back.__dict__ == exc.__dict__ and back.headers() == exc.headers()
