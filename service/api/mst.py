"""``/v1/mst``: one-shot computation of an uploaded graph, nothing stored."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response

from ..models import GraphFormat, ResultOut
from .deps import OwnerDep, ServicesDep
from .docs import RESULT_CONTENT, graph_upload_body, problems
from .encoders import arrow_result, json_result, negotiate, npz_arrays_response, npz_response
from .uploads import receive_graph

router = APIRouter(prefix="/v1/mst", tags=["mst"])

_BODY = graph_upload_body("A graph file, see ?format=.")


@router.post(
    "",
    operation_id="computeMst",
    summary="One-shot MST",
    response_model=None,
    openapi_extra=_BODY,
    responses={
        200: {
            "description": "The forest, as for GET /v1/jobs/{job_id}/result (JSON, npz or Arrow IPC "
            "by Accept).",
            "content": RESULT_CONTENT,
            "model": ResultOut,
        },
        **problems(400, 406, 413, 415, 422, 429, 503, 507),
    },
)
async def compute_mst(
    request: Request,
    services: ServicesDep,
    owner: OwnerDep,
    format: Annotated[GraphFormat | None, Query(description="Format of a binary body; default npz.")] = None,
    accept: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Response:
    """Upload, compute and answer with the forest in one request (the upload is not stored)."""
    representation = negotiate(accept)  # 406 before the upload is read
    token = services.oneshots.admit(owner)  # a full queue is refused before the body is read
    try:
        # read once by the worker and removed: no fsync (a crash loses nothing the client was told of)
        upload = await receive_graph(request, services.store, services.settings, format, durable=False)
        try:
            summary, result = await services.oneshots.compute(upload.path, upload.format)
        finally:
            upload.discard()
    finally:
        services.oneshots.release(token)
    return await one_shot_body(representation, result, summary)


async def one_shot_body(
    representation: str, result: Path | dict[str, Any], summary: dict[str, Any]
) -> Response:
    """A one-shot forest in a representation :func:`negotiate` chose, from its arrays (a small one,
    sent back by the worker) or from its file, which is then removed."""
    if isinstance(result, dict):
        if representation == "npz":
            return npz_arrays_response(result, summary, filename="forest.npz")
        if representation == "arrow":
            return await arrow_result(result, summary, filename="forest.arrows")
        return json_result(result, summary)
    if representation == "npz":
        return await npz_response(result, summary, filename="forest.npz", delete_after=True)
    try:
        if representation == "arrow":
            return await arrow_result(result, summary, filename="forest.arrows")
        return json_result(result, summary)
    finally:
        result.unlink(missing_ok=True)
