"""Encoders of records and results: job records as JSON models, forests as JSON, an ``.npz`` file or
an Arrow IPC stream, negotiated by ``Accept`` (:func:`negotiate`; 406 when none is acceptable).

The binary result is the worker's own ``.npz`` file from the spool (arrays
``edge_ids`` int64 and ``weights`` in the graph's dtype), sent as it is: a
small file is read whole on the event loop (one ``read``), a large one is
memory-mapped in a thread (pages populated in one go, so the kernel copies
straight from the page cache into the socket), and either is handed to the
server in large pieces: no thread per piece. The summary rides along in
``X-MST-*`` headers. A request with a ``Range`` header gets a
:class:`~starlette.responses.FileResponse` (partial content) as before.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from starlette.background import BackgroundTask
from starlette.responses import FileResponse, Response
from starlette.types import Receive, Scope, Send

from gpu_core.formats import pyarrow_available

from ..errors import NotAcceptableError
from ..models import JobError, JobOut, JobSummary, timestamp
from ..storage.npzio import map_file, read_npz, write_npz
from ..storage.records import JobRecord
from .media_types import ARROW_STREAM_MEDIA_TYPE, JSON_MEDIA_TYPE, NPZ_MEDIA_TYPE


def job_out(job: JobRecord) -> JobOut:
    error = None
    if job.error_type is not None:
        error = JobError(type=job.error_type, message=job.error_message or "")
    result = None
    if job.status == "succeeded":
        result = JobSummary(
            num_edges=job.num_edges or 0,
            total_weight=job.total_weight if job.total_weight is not None or job.task != "mst" else 0,
            num_components=job.num_components or 0,
            compute_ms=job.compute_ms or 0.0,
            cached=job.cached,
            coalesced=job.coalesced,
            reused_tree=job.reused_tree,
            reused_index=job.reused_index,
        )
    return JobOut(
        id=job.id,
        graph_id=job.graph_id,
        task=job.task,  # type: ignore[arg-type]
        params=json.loads(job.params),
        weights_version=job.weights_version,
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


#: result representations by name, and their media types (JSON first: the default)
RESULT_MEDIA_TYPES = {"json": JSON_MEDIA_TYPE, "npz": NPZ_MEDIA_TYPE, "arrow": ARROW_STREAM_MEDIA_TYPE}


def _accept_ranges(accept: str) -> list[tuple[str, str, float, int]]:
    """``(type, subtype, q, position)`` of each media range of an Accept header."""
    ranges = []
    for position, part in enumerate(accept.split(",")):
        fields = [f.strip() for f in part.split(";")]
        kind = fields[0].lower()
        if not kind:
            continue
        main, _, sub = kind.partition("/")
        q = 1.0
        for param in fields[1:]:
            if param.lower().startswith("q="):
                try:
                    q = min(max(float(param[2:]), 0.0), 1.0)
                except ValueError:
                    q = 0.0
        ranges.append((main, sub or "*", q, position))
    return ranges


def _specificity(r_main: str, r_sub: str, main: str, sub: str) -> int:
    """2 for ``type/subtype``, 1 for ``type/*``, 0 for ``*/*``; -1 when the range does not match."""
    if (r_main, r_sub) == (main, sub):
        return 2
    if r_main == main and r_sub == "*":
        return 1
    return 0 if (r_main, r_sub) == ("*", "*") else -1


def negotiate(accept: str | None) -> str:
    """The result representation an Accept header asks for: ``"json"``, ``"npz"`` or ``"arrow"``.

    Each representation takes the quality of the most specific media range that matches it
    (RFC 9110: ``type/subtype`` over ``type/*`` over ``*/*``); the highest quality wins, then
    the range named first, then JSON before npz before Arrow. No header: JSON. Arrow needs
    pyarrow in the API process. Nothing acceptable: :class:`NotAcceptableError` (406).
    """
    if accept is None or not accept.strip():
        return "json"
    ranges = _accept_ranges(accept)
    best: tuple[float, int, int, str] | None = None
    arrow_wanted = False
    for rank, (name, media) in enumerate(RESULT_MEDIA_TYPES.items()):
        main, sub = media.split("/")
        match: tuple[int, float, int] | None = None
        for r_main, r_sub, q, position in ranges:
            specificity = _specificity(r_main, r_sub, main, sub)
            if specificity < 0:
                continue
            if match is None or specificity > match[0]:
                match = (specificity, q, position)
        if match is None or match[1] <= 0:
            continue
        key = (match[1], -match[2], -rank, name)
        if best is not None and key[:3] <= best[:3]:
            continue
        if name == "arrow" and not pyarrow_available():  # asked only when Arrow would be chosen
            arrow_wanted = arrow_wanted or match[0] == 2
            continue
        best = key
    if best is None:
        offered = [m for n, m in RESULT_MEDIA_TYPES.items() if n != "arrow" or pyarrow_available()]
        missing = (
            f" {ARROW_STREAM_MEDIA_TYPE} needs pyarrow, which this server lacks (the 'arrow' extra)."
            if arrow_wanted
            else ""
        )
        raise NotAcceptableError(
            f"no representation of the result is acceptable for Accept: {accept!r}; this route "
            f"offers {', '.join(offered)}.{missing}",
            field="accept",
        )
    return best[3]


def summary_headers(summary: dict[str, Any]) -> dict[str, str]:
    headers = {
        "X-MST-Num-Edges": str(summary["num_edges"]),
        "X-MST-Total-Weight": json.dumps(summary["total_weight"]),
        "X-MST-Num-Components": str(summary["num_components"]),
        "X-MST-Compute-Ms": repr(float(summary["compute_ms"])),
    }
    if summary.get("cached"):
        headers["X-MST-Cached"] = "true"
    if summary.get("coalesced"):
        headers["X-MST-Coalesced"] = "true"
    return headers


class _NpzResponse(FileResponse):
    chunk_size = 4 * 1024 * 1024  # loopback and LAN go faster with large writes


class _MappedResponse(Response):
    """A spool file's bytes, or a map of a large one, sent in large pieces (backpressure between them)."""

    chunk_size = 4 * 1024 * 1024

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        body = self.body
        size = len(body)
        for start in range(0, size, self.chunk_size):
            end = min(start + self.chunk_size, size)
            await send({"type": "http.response.body", "body": body[start:end], "more_body": end < size})
        if not size:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        if self.background is not None:
            await self.background()


