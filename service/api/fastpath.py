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
from collections.abc import Awaitable, Callable

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

Handler = Callable[[Services, str], Awaitable[Response]]


def _header(scope: Scope, name: bytes) -> str | None:
    """The first value of a request header, as Starlette's ``request.headers.get`` gives it."""
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _route(scope: Scope) -> tuple[str, Handler] | None:
    """The route template and handler for a plain hot-path request; None for anything else."""
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
        graph_id = submit.group(1)
        return "/v1/graphs/{graph_id}/mst", lambda s, owner: submit_response(
            s, graph_id, wait, owner, cache=cache
        )
    if method != "GET" or query:
        return None
    result = _RESULT.fullmatch(path)
    if result is not None:
        if _header(scope, b"range") is not None:
            return None
        job_id, accept = result.group(1), _header(scope, b"accept")
        return "/v1/jobs/{job_id}/result", lambda s, owner: result_response(s, job_id, accept, None, owner)
    job = _JOB.fullmatch(path)
    if job is not None:
        job_id = job.group(1)

        async def status(services: Services, owner: str) -> Response:
            return job_response(services.jobs.get(checked_job_id(job_id), owner))

        return "/v1/jobs/{job_id}", status
    return None


class FastPathMiddleware:
    """Answers the plain hot-path requests; passes every other request on unchanged."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = _route(scope) if scope["type"] == "http" else None
        if found is None:
            await self.app(scope, receive, send)
            return
        template, handler = found
        scope["route"] = RouteLabel(template)  # the metrics label the request by its route
        request = Request(scope, receive)
        try:
            response: Response = await handler(services_of(request), owner_of(scope))
        except ServiceError as exc:
            response = await service_error_response(request, exc)
        await response(scope, receive, send)
