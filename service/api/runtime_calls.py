"""The runtime process's side of the fronts' RPC (``MST_API_PROCESSES`` > 1).

A front (:mod:`service.api.front`) does the HTTP and the files of the hot
routes; these calls do the state, with the same functions the routes and the
fast lane call, so the answers are the same: a job record comes back as the
status, headers and body its response would have had; a result as the job's
summary and the path of its file in the (shared) spool, which the front
encodes. A :class:`~service.errors.ServiceError` raised here travels back and
is rendered by the front with the same handler.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.responses import Response

from ..errors import ServiceUnavailableError
from ..metrics import Metrics
from ..runtime.rpc import Handler
from ..storage.npzio import GraphLayout
from .deps import Services, checked_job_id
from .encoders import job_response, job_summary
from .graphs import submit_response

#: status, raw headers and body of a response built in the runtime, sent as they are by a front
RawResponse = tuple[int, list[tuple[bytes, bytes]], bytes]


def _raw(response: Response) -> RawResponse:
    return response.status_code, list(response.raw_headers), bytes(response.body)


def runtime_calls(services_now: Callable[[], Services | None], metrics: Metrics) -> dict[str, Handler]:
    """The calls a front makes, on the services of the running app (``services_now``)."""

    def services() -> Services:
        current = services_now()
        if current is None:
            raise ServiceUnavailableError("the service is starting or stopping; retry shortly.")
        return current

    async def submit(graph_id: str, wait: float, owner: str, cache: bool) -> RawResponse:
        return _raw(await submit_response(services(), graph_id, wait, owner, cache=cache))

    async def job(job_id: str, owner: str) -> RawResponse:
        """A status poll, where a front cannot read the SQLite file itself (not made yet)."""
        return _raw(job_response(services().jobs.get(checked_job_id(job_id), owner)))

    async def result(job_id: str, owner: str) -> tuple[str, str, dict[str, Any], str]:
        record, path = await services().jobs.result_path(checked_job_id(job_id), owner)
        return record.id, record.graph_id, job_summary(record), str(path)

    async def admit(owner: str) -> None:
        services().jobs.admit(owner)

    async def one_shot(
        path: str | GraphLayout, fmt: str, size: int, owner: str
    ) -> tuple[dict[str, Any], str | dict[str, Any]]:
        """``path``: the upload's spool file, or where the front found its arrays in it (format
        ``PARSED``). Answers the summary and the forest's arrays, or the path of its file."""
        source = Path(path) if isinstance(path, str) else path
        summary, result = await services().jobs.one_shot(source, fmt, size, owner)
        return summary, result if isinstance(result, dict) else str(result)

    async def observe(requests: list[tuple[str, str, int, float]]) -> None:
        """Requests a front answered itself: ``(method, route, status, seconds)`` each."""
        for method, route, status, seconds in requests:
            metrics.requests.labels(method, route, str(status)).inc()
            metrics.request_seconds.labels(method, route).observe(seconds)

    async def ping() -> bool:
        return services_now() is not None

    return {
        "submit": submit,
        "job": job,
        "result": result,
        "admit": admit,
        "one_shot": one_shot,
        "observe": observe,
        "ping": ping,
    }