#: results up to this size are read whole on the event loop, larger ones mapped in a thread (page
#: cache misses). Below a few MB the copy of a read costs the API process less than a map's set-up
#: and tear-down; past it the map wins.
SMALL_RESULT_BYTES = 4 << 20


def _map(path: Path) -> memoryview | bytes:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        return memoryview(map_file(f.fileno(), size)) if size else b""


def _read_small(path: Path) -> bytes | None:
    """The whole file when it has at most :data:`SMALL_RESULT_BYTES` (None when larger)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        if size > SMALL_RESULT_BYTES:
            return None
        data = os.read(fd, size)
        while len(data) < size:  # a regular file is read whole by one read(); this is the odd short one
            more = os.read(fd, size - len(data))
            if not more:
                break
            data += more
        return data
    finally:
        os.close(fd)


async def npz_response(
    path: Path,
    summary: dict[str, Any],
    filename: str,
    delete_after: bool = False,
    byte_range: str | None = None,
) -> Response:
    headers = {**summary_headers(summary), "Content-Disposition": f'attachment; filename="{filename}"'}
    cleanup = BackgroundTask(path.unlink, missing_ok=True) if delete_after else None
    if byte_range is not None:
        return _NpzResponse(path, media_type=NPZ_MEDIA_TYPE, headers=headers, background=cleanup)
    body: memoryview | bytes | None = _read_small(path)
    if body is None:
        body = await asyncio.to_thread(_map, path)
    if delete_after:
        path.unlink(missing_ok=True)  # the bytes read, or the map, keep the file's content
    return _MappedResponse(body, media_type=NPZ_MEDIA_TYPE, headers=headers)


def npz_arrays_response(arrays: dict[str, Any], summary: dict[str, Any], filename: str) -> Response:
    """A result held in memory (a one-shot's forest the worker sent back) as the ``.npz`` its
    result file would have been (the same writer), with the same headers."""
    buffer = io.BytesIO()
    write_npz(buffer, arrays)
    headers = {**summary_headers(summary), "Content-Disposition": f'attachment; filename="{filename}"'}
    return Response(buffer.getbuffer(), media_type=NPZ_MEDIA_TYPE, headers=headers)


async def result_response(
    representation: str, job: JobRecord, path: Path, byte_range: str | None = None
) -> Response:
    """A succeeded job's result as ``representation`` (:func:`negotiate`): what ``GET
    /v1/jobs/{id}/result`` answers, and a submission's answer when its Accept asks for it."""
    summary = job_summary(job)
    if representation == "npz":
        return await npz_response(path, summary, filename=f"{job.id}.npz", byte_range=byte_range)
    if representation == "arrow":
        return await arrow_result(path, summary, filename=f"{job.id}.arrows")
    return json_result(path, summary, job_id=job.id, graph_id=job.graph_id)


#: the arrays of each task's result file, and the JSON member each becomes
RESULT_ARRAYS: dict[str, tuple[str, ...]] = {
    "mst": ("edge_ids", "weights"),
    "components": ("labels",),
    "clusters": ("labels",),
    "dendrogram": ("linkage",),
    "emst": ("src", "dst", "weights"),
    "hdbscan": ("labels", "probabilities"),
    "single_linkage": ("linkage",),
}


#: arrays of a task's result that only some jobs have (one per point: not an Arrow column of the tree)
OPTIONAL_ARRAYS: dict[str, tuple[str, ...]] = {"emst": ("core_distances",)}


def json_result(path: Path | dict[str, Any], summary: dict[str, Any], **ids: str) -> Response:
    """A result as JSON: the summary, then the arrays of its task, from its file or from ``path``
    itself when that is the arrays (a one-shot's forest the worker sent back)."""
    task = str(summary.get("task", "mst"))
    arrays: dict[str, Any] = {}
    names = RESULT_ARRAYS[task] + OPTIONAL_ARRAYS.get(task, ())
    if isinstance(path, dict):
        arrays = {name: np.asarray(path[name]).tolist() for name in names if name in path}
    else:
        with np.load(path, allow_pickle=False) as npz:
            for name in names:
                if name in npz.files:
                    arrays[name] = npz[name].tolist()
    body: dict[str, Any] = {
        **ids,
        "num_edges": summary["num_edges"],
        "total_weight": summary["total_weight"],
        "num_components": summary["num_components"],
        "compute_ms": summary["compute_ms"],
    }
    if task != "mst":
        body["task"] = task
    if summary.get("cached"):
        body["cached"] = True
    if summary.get("coalesced"):
        body["coalesced"] = True
    for flag in ("reused_tree", "reused_index"):
        if summary.get(flag) is not None:
            body[flag] = summary[flag]
    body.update(arrays)
    return Response(json.dumps(body, separators=(",", ":")), media_type=JSON_MEDIA_TYPE)


def _arrow_column(pa: Any, values: np.ndarray[Any, Any]) -> Any:
    """A 1-D array as it is; a 2-D one (a dendrogram's linkage) as fixed-size lists, one per row."""
    if values.ndim == 2:
        flat = pa.array(np.ascontiguousarray(values).reshape(-1))
        return pa.FixedSizeListArray.from_arrays(flat, values.shape[1])
    return pa.array(values)


def _arrow_stream(path: Path | dict[str, Any], summary: dict[str, Any]) -> bytes:
    import pyarrow as pa
    import pyarrow.ipc

    names = RESULT_ARRAYS[str(summary.get("task", "mst"))]
    arrays = path if isinstance(path, dict) else read_npz(path, names)
    if arrays is None:
        assert isinstance(path, Path)
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in names}
    metadata = {key: json.dumps(summary[key]) for key in ("num_edges", "total_weight", "num_components")}
    metadata["compute_ms"] = repr(float(summary["compute_ms"]))
    metadata["task"] = str(summary.get("task", "mst"))
    if summary.get("cached"):
        metadata["cached"] = "true"
    if summary.get("coalesced"):
        metadata["coalesced"] = "true"
    table = pa.table({name: _arrow_column(pa, arrays[name]) for name in names}, metadata=metadata)
    sink = pa.BufferOutputStream()
    with pyarrow.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


