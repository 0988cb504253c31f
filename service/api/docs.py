"""Pieces of OpenAPI documentation shared by the routers."""

from __future__ import annotations

from typing import Any

from fastapi import Query

from ..models import JobOut, Problem
from .media_types import ARROW_STREAM_MEDIA_TYPE, PARQUET_MEDIA_TYPE

BINARY_SCHEMA: dict[str, Any] = {"type": "string", "format": "binary"}

_DESCRIPTIONS = {
    400: "Malformed request (e.g. invalid JSON).",
    404: "No such resource.",
    406: "No representation the route offers is acceptable (the problem names those it offers).",
    409: "The resource is not in a state that allows this.",
    410: "The result was lost and its graph deleted since: it cannot be computed again.",
    413: "Upload over a configured limit (bytes or edges), or over the API key's device-bytes quota,"
    " or larger than a worker's memory.",
    415: "Unsupported Content-Type, or an Arrow or Parquet body where the server lacks pyarrow.",
    422: "Invalid input; the problem names the field and the edge index.",
    429: "A quota of the API key is used up (the problem names it, its limit and the use); see Retry-After.",
    503: "No worker is ready, the worker was lost, or the job queues are full; retry (see Retry-After).",
    507: "No worker has room for the graph now, even after evicting idle graphs (see needed_bytes).",
}


def graph_upload_body(binary_description: str) -> dict[str, Any]:
    """``openapi_extra=`` of routes that take a graph: JSON columns or a binary file."""
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/GraphUpload"}},
                "application/octet-stream": {"schema": BINARY_SCHEMA, "description": binary_description},
                ARROW_STREAM_MEDIA_TYPE: {
                    "schema": BINARY_SCHEMA,
                    "description": "An Arrow IPC stream with columns src, dst, weight (as ?format=arrow).",
                },
                PARQUET_MEDIA_TYPE: {
                    "schema": BINARY_SCHEMA,
                    "description": "Parquet with columns src, dst, weight (as ?format=parquet).",
                },
            },
        }
    }


RESULT_DESCRIPTION = (
    "The result, by Accept: JSON by default; an .npz file for application/octet-stream (a forest: "
    "arrays edge_ids int64 and weights in the graph's dtype; other tasks: labels, or a linkage); an "
    f"Arrow IPC stream of the same arrays as columns for {ARROW_STREAM_MEDIA_TYPE} where the server "
    "has pyarrow (the summary in its schema metadata). Binary results carry the summary in X-MST-* "
    "headers."
)
RESULT_CONTENT: dict[str, Any] = {
    "application/json": {"schema": {"$ref": "#/components/schemas/ResultOut"}},
    "application/octet-stream": {"schema": BINARY_SCHEMA},
    ARROW_STREAM_MEDIA_TYPE: {"schema": BINARY_SCHEMA},
}


def problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for problem+json errors (the app's OpenAPI hook fixes their media type)."""
    return {code: {"model": Problem, "description": _DESCRIPTIONS[code]} for code in codes}


#: ``?wait=`` of the job submissions
WAIT_QUERY = Query(
    ge=0,
    allow_inf_nan=False,
    description="Block up to this many seconds (capped by MST_MAX_WAIT_S) for the job to finish.",
)
#: ``?cache=`` of the job submissions
CACHE_QUERY = Query(
    description="true: answer from the stored result of an identical earlier job on the same weights when "
    "there is one (the job says cached: true, with that computation's compute_ms). Default false: compute.",
)
#: ``responses=`` of the job submissions
SUBMITTED: dict[int | str, dict[str, Any]] = {
    200: {
        "model": JobOut,
        "description": (
            "The job finished within ?wait= seconds (or came from the cache). Where the request's "
            "Accept asks for a binary result (application/octet-stream, or "
            f"{ARROW_STREAM_MEDIA_TYPE}, preferred to JSON) and the job succeeded, the answer is its "
            "result instead, as GET /v1/jobs/{id}/result gives it (its summary in X-MST-* headers), "
            "with Location naming the job: one round trip for a job and its result. Otherwise, "
            "whatever the Accept, the job."
        ),
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/JobOut"}},
            "application/octet-stream": {"schema": BINARY_SCHEMA},
            ARROW_STREAM_MEDIA_TYPE: {"schema": BINARY_SCHEMA},
        },
    },
    **problems(404, 422, 429, 503),
}
