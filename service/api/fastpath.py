"""The job hot path as plain ASGI: submit a job, read its status, fetch its result.

On the H200 host FastAPI's routing, request building and parameter validation
took about 0.2 ms per request before a handler ran: a tenth of the 2 ms a job
on a resident graph may spend outside its computation, paid twice per job
(submit, then fetch). This middleware answers the three routes of that path
itself when a request is the plain case:

* ``POST /v1/graphs/{graph_id}/mst`` with no query, or only ``wait=<decimal>`` and
  ``cache=true|false`` (each at most once);
* ``GET /v1/jobs/{job_id}`` with no query;
* ``GET /v1/jobs/{job_id}/result`` with no query and no ``Range`` header.

Requests reach it after :class:`service.api.auth.AuthMiddleware` has let them in
and recorded their owner, which it passes on as the routes do. It calls the
same functions as the FastAPI routes (``submit_response``,
``job_response``, ``result_response``) and renders errors with the same
handler, so the answers are the same byte for byte (``tests/service`` checks
both ways). Everything else, malformed or unusual requests included, goes on
to FastAPI, which stays the reference implementation and the source of the
OpenAPI document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import ServiceError, service_error_response
from ..metrics import RouteLabel
from .auth import owner_of
from .deps import Services, checked_job_id, services_of
from .encoders import job_response
from .graphs import submit_response
from .jobs import result_response

_SUBMIT = re.compile(r"/v1/graphs/([^/]+)/mst")
_JOB = re.compile(r"/v1/jobs/([^/]+)")
_RESULT = re.compile(r"/v1/jobs/([^/]+)/result")
#: the ``?wait=`` values taken here; any other query (``1e3``, ``-1``, ``x``) is FastAPI's to validate
_WAIT = re.compile(rb"wait=(\d{1,9}(?:\.\d{1,9})?)")
_CACHE = {b"cache=true": True, b"cache=false": False}


@dataclass(frozen=True)
class HotRequest:
    """A plain request of the hot path: which route, on which id, with which options."""

    #: the route template (the metrics' label)
    route: str
    #: the graph id (submit) or job id (status, result), as given
    target: str
    wait: float = 0.0
    cache: bool = False
    accept: str | None = None


SUBMIT_ROUTE = "/v1/graphs/{graph_id}/mst"
JOB_ROUTE = "/v1/jobs/{job_id}"
RESULT_ROUTE = "/v1/jobs/{job_id}/result"


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of a request header, as Starlette's ``request.headers.get`` gives it."""
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def match(scope: Scope) -> HotRequest | None:
    """The plain hot-path request ``scope`` is; None for anything else (also used by the fronts,
    :mod:`service.api.front`, so both take exactly the same requests)."""
    method, path, query = scope["method"], scope["path"], scope["query_string"]
    if scope.get("root_path"):
        return None  # mounted under a prefix: leave the path arithmetic to Starlette
    if method == "POST":
        submit = _SUBMIT.fullmatch(path)
        if submit is None:
            return None
        wait, cache = 0.0, False
        seen: set[bytes] = set()
        for part in query.split(b"&") if query else ():
            given = _WAIT.fullmatch(part)
            if given is not None and b"wait" not in seen:
                wait = float(given.group(1))
                seen.add(b"wait")
            elif part in _CACHE and b"cache" not in seen:
                cache = _CACHE[part]
                seen.add(b"cache")
            else:
                return None
        return HotRequest(SUBMIT_ROUTE, submit.group(1), wait=wait, cache=cache)
    if method != "GET" or query:
        return None
    result = _RESULT.fullmatch(path)
    if result is not None:
        if header(scope, b"range") is not None:
            return None
        return HotRequest(RESULT_ROUTE, result.group(1), accept=header(scope, b"accept"))
    job = _JOB.fullmatch(path)
    if job is not None:
        return HotRequest(JOB_ROUTE, job.group(1))
    return None


async def _answer(services: Services, hot: HotRequest, owner: str) -> Response:
    if hot.route == SUBMIT_ROUTE:
        return await submit_response(services, hot.target, hot.wait, owner, cache=hot.cache)
    if hot.route == RESULT_ROUTE:
        return await result_response(services, hot.target, hot.accept, None, owner)
    return job_response(services.jobs.get(checked_job_id(hot.target), owner))


class FastPathMiddleware:
    """Answers the plain hot-path requests; passes every other request on unchanged."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hot = match(scope) if scope["type"] == "http" else None
        if hot is None:
            await self.app(scope, receive, send)
            return
        scope["route"] = RouteLabel(hot.route)  # the metrics label the request by its route
        request = Request(scope, receive)
        try:
            response: Response = await _answer(services_of(request), hot, owner_of(scope))
        except ServiceError as exc:
            response = await service_error_response(request, exc)
        await response(scope, receive, send)
