"""Submitting a job, shared by the graph and point-set routers: its parameters checked, its answer
(202 with the job, or 200 with the job finished within ``?wait=``, or with its result when the
request's Accept asks for a binary one)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi import Response, status
from pydantic import ValidationError

from ..errors import InvalidParamsError, NotAcceptableError, ServiceError
from ..models import TASK_PARAMS
from ..timing import Steps
from .deps import Services, checked_graph_id
from .encoders import job_response, negotiate, result_response


def task_params(task: str, params: dict[str, Any]) -> dict[str, Any]:
    """A task's parameters, validated by its model; the values given, defaults left out."""
    try:
        model = TASK_PARAMS[task].model_validate(params)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in ("params", *first.get("loc", ())))
        raise InvalidParamsError(f"'{where}': {first.get('msg', 'invalid value')}.", field=where) from None
    chosen = model.model_dump(exclude_defaults=True)
    if task == "clusters" and (("k" in chosen) == ("threshold" in chosen)):
        raise InvalidParamsError(
            "a 'clusters' job takes exactly one of 'params.k' and 'params.threshold'.", field="params"
        )
    return chosen


def inline_result(accept: str | None) -> str | None:
    """The binary representation (``"npz"`` or ``"arrow"``) a submission's Accept asks its answer to
    be, the job's result in place of the job, or None: the job's JSON, as a submission has always
    answered (no Accept, one that prefers JSON, or one that allows none of the result's
    representations: no 406 here, the job is still submitted)."""
    if accept is None:
        return None
    try:
        representation = negotiate(accept)
    except NotAcceptableError:
        return None
    return None if representation == "json" else representation


async def submit_response(
    services: Services,
    graph_id: str,
    wait: float,
    owner: str,
    task: str = "mst",
    params: dict[str, Any] | None = None,
    cache: bool = False,
    checked: Callable[[str], str] = checked_graph_id,
    accept: str | None = None,
) -> Response:
    """Submit a job of ``owner`` and wait up to ``wait`` s for it.

    ``checked``: the id-shape check of the dataset's kind (graphs; point sets pass theirs).
    With ``wait``, the answer's ``Server-Timing`` says where the time went
    (:meth:`~service.runtime.jobs.Submitted.steps`). ``accept``: the request's Accept; where it
    asks for a binary result (:func:`inline_result`) and the job succeeds within the wait, the
    answer is its result, as ``GET /v1/jobs/{id}/result`` gives it (one round trip instead of
    two), with ``Location`` naming the job; otherwise the job, as without it.
    """
    started = time.monotonic()
    jobs = services.jobs
    submitted = await jobs.submit(
        checked(graph_id), owner, task=task, params=params, publish=wait <= 0, cache=cache
    )
    if wait > 0:
        job = await jobs.wait(submitted, min(wait, services.settings.max_wait_s))
        if not job.finished:
            job = await jobs.publish(submitted)  # its id goes out with this 202
    else:
        job = submitted.job
    steps = Steps()
    if wait > 0:
        steps.add(submitted.steps(started, time.monotonic()), "")
    representation = inline_result(accept) if wait > 0 else None
    if representation is not None and job.status == "succeeded":
        result_steps = Steps()
        try:
            job, path = await jobs.result_path(job.id, owner, result_steps, known=job)
            response = await result_response(representation, job, path)
        except ServiceError as exc:  # (its result lost and not computed again): the job is there
            exc.location = f"/v1/jobs/{job.id}"
            raise
        result_steps.lap("encode")
        steps.add(result_steps.ms, "result-")
        response.headers["Location"] = f"/v1/jobs/{job.id}"
        response.headers["Content-Location"] = f"/v1/jobs/{job.id}/result"
    else:
        code = status.HTTP_200_OK if job.finished else status.HTTP_202_ACCEPTED
        response = job_response(job, code, {"Location": f"/v1/jobs/{job.id}"})
    if steps.ms:
        response.headers["Server-Timing"] = steps.header()
    return response
