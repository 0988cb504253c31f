"""``/v1/graphs``: upload, list, describe and delete graphs; submit MST jobs on them."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response, status

from ..errors import InvalidParamsError
from ..models import (
    GraphFormat,
    GraphList,
    GraphOut,
    JobOut,
    JobRequest,
    Objective,
    WeightsFormat,
)
from ..timing import Steps
from .auth import owner_of
from .deps import CatalogDep, OwnerDep, ServicesDep, checked_graph_id, services_of
from .descriptions import describe_graph
from .docs import BINARY_SCHEMA, CACHE_QUERY, SUBMITTED, WAIT_QUERY, graph_upload_body, problems
from .submissions import submit_response, task_params
from .uploads import check_weights_header, receive_graph, receive_weights

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
    responses=problems(400, 413, 415, 422, 429, 503, 507),
)
async def create_graph(
    request: Request,
    response: Response,
    services: ServicesDep,
    owner: OwnerDep,
    format: Annotated[
        GraphFormat | None,
        Query(description="Format of a binary body (application/octet-stream); default npz."),
    ] = None,
    shards: Annotated[
        int | None,
        Query(
            ge=1,
            le=64,
            description="Split the graph's edges across this many workers (at most the number of "
            "workers; 1: never shard). Default: shard only a graph that does not fit one worker, or "
            "has more edges than MST_SHARD_EDGES_ABOVE.",
        ),
    ] = None,
) -> GraphOut:
    """Store a graph and make it resident on a worker. JSON columns or a binary file; 201 with its record."""
    services.catalog.admit(owner)  # a key at its quota is refused before its body is read
    steps = Steps()
    upload = await receive_graph(request, services.store, services.settings, format)
    steps.lap("receive")
    record = await services.catalog.create(upload, owner, shards=shards, steps=steps)
    response.headers["Location"] = f"/v1/graphs/{record.id}"
    response.headers["Server-Timing"] = steps.header()
    return describe_graph(services.fleet, services.store, record)


@router.get("", operation_id="listGraphs", response_model=GraphList, summary="List graphs")
async def list_graphs(services: ServicesDep, owner: OwnerDep) -> GraphList:
    """The caller's stored graphs (those of its API key), oldest first."""
    catalog = services.catalog
    return GraphList(graphs=[describe_graph(services.fleet, services.store, g) for g in catalog.owned(owner)])


@router.get(
    "/{graph_id}",
    operation_id="getGraph",
    response_model=GraphOut,
    summary="Describe a graph",
    responses=problems(404),
)
async def get_graph(graph_id: str, services: ServicesDep, owner: OwnerDep) -> GraphOut:
    """Sizes, weight dtype, and where the graph is resident (worker, device, bytes on the device)."""
    return describe_graph(
        services.fleet, services.store, services.catalog.get(checked_graph_id(graph_id), owner)
    )


