"""Pieces of OpenAPI documentation shared by the routers."""

from __future__ import annotations

from typing import Any

from ..models import Problem

BINARY_SCHEMA: dict[str, Any] = {"type": "string", "format": "binary"}

_DESCRIPTIONS = {
    400: "Malformed request (e.g. invalid JSON).",
    404: "No such resource.",
    409: "The resource is not in a state that allows this.",
    413: "Upload over a configured limit (bytes or edges), or over the API key's device-bytes quota.",
    415: "Unsupported Content-Type.",
    422: "Invalid input; the problem names the field and the edge index.",
    429: "A quota of the API key is used up (the problem names it, its limit and the use); see Retry-After.",
    503: "No worker is ready, the worker was lost, or the job queues are full; retry (see Retry-After).",
}


def graph_upload_body(binary_description: str) -> dict[str, Any]:
    """``openapi_extra=`` of routes that take a graph: JSON columns or a binary file."""
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/GraphUpload"}},
                "application/octet-stream": {"schema": BINARY_SCHEMA, "description": binary_description},
            },
        }
    }


def problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for problem+json errors (the app's OpenAPI hook fixes their media type)."""
    return {code: {"model": Problem, "description": _DESCRIPTIONS[code]} for code in codes}