#: results with fewer elements than this are encoded as Arrow on the event loop, larger in a thread
SMALL_ARROW_ELEMENTS = 1 << 16


async def arrow_result(path: Path | dict[str, Any], summary: dict[str, Any], filename: str) -> Response:
    """A result as an Arrow IPC stream: the arrays of its task as columns (a forest: ``edge_ids``
    int64 and ``weights`` in the graph's dtype; labels; a linkage as rows of 4), the summary in
    the schema metadata and in ``X-MST-*`` headers. ``path``: its file, or its arrays."""
    if isinstance(path, dict) and sum(np.size(a) for a in path.values()) < SMALL_ARROW_ELEMENTS:
        body = _arrow_stream(path, summary)
    else:
        body = await asyncio.to_thread(_arrow_stream, path, summary)
    headers = {**summary_headers(summary), "Content-Disposition": f'attachment; filename="{filename}"'}
    return Response(body, media_type=ARROW_STREAM_MEDIA_TYPE, headers=headers)


def job_summary(job: JobRecord) -> dict[str, Any]:
    return {
        "num_edges": job.num_edges,
        "total_weight": job.total_weight,
        "num_components": job.num_components,
        "compute_ms": job.compute_ms,
        "task": job.task,
        "cached": job.cached,
        "coalesced": job.coalesced,
        "reused_tree": job.reused_tree,
        "reused_index": job.reused_index,
    }