@router.delete(
    "/{graph_id}",
    operation_id="deleteGraph",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a graph",
    responses=problems(404),
)
async def delete_graph(graph_id: str, catalog: CatalogDep, owner: OwnerDep) -> Response:
    """Delete the graph, free its device memory, cancel its queued jobs; finished jobs keep their results."""
    await catalog.delete(checked_graph_id(graph_id), owner)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/{graph_id}/mst",
    operation_id="submitMstJob",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    summary="Submit an MST job",
    responses=SUBMITTED,
)
async def submit_job(
    request: Request,
    graph_id: str,
    wait: Annotated[float, WAIT_QUERY] = 0.0,
    objective: Annotated[
        Objective, Query(description="'min' (default) or 'max': the maximum spanning forest.")
    ] = "min",
    cache: Annotated[bool, CACHE_QUERY] = False,
    accept: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Response:
    """Queue a spanning-forest job: 202 with the job, or 200 with the job finished within ?wait
    (with its result instead where Accept asks for a binary one and the job succeeded)."""
    params = {} if objective == "min" else {"objective": objective}
    services, owner = services_of(request), owner_of(request.scope)
    return await submit_response(services, graph_id, wait, owner, params=params, cache=cache, accept=accept)


@router.post(
    "/{graph_id}/jobs",
    operation_id="submitJob",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    summary="Submit a job of any task",
    responses={**SUBMITTED, **problems(400)},  # 400: a body that is not JSON
)
async def submit_task(
    request: Request,
    graph_id: str,
    job: JobRequest,
    wait: Annotated[float, WAIT_QUERY] = 0.0,
    cache: Annotated[bool, CACHE_QUERY] = False,
    accept: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Response:
    """Queue a job on the graph: a forest (``mst``: min or max, optionally without some edges),
    ``components``, ``clusters`` (k or a threshold) or the single-linkage ``dendrogram``."""
    services, owner = services_of(request), owner_of(request.scope)
    params = task_params(job.task, job.params)
    if "exclude" in params:
        num_edges = services.catalog.get(checked_graph_id(graph_id), owner).num_edges
        bad = next((i for i, e in enumerate(params["exclude"]) if not 0 <= e < num_edges), None)
        if bad is not None:
            raise InvalidParamsError(
                f"'params.exclude[{bad}]' = {params['exclude'][bad]} is not an edge id of graph {graph_id} "
                f"(it has {num_edges} edges).",
                field="params.exclude",
                index=bad,
            )
    return await submit_response(services, graph_id, wait, owner, job.task, params, cache, accept=accept)


def _weights_body(description: str, json_schema: str) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{json_schema}"}},
                "application/octet-stream": {"schema": BINARY_SCHEMA, "description": description},
            },
        }
    }


async def _update_weights(
    request: Request, response: Response, graph_id: str, fmt: str | None, partial: bool
) -> GraphOut:
    services, owner = services_of(request), owner_of(request.scope)
    record = services.catalog.get(checked_graph_id(graph_id), owner)
    steps = Steps()
    upload = await receive_weights(request, services.store, services.settings, fmt, partial)
    check_weights_header(upload, record.num_edges)
    steps.lap("receive")
    updated = await services.catalog.update_weights(graph_id, owner, upload, partial, steps)
    response.headers["Server-Timing"] = steps.header()
    return describe_graph(services.fleet, services.store, updated)


@router.put(
    "/{graph_id}/weights",
    operation_id="replaceWeights",
    response_model=GraphOut,
    summary="Replace every weight",
    openapi_extra=_weights_body(
        "An .npy of one weight per edge (?format=npy, default; any supported dtype, which becomes the "
        "graph's), or an .npz with a 'weight' array (?format=npz).",
        "WeightsUpload",
    ),
    responses=problems(400, 404, 409, 413, 415, 422, 503),
)
async def replace_weights(
    request: Request,
    response: Response,
    graph_id: str,
    format: Annotated[
        WeightsFormat | None, Query(description="Format of a binary body; default npy.")
    ] = None,
) -> GraphOut:
    """New weights for every edge; the topology stays resident and only what depends on the order is
    rebuilt. Jobs submitted before this request compute on the old weights, jobs submitted after it
    returns on the new ones (``weights_version``)."""
    return await _update_weights(request, response, graph_id, format, partial=False)


@router.patch(
    "/{graph_id}/weights",
    operation_id="updateWeights",
    response_model=GraphOut,
    summary="Change some weights",
    openapi_extra=_weights_body("An .npz of arrays 'edge_ids' and 'weights' (?format=npz).", "WeightsPatch"),
    responses=problems(400, 404, 409, 413, 415, 422, 503),
)
async def update_weights(
    request: Request,
    response: Response,
    graph_id: str,
    format: Annotated[WeightsFormat | None, Query(description="Format of a binary body: npz.")] = None,
) -> GraphOut:
    """New weights for the given edges (exact in the graph's weight dtype); as for PUT otherwise."""
    return await _update_weights(request, response, graph_id, format, partial=True)
