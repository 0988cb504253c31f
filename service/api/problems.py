"""The one mapping of errors to HTTP: RFC 9457 ``application/problem+json`` responses.

One handler per error family (:data:`HANDLERS`, registered by :func:`install_handlers`),
looked up along the exception's MRO: the service's own errors
(:class:`~service.errors.ServiceError`, whose class fixes status, code and title), the
engine's (:mod:`gpu_core.errors`: status and title by class below), FastAPI's validation
errors, Starlette's HTTP errors (unknown routes, methods), a full or unwritable data dir, and
anything unexpected (a 500 that says it is a bug). Routes raise exceptions; only these
handlers build problem responses.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpu_core import errors as core_errors

from ..errors import ServiceError, storage_error
from .media_types import PROBLEM_JSON

log = logging.getLogger("service")


#: gpu_core's errors: status and title by class, looked up along the MRO
_CORE_STATUS: dict[type[core_errors.MSTError], tuple[int, str]] = {
    core_errors.GraphValidationError: (422, "Invalid graph"),
    core_errors.PointSetValidationError: (422, "Invalid point set"),
    core_errors.GraphTooLargeError: (413, "Graph too large"),
    core_errors.BackendUnavailableError: (503, "Backend unavailable"),
    core_errors.DeviceMemoryError: (507, "Out of device memory"),
    core_errors.DeviceError: (500, "Device error"),
    core_errors.MSTError: (500, "Computation failed"),
}


def core_status(exc: core_errors.MSTError) -> tuple[int, str]:
    """HTTP status and title of an engine error (the nearest mapped class on its MRO)."""
    for klass in type(exc).__mro__:
        if klass in _CORE_STATUS:
            return _CORE_STATUS[klass]
    return 500, "Computation failed"  # pragma: no cover - MSTError is always on the MRO


def problem(
    status: int,
    code: str,
    title: str,
    detail: str,
    instance: str | None = None,
    **extra: Any,
) -> JSONResponse:
    """An RFC 9457 problem response; ``extra`` members with value None are left out."""
    body: dict[str, Any] = {
        "type": f"urn:mst:problem:{code}",
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
    }
    if instance is not None:
        body["instance"] = instance
    body.update({k: v for k, v in extra.items() if v is not None})
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON)


def _instance(request: Request) -> str:
    return request.url.path


async def service_error_response(request: Request, exc: Exception) -> JSONResponse:
    """The problem response of a :class:`ServiceError` (the handler of that family)."""
    assert isinstance(exc, ServiceError)
    if exc.status >= 500:
        log.error("%s on %s %s: %s", exc.code, request.method, request.url.path, exc.message)
    response = problem(exc.status, exc.code, exc.title, exc.message, _instance(request), **exc.members())
    extra = exc.headers()
    if extra:
        response.headers.update(extra)
    if exc.location is not None:
        response.headers["Location"] = exc.location
    return response


async def _core_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, core_errors.MSTError)
    status, title = core_status(exc)
    if status >= 500:
        log.error("%s on %s %s: %s", exc.code, request.method, request.url.path, exc.message)
    return problem(
        status,
        exc.code,
        title,
        exc.message,
        _instance(request),
        field=getattr(exc, "field", None),
        index=getattr(exc, "index", None),
        limit=getattr(exc, "limit", None),
    )


def _location(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "request"


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    where = _location(tuple(first.get("loc", ())))
    detail = f"{where}: {first.get('msg', 'invalid value')}"
    if len(errors) > 1:
        detail += f" (and {len(errors) - 1} more problem(s))"
    return problem(422, "invalid_request", "Invalid request", detail, _instance(request), field=where)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed"}.get(
        exc.status_code, f"http_{exc.status_code}"
    )
    title = str(exc.detail) if isinstance(exc.detail, str) else "HTTP error"
    detail = {
        404: f"There is no route {request.url.path}; see /docs for the API.",
        405: f"{request.method} is not allowed on {request.url.path}.",
    }.get(exc.status_code, title)
    response = problem(exc.status_code, code, title, detail, _instance(request))
    if exc.headers:
        response.headers.update(exc.headers)
    allowed = _allowed_methods(request) if exc.status_code == 405 else None
    if allowed is not None:
        response.headers["Allow"] = allowed
    return response


async def _storage_or_unexpected(request: Request, exc: Exception) -> JSONResponse:
    """An OSError or SQLite error: 507/503 when the data dir is full or unwritable, else a 500."""
    mapped = storage_error(exc)
    if mapped is not None:
        return await service_error_response(request, mapped)
    return await _unexpected(request, exc)


_VERBS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def _allowed_methods(request: Request) -> str | None:
    """Every method the OpenAPI document gives the request's path (Starlette's 405 names only the
    first matching route's, and FastAPI makes one route per method); None for undocumented paths."""
    methods: set[str] = set()
    for template, item in request.app.openapi()["paths"].items():  # the document is built once
        pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, request.url.path):
            methods.update(verb.upper() for verb in item if verb in _VERBS)
    return ", ".join(sorted(methods)) or None


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem(
        500,
        "internal_error",
        "Internal server error",
        "The server failed unexpectedly; this is a bug, please report it with the time of the request.",
        _instance(request),
    )


ErrorHandler = Callable[[Request, Exception], Awaitable[JSONResponse]]

#: the one handler of each error family, most specific first
HANDLERS: dict[type[Exception], ErrorHandler] = {
    ServiceError: service_error_response,
    core_errors.MSTError: _core_error,
    RequestValidationError: _validation_error,
    StarletteHTTPException: _http_error,
    OSError: _storage_or_unexpected,
    sqlite3.Error: _storage_or_unexpected,
    Exception: _unexpected,
}


def install_handlers(app: FastAPI) -> None:
    """Register the one handler of each error family on ``app``."""
    for klass, handler in HANDLERS.items():
        app.add_exception_handler(klass, handler)
