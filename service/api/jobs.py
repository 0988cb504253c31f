"""``/v1/jobs``: job status, results (JSON, npz or Arrow IPC by ``Accept``) and cancellation."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Request, Response

from ..models import JobOut, ResultOut
from ..timing import Steps
from .auth import owner_of
from .deps import JobsDep, OwnerDep, checked_job_id, services_of
from .docs import RESULT_CONTENT, RESULT_DESCRIPTION, WAIT_QUERY, problems
from .encoders import job_out, job_response, negotiate, result_response

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


@router.get(
    "/{job_id}", operation_id="getJob", response_model=JobOut, summary="Job status", responses=problems(404)
)
async def get_job(job_id: str, request: Request, wait: Annotated[float, WAIT_QUERY] = 0.0) -> Response:
    """Status, timestamps, ``error`` on failure and the result summary (with ``compute_ms``) on success.
    With ``?wait=`` the answer waits up to that long for the job to finish (whichever API process
    it was submitted through)."""
    steps = Steps()
    services = services_of(request)
    jobs, owner, checked = services.jobs, owner_of(request.scope), checked_job_id(job_id)
    if wait > 0:
        job = await jobs.wait_stored(checked, owner, min(wait, services.settings.max_wait_s))
    else:
        job = jobs.get(checked, owner)
    steps.lap("lookup")
    response = job_response(job)
    steps.lap("encode")
    response.headers["Server-Timing"] = steps.header()
    return response


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
    representation = negotiate(accept)  # 406 before anything is looked up
    steps = Steps()
    job, path = await services.jobs.result_path(checked_job_id(job_id), owner, steps)
    response = await result_response(representation, job, path, byte_range=request.headers.get("range"))
    steps.lap("encode")
    response.headers["Server-Timing"] = steps.header()
    return response


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
