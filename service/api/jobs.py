"""``/v1/jobs``: job status, results (JSON, npz or Arrow IPC by ``Accept``) and cancellation."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response

from ..models import JobOut, ResultOut
from .auth import owner_of
from .deps import JobsDep, OwnerDep, Services, checked_job_id, services_of
from .docs import RESULT_CONTENT, RESULT_DESCRIPTION, problems
from .encoders import (
    arrow_result,
    job_out,
    job_response,
    job_summary,
    json_result,
    negotiate,
    npz_response,
)

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


@router.get(
    "/{job_id}", operation_id="getJob", response_model=JobOut, summary="Job status", responses=problems(404)
)
async def get_job(job_id: str, request: Request) -> Response:
    """Status, timestamps, ``error`` on failure and the result summary (with ``compute_ms``) on success."""
    return job_response(services_of(request).jobs.get(checked_job_id(job_id), owner_of(request.scope)))


@router.get(
    "/{job_id}/result",
    operation_id="getJobResult",
    summary="Job result",
    response_model=None,
    responses={
        200: {
            "description": RESULT_DESCRIPTION,
            "content": RESULT_CONTENT,
            "model": ResultOut,
        },
        **problems(404, 406, 409, 410),
    },
)
async def get_job_result(
    job_id: str, request: Request, accept: Annotated[str | None, Header(include_in_schema=False)] = None
) -> Response:
    """The edge ids (ascending) and weights of a succeeded job's forest; 409 while it has not succeeded."""
    services, owner = services_of(request), owner_of(request.scope)
    return await result_response(services, job_id, accept, request.headers.get("range"), owner)


async def result_response(
    services: Services, job_id: str, accept: str | None, byte_range: str | None, owner: str
) -> Response:
    """A succeeded job's forest, negotiated by ``Accept`` (also served by :mod:`service.api.fastpath`)."""
    representation = negotiate(accept)  # 406 before anything is looked up
    job, path = await services.jobs.result_path(checked_job_id(job_id), owner)
    return await result_body(representation, path, job_summary(job), job.id, job.graph_id, byte_range)


async def result_body(
    representation: str,
    path: Path,
    summary: dict[str, Any],
    job_id: str,
    graph_id: str,
    byte_range: str | None = None,
) -> Response:
    """A job's result file in a representation :func:`negotiate` chose (also used by the fronts)."""
    if representation == "npz":
        return await npz_response(path, summary, filename=f"{job_id}.npz", byte_range=byte_range)
    if representation == "arrow":
        return await arrow_result(path, summary, filename=f"{job_id}.arrows")
    return json_result(path, summary, job_id=job_id, graph_id=graph_id)


@router.delete(
    "/{job_id}",
    operation_id="cancelJob",
    response_model=JobOut,
    summary="Cancel a queued job",
    responses=problems(404, 409),
)
async def cancel_job(job_id: str, jobs: JobsDep, owner: OwnerDep) -> JobOut:
    """Cancel a job that has not started; 409 for a running or finished one."""
    return job_out(jobs.cancel(checked_job_id(job_id), owner))
