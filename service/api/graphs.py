"""``/v1/graphs``: upload, list, describe and delete graphs; submit MST jobs on them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status

from ..encoders import job_response
from ..models import GraphFormat, GraphList, GraphOut, JobOut
from ..uploads import receive_graph
from .deps import CatalogDep, Services, ServicesDep, services_of
from .docs import graph_upload_body, problems

router = APIRouter(prefix="/v1/graphs", tags=["graphs"])

_UPLOAD_BODY = graph_upload_body(
    "A graph file in the format named by ?format= (default npz: arrays src, dst, "
    "weight and an optional scalar num_vertices)."
)


@router.post(
    "",
    operation_id="createGraph",
    status_code=status.HTTP_201_CREATED,
    response_model=GraphOut,
    summary="Upload a graph",
    openapi_extra=_UPLOAD_BODY,
    responses=problems(400, 413, 415, 422, 503),
)
async def create_graph(
    request: Request,
    response: Response,
    services: ServicesDep,
    format: Annotated[
        GraphFormat | None,
        Query(description="Format of a binary body (application/octet-stream); default npz."),
    ] = None,
) -> GraphOut:
    """Store a graph and make it resident on a worker. JSON columns or a binary file; 201 with its record."""
    upload = await receive_graph(request, services.store, services.settings, format)
    record = await services.catalog.create(upload)
    response.headers["Location"] = f"/v1/graphs/{record.id}"
    return services.catalog.describe(record)


@router.get("", operation_id="listGraphs", response_model=GraphList, summary="List graphs")
async def list_graphs(services: ServicesDep) -> GraphList:
    """Every stored graph, oldest first."""
    return GraphList(graphs=[services.catalog.describe(g) for g in services.store.list_graphs()])


@router.get(
    "/{graph_id}",
    operation_id="getGraph",
    response_model=GraphOut,
    summary="Describe a graph",
    responses=problems(404),
)
async def get_graph(graph_id: str, catalog: CatalogDep) -> GraphOut:
    """Sizes, weight dtype, and where the graph is resident (worker, device, bytes on the device)."""
    return catalog.describe(catalog.get(graph_id))


@router.delete(
    "/{graph_id}",
    operation_id="deleteGraph",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a graph",
    responses=problems(404),
)
async def delete_graph(graph_id: str, catalog: CatalogDep) -> Response:
    """Delete the graph, free its device memory, cancel its queued jobs; finished jobs keep their results."""
    catalog.delete(graph_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/{graph_id}/mst",
    operation_id="submitMstJob",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    summary="Submit an MST job",
    responses={
        200: {"model": JobOut, "description": "The job finished within ?wait= seconds."},
        **problems(404, 422, 503),
    },
)
async def submit_job(
    request: Request,
    graph_id: str,
    wait: Annotated[
        float,
        Query(
            ge=0,
            description="Block up to this many seconds (capped by MST_MAX_WAIT_S) for the job to finish.",
        ),
    ] = 0.0,
) -> Response:
    """Queue a minimum-spanning-forest job: 202 with the job, or 200 with the job finished within ?wait."""
    return await submit_response(services_of(request), graph_id, wait)


async def submit_response(services: Services, graph_id: str, wait: float) -> Response:
    """Submit a job and wait up to ``wait`` seconds for it (also served by :mod:`service.fastpath`)."""
    job = services.jobs.submit(graph_id, publish=wait <= 0)
    if wait > 0:
        job = await services.jobs.wait(job.id, min(wait, services.settings.max_wait_s), current=job)
        if not job.finished:
            job = services.jobs.publish(job.id)  # its id goes out with this 202
    code = status.HTTP_200_OK if job.finished else status.HTTP_202_ACCEPTED
    return job_response(job, code, {"Location": f"/v1/jobs/{job.id}"})
