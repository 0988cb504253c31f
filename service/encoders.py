"""Encoders of records and results: job records as JSON models, forests as JSON or as an ``.npz`` file.

The binary result is the worker's own ``.npz`` file from the spool (arrays
``edge_ids`` int64 and ``weights`` in the graph's dtype), sent as it is in
large chunks: no decoding, no copy through Python objects. The summary rides
along in ``X-MST-*`` headers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from starlette.background import BackgroundTask
from starlette.responses import FileResponse, Response

from .models import JobError, JobOut, JobSummary, timestamp
from .store import JobRecord

NPZ_MEDIA_TYPE = "application/octet-stream"
JSON_MEDIA_TYPE = "application/json"


def job_out(job: JobRecord) -> JobOut:
    error = None
    if job.error_type is not None:
        error = JobError(type=job.error_type, message=job.error_message or "")
    result = None
    if job.status == "succeeded":
        result = JobSummary(
            num_edges=job.num_edges or 0,
            total_weight=job.total_weight if job.total_weight is not None else 0,
            num_components=job.num_components or 0,
            compute_ms=job.compute_ms or 0.0,
        )
    return JobOut(
        id=job.id,
        graph_id=job.graph_id,
        status=job.status,
        created_at=timestamp(job.created_at),  # type: ignore[arg-type]
        started_at=timestamp(job.started_at),
        finished_at=timestamp(job.finished_at),
        error=error,
        result=result,
    )


def job_response(job: JobRecord, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A job record as JSON, serialized once by pydantic (the route's ``response_model`` documents it)."""
    return Response(job_out(job).model_dump_json(), status_code, headers, JSON_MEDIA_TYPE)


def wants_binary(accept: str | None) -> bool:
    """True when the Accept header prefers application/octet-stream to JSON."""
    if not accept:
        return False
    best_binary, best_json = -1.0, -1.0
    for position, part in enumerate(accept.split(",")):
        fields = [f.strip() for f in part.split(";")]
        kind = fields[0].lower()
        q = 1.0
        for param in fields[1:]:
            if param.startswith("q="):
                try:
                    q = float(param[2:])
                except ValueError:
                    q = 0.0
        score = q - position * 1e-6  # earlier wins a tie
        if kind == NPZ_MEDIA_TYPE and q > 0:
            best_binary = max(best_binary, score)
        elif kind in (JSON_MEDIA_TYPE, "application/*", "*/*") and q > 0:
            best_json = max(best_json, score)
    return best_binary > best_json


def summary_headers(summary: dict[str, Any]) -> dict[str, str]:
    return {
        "X-MST-Num-Edges": str(summary["num_edges"]),
        "X-MST-Total-Weight": json.dumps(summary["total_weight"]),
        "X-MST-Num-Components": str(summary["num_components"]),
        "X-MST-Compute-Ms": repr(float(summary["compute_ms"])),
    }


class _NpzResponse(FileResponse):
    chunk_size = 4 * 1024 * 1024  # loopback and LAN go faster with large writes


#: results up to this size are answered from memory: fewer thread hops than a streamed file
SMALL_RESULT_BYTES = 1 << 20


def npz_response(path: Path, summary: dict[str, Any], filename: str, delete_after: bool = False) -> Response:
    headers = {**summary_headers(summary), "Content-Disposition": f'attachment; filename="{filename}"'}
    if path.stat().st_size <= SMALL_RESULT_BYTES:
        body = path.read_bytes()
        if delete_after:
            path.unlink(missing_ok=True)
        return Response(body, media_type=NPZ_MEDIA_TYPE, headers=headers)
    return _NpzResponse(
        path,
        media_type=NPZ_MEDIA_TYPE,
        headers=headers,
        background=BackgroundTask(path.unlink, missing_ok=True) if delete_after else None,
    )


def json_result(path: Path, summary: dict[str, Any], **ids: str) -> Response:
    with np.load(path, allow_pickle=False) as npz:
        edge_ids = npz["edge_ids"].tolist()
        weights = npz["weights"].tolist()
    body: dict[str, Any] = {
        **ids,
        "num_edges": summary["num_edges"],
        "total_weight": summary["total_weight"],
        "num_components": summary["num_components"],
        "compute_ms": summary["compute_ms"],
        "edge_ids": edge_ids,
        "weights": weights,
    }
    return Response(json.dumps(body, separators=(",", ":")), media_type=JSON_MEDIA_TYPE)


def job_summary(job: JobRecord) -> dict[str, Any]:
    return {
        "num_edges": job.num_edges,
        "total_weight": job.total_weight,
        "num_components": job.num_components,
        "compute_ms": job.compute_ms,
    }
