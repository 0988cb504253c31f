"""``/v1/points``: upload, list, describe and delete point sets; submit jobs on them.

A point set is the second kind of resident dataset: ``n`` points of ``d`` coordinates, kept on a
worker like a graph (placed by free memory, reloaded after restarts, evicted and loaded back).
Its jobs follow the one job model (``GET /v1/jobs/{id}``, ``?wait=``, results by ``Accept``):
``emst`` (the exact Euclidean or mutual-reachability minimum spanning tree), ``hdbscan`` (labels
and probabilities, scikit-learn's semantics) and ``single_linkage`` (a SciPy linkage matrix).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response, status

from ..models import JobOut, PointSetList, PointSetOut, PointsFormat, PointsJobRequest
from .auth import owner_of
from .deps import OwnerDep, ServicesDep, checked_points_id, services_of
from .descriptions import describe_points
from .docs import BINARY_SCHEMA, CACHE_QUERY, SUBMITTED, WAIT_QUERY, problems
from .submissions import submit_response, task_params
from .uploads import receive_points

router = APIRouter(prefix="/v1/points", tags=["points"])

_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/PointsUpload"}},
            "application/octet-stream": {
                "schema": BINARY_SCHEMA,
                "description": "An npz with a 'points' array of shape (n, d) (?format=npz, default), "
                "or an .npy of that array (?format=npy); float32 or float64 coordinates.",
            },
        },
    }
}


@router.post(
    "",
    operation_id="createPointSet",
    status_code=status.HTTP_201_CREATED,
    response_model=PointSetOut,
    summary="Upload a point set",
    openapi_extra=_UPLOAD_BODY,
    responses=problems(400, 413, 415, 422, 429, 503),
)
async def create_point_set(
    request: Request,
    response: Response,
    services: ServicesDep,
    owner: OwnerDep,
    format: Annotated[
        PointsFormat | None, Query(description="Format of a binary body (npz, default, or npy).")
    ] = None,
) -> PointSetOut:
    """Store a point set and make it resident on a worker; 201 with its record."""
    services.catalog.admit(owner)
    upload = await receive_points(request, services.store, services.settings, format)
    record = await services.catalog.create(upload, owner, kind="points")
    response.headers["Location"] = f"/v1/points/{record.id}"
    return describe_points(services.fleet, services.store, record)


@router.get("", operation_id="listPointSets", response_model=PointSetList, summary="List point sets")
async def list_point_sets(services: ServicesDep, owner: OwnerDep) -> PointSetList:
    """The caller's stored point sets, oldest first."""
    owned = services.catalog.owned(owner, kind="points")
    return PointSetList(point_sets=[describe_points(services.fleet, services.store, p) for p in owned])


@router.get(
    "/{points_id}",
    operation_id="getPointSet",
    response_model=PointSetOut,
    summary="Describe a point set",
    responses=problems(404),
)
async def get_point_set(points_id: str, services: ServicesDep, owner: OwnerDep) -> PointSetOut:
    """Size, dimension, dtype, and where the point set is resident."""
    record = services.catalog.get(checked_points_id(points_id), owner, kind="points")
    return describe_points(services.fleet, services.store, record)


@router.delete(
    "/{points_id}",
    operation_id="deletePointSet",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a point set",
    responses=problems(404),
)
async def delete_point_set(points_id: str, services: ServicesDep, owner: OwnerDep) -> Response:
    """Delete the point set (and the trees and models kept with it), cancel its queued jobs."""
    await services.catalog.delete(checked_points_id(points_id), owner, kind="points")
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/{points_id}/jobs",
    operation_id="submitPointsJob",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    summary="Submit a job on a point set",
    responses={**SUBMITTED, **problems(400)},
)
async def submit_points_job(
    request: Request,
    points_id: str,
    job: PointsJobRequest,
    wait: Annotated[float, WAIT_QUERY] = 0.0,
    cache: Annotated[bool, CACHE_QUERY] = False,
    accept: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Response:
    """Queue ``emst`` (``min_samples``), ``hdbscan`` (``min_cluster_size``, ``min_samples``,
    ``cluster_selection_method``, ``cluster_selection_epsilon``) or ``single_linkage``. A clustering
    of a ``min_samples`` whose tree an earlier job computed reuses it (``reused_tree`` in the result);
    a tree of another ``min_samples`` reuses the spatial index an earlier job built (``reused_index``)."""
    services, owner = services_of(request), owner_of(request.scope)
    params = task_params(job.task, job.params)
    return await submit_response(
        services, points_id, wait, owner, job.task, params, cache, checked_points_id, accept=accept
    )
