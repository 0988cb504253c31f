"""Receiving graph uploads: binary bodies streamed to the spool, JSON columns turned into an npz there.

Both paths end in an :class:`Upload`: a complete file in the spool's tmp
folder plus the format a worker reads it with. Limits are checked before and
while reading (``Content-Length`` first, then the bytes actually received),
so an oversized body is answered 413 without being stored.

JSON weights (see :class:`service.models.GraphUpload`): with ``weight_dtype``
the weights are converted to it (integers in range for int32/int64; float32
rounds to nearest). Without it: int64 when every weight is a JSON integer,
else float64, and then an integer weight beyond 2**53 in magnitude is
refused, since float64 cannot hold it exactly.

The stages of one upload (body into the spool, format and compression checks, parsing,
admission, the worker's load, the commit) run in this order, each undoing the ones before it on
a refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import Request
from pydantic import ValidationError
from starlette.requests import ClientDisconnect

from gpu_core.errors import GraphTooLargeError
from gpu_core.formats import RATIO_FLOOR, check_npz_sizes, pyarrow_available

from ..errors import (
    IncompleteBodyError,
    InvalidRequestError,
    InvalidUploadError,
    PayloadTooLargeError,
    UnsupportedMediaTypeError,
)
from ..limits import check_vertices
from ..models import GraphUpload, PointsBody, PointsUpload, WeightsPatch, WeightsUpload
from ..settings import Settings
from ..storage.spool import SpoolFile, TmpPaths, Upload
from .media_types import ARROW_STREAM_MEDIA_TYPE, PARQUET_MEDIA_TYPE

_EXACT_FLOAT_INT = 2**53

#: binary media types, and the format each one implies (octet-stream: ?format=, default npz)
BINARY_MEDIA_TYPES: dict[str, str | None] = {
    "application/octet-stream": None,
    ARROW_STREAM_MEDIA_TYPE: "arrow",
    PARQUET_MEDIA_TYPE: "parquet",
}
#: formats read with pyarrow (the optional 'arrow' extra)
PYARROW_FORMATS = ("arrow", "parquet")
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def check_encoding(request: Request) -> None:
    """Refuse (415) a body with a Content-Encoding: it is never decoded, so no cap could be bypassed."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise UnsupportedMediaTypeError(
            f"Content-Encoding {encoding!r} is not accepted; send the body uncompressed (an .npz "
            "archive may compress its arrays itself).",
            field="content-encoding",
        )


async def receive_graph(
    request: Request, store: TmpPaths, settings: Settings, fmt: str | None, *, durable: bool = True
) -> Upload:
    """Store the body of a graph upload in the spool, whatever its media type.

    ``durable=False``: a binary body is not fsynced (a one-shot upload, read once and removed).
    """
    check_encoding(request)
    kind = media_type(request)
    if kind == "application/json" or kind.endswith("+json"):
        _refuse_format_with_json(fmt)
        return await _receive_json(request, store, settings)
    if kind in BINARY_MEDIA_TYPES:
        return await _receive_binary(request, store, settings, binary_format(kind, fmt), durable=durable)
    raise UnsupportedMediaTypeError(
        f"Content-Type {kind or '(none)'!r} is not accepted; send application/json columns, an "
        "application/octet-stream body with ?format=npz|egr|mtx|edgelist|dimacs|arrow|parquet, "
        f"or {ARROW_STREAM_MEDIA_TYPE} or {PARQUET_MEDIA_TYPE}.",
        field="content-type",
    )


def binary_format(kind: str, fmt: str | None) -> str:
    """The format of a binary body from its media type and ``?format=`` (which must agree)."""
    implied = BINARY_MEDIA_TYPES[kind]
    if implied is not None and fmt is not None and fmt != implied:
        raise InvalidRequestError(
            f"Content-Type {kind} is format {implied!r} but ?format={fmt} was given; drop one.",
            field="format",
        )
    chosen = fmt or implied or "npz"
    if chosen in PYARROW_FORMATS and not pyarrow_available():
        raise UnsupportedMediaTypeError(
            f"{chosen} uploads need pyarrow, which this server does not have (install the "
            "'arrow' extra: pip install 'mst-service[arrow]'); send npz, egr, mtx, edgelist, "
            "dimacs or JSON instead.",
            field="content-type" if implied else "format",
        )
    return chosen


def _check_declared(request: Request, limit: int, what: str, hint: str = "") -> None:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(
            f"the {what} body has {int(declared)} bytes, more than the limit of {limit} bytes{hint}.",
            field="body",
        )


def _too_large(limit: int, what: str, hint: str = "") -> PayloadTooLargeError:
    return PayloadTooLargeError(
        f"the {what} body is larger than the limit of {limit} bytes{hint}.", field="body"
    )


def _incomplete(received: int, request: Request) -> IncompleteBodyError:
    declared = request.headers.get("content-length")
    of = f" of the {declared} its Content-Length announced" if declared else ""
    return IncompleteBodyError(
        f"the connection closed after {received} bytes{of}; send the whole body.", field="body"
    )


def check_npz_inflation(path: Path, settings: Settings) -> None:
    """Refuse (413) an npz whose declared member sizes break MST_MAX_INFLATED_BYTES or
    MST_MAX_COMPRESSION_RATIO: the central directory alone is read, nothing is inflated.
    A file that is not a zip archive passes: the worker's reader says what is wrong with it."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except Exception:  # not an archive zipfile can open: the worker's reader words the problem
        return
    try:
        check_npz_sizes(
            infos, path.stat().st_size, settings.max_inflated_bytes, settings.max_compression_ratio
        )
    except GraphTooLargeError as exc:
        inflated = sum(i.file_size for i in infos)
        if inflated > settings.max_inflated_bytes:
            limit = f"the limit of {settings.max_inflated_bytes} bytes (MST_MAX_INFLATED_BYTES)"
        else:
            limit = (
                f"{settings.max_compression_ratio:g} times its size (MST_MAX_COMPRESSION_RATIO; "
                f"archives that inflate to at most {RATIO_FLOOR} bytes are exempt)"
            )
        raise PayloadTooLargeError(
            f"the npz archive of {path.stat().st_size} bytes inflates to {inflated} bytes, more than "
            f"{limit}; nothing was inflated.",
            field="body",
        ) from exc


#: formats parsed line by line into Python objects: tens of bytes of memory per byte of body
TEXT_FORMATS = ("edgelist", "mtx", "dimacs")


async def _receive_binary(
    request: Request,
    store: TmpPaths,
    settings: Settings,
    fmt: str,
    source: str | None = None,
    *,
    durable: bool = True,
) -> Upload:
    """Stream a binary body into the spool (capped); ``source``: what the record says was sent
    (default: the format the worker reads it with); ``durable``: fsync it (in a thread)."""
    limit, what, hint = settings.max_upload_bytes, "binary", ""
    if fmt in TEXT_FORMATS and settings.max_text_bytes < limit:
        limit, what, hint = settings.max_text_bytes, fmt, " (MST_MAX_TEXT_BYTES; send npz or egr for more)"
    _check_declared(request, limit, what, hint)
    with SpoolFile(store, f".{fmt}", write_behind=durable) as spool:
        try:
            async for chunk in request.stream():
                if spool.size + len(chunk) > limit:
                    raise _too_large(limit, what, hint)
                spool.write(chunk)
        except ClientDisconnect:
            raise _incomplete(spool.size, request) from None
        spool.close()
        if fmt in ("npz", "points.npz"):
            check_npz_inflation(spool.path, settings)  # the central directory only: cheap, inline
        synced: asyncio.Future[None]
        if durable:
            synced = asyncio.ensure_future(asyncio.to_thread(spool.sync))  # overlaps with the worker's load
        else:
            synced = asyncio.get_running_loop().create_future()
            synced.set_result(None)
        return Upload(spool.detach(), fmt, spool.size, source or fmt, synced)


async def _read_limited(request: Request, limit: int, what: str = "JSON") -> bytes:
    _check_declared(request, limit, what)
    parts: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit, what)
            parts.append(chunk)
    except ClientDisconnect:
        raise _incomplete(size, request) from None
    return b"".join(parts)


def _validation_problem(exc: ValidationError) -> InvalidRequestError:
    first = exc.errors(include_url=False)[0]
    loc = tuple(first.get("loc", ()))
    if first.get("type") == "json_invalid":
        return InvalidRequestError(f"the body is not valid JSON: {first.get('msg')}.", field="body")
    # a union member's name trails the location of list items (('weight', 3, 'int')): drop it
    if len(loc) >= 3 and isinstance(loc[1], int) and isinstance(loc[2], str):
        loc = loc[:2]
    field = str(loc[0]) if loc else "body"
    index = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else None
    where = field if index is None else f"{field}[{index}]"
    msg = str(first.get("msg", "invalid value"))
    if first.get("type") == "missing":
        msg = "is required"
    return InvalidUploadError(f"'{where}' {msg[0].lower()}{msg[1:]}.", field=field, index=index)


def _first(items: Iterator[int]) -> int | None:
    return next(items, None)


def _ids(values: list[int], field: str) -> np.ndarray[Any, Any]:
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        index = _first(i for i, v in enumerate(values) if not -(2**63) <= v < 2**63)
        raise InvalidUploadError(
            f"'{field}[{index}]' = {values[index or 0]} is not a valid vertex id.", field=field, index=index
        ) from None


def weights_array(values: list[int | float], dtype: str | None) -> np.ndarray[Any, Any]:
    """The weight column as an array, by the documented rule (exact or refused)."""
    all_ints = all(type(v) is int for v in values)
    if dtype is None:
        dtype = "int64" if all_ints else "float64"
        if not all_ints:
            big = _first(i for i, v in enumerate(values) if type(v) is int and abs(v) > _EXACT_FLOAT_INT)
            if big is not None:
                raise InvalidUploadError(
                    f"'weight[{big}]' = {values[big]} cannot be stored exactly as float64 next to "
                    "non-integer weights; send all weights as integers or set weight_dtype.",
                    field="weight",
                    index=big,
                )
    if dtype in _INT_RANGES:
        lo, hi = _INT_RANGES[dtype]
        bad = _first(i for i, v in enumerate(values) if type(v) is not int or not lo <= v <= hi)
        if bad is not None:
            raise InvalidUploadError(
                f"'weight[{bad}]' = {values[bad]} is not an integer in the range of {dtype}.",
                field="weight",
                index=bad,
            )
    with np.errstate(over="ignore"):  # float32 overflow becomes inf, refused by the engine with its index
        try:
            return np.array(values, dtype=dtype)
        except OverflowError:
            bad = _first(i for i, v in enumerate(values) if type(v) is int and abs(v) > 2**1023)
            raise InvalidUploadError(
                f"'weight[{bad}]' is too large for {dtype}.", field="weight", index=bad
            ) from None


def _json_to_npz(body: bytes, path: Path, max_edges: int, max_vertices: int) -> None:
    try:
        upload = GraphUpload.model_validate_json(body)
    except ValidationError as exc:
        raise _validation_problem(exc) from None
    if len(upload.weight) > max_edges:
        raise PayloadTooLargeError(
            f"the graph has {len(upload.weight)} edges, more than this service's limit of {max_edges} "
            "(MST_MAX_EDGES).",
            field="weight",
        )
    lengths = (len(upload.src), len(upload.dst), len(upload.weight))
    if len(set(lengths)) != 1:
        raise InvalidUploadError(
            "'src', 'dst' and 'weight' must have the same length, got "
            f"{lengths[0]}, {lengths[1]} and {lengths[2]}.",
            field="weight" if lengths[0] == lengths[1] else "dst",
        )
    arrays: dict[str, Any] = {"src": _ids(upload.src, "src"), "dst": _ids(upload.dst, "dst")}
    check_vertices(arrays["src"], arrays["dst"], upload.num_vertices, max_vertices)
    arrays["weight"] = weights_array(upload.weight, upload.weight_dtype)
    if upload.num_vertices is not None:
        arrays["num_vertices"] = np.int64(upload.num_vertices)
    with open(path, "wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())


async def _json_to_spool(
    request: Request, store: TmpPaths, settings: Settings, suffix: str, write: Callable[[bytes, Path], str]
) -> Upload:
    """Read a JSON body (capped) and have ``write`` turn it into the spool file the worker reads
    (in a thread; it returns the file's format); nothing is left behind when it refuses the body."""
    body = await _read_limited(request, settings.max_json_bytes)
    path = store.tmp_path(suffix)
    try:
        fmt = await asyncio.to_thread(write, body, path)
    except BaseException:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
        raise
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    done.set_result(None)
    return Upload(path, fmt, path.stat().st_size, "json", done)


def _refuse_format_with_json(fmt: str | None) -> None:
    if fmt is not None:
        raise InvalidRequestError(
            "?format= applies to binary bodies (application/octet-stream), not to JSON.", field="format"
        )


async def _receive_json(request: Request, store: TmpPaths, settings: Settings) -> Upload:
    def write(body: bytes, path: Path) -> str:
        _json_to_npz(body, path, settings.max_edges, settings.max_vertices)
        return "npz"

    return await _json_to_spool(request, store, settings, ".npz", write)


def _json_weights_file(body: bytes, path: Path, partial: bool) -> str:
    """Write a JSON weights body as the worker reads it: ``.npy`` (all) or ``.npz`` (some); the format."""
    model: type[WeightsPatch] | type[WeightsUpload] = WeightsPatch if partial else WeightsUpload
    try:
        upload = model.model_validate_json(body)
    except ValidationError as exc:
        raise _validation_problem(exc) from None
    with open(path, "wb") as f:
        if isinstance(upload, WeightsPatch):
            if len(upload.edge_ids) != len(upload.weights):
                raise InvalidUploadError(
                    f"'edge_ids' and 'weights' must have the same length, got {len(upload.edge_ids)} "
                    f"and {len(upload.weights)}.",
                    field="weights",
                )
            np.savez(
                f, edge_ids=_ids(upload.edge_ids, "edge_ids"), weights=weights_array(upload.weights, None)
            )
            fmt = "npz"
        else:
            np.save(f, weights_array(upload.weight, upload.weight_dtype), allow_pickle=False)
            fmt = "npy"
        f.flush()
        os.fsync(f.fileno())
    return fmt


async def receive_weights(
    request: Request, store: TmpPaths, settings: Settings, fmt: str | None, partial: bool
) -> Upload:
    """Store the body of a weights update in the spool: JSON, or binary ``.npy`` (all) / ``.npz``."""
    check_encoding(request)
    kind = media_type(request)
    if kind == "application/json" or kind.endswith("+json"):
        _refuse_format_with_json(fmt)
        return await _json_to_spool(
            request, store, settings, ".weights", lambda body, path: _json_weights_file(body, path, partial)
        )
    if kind == "application/octet-stream":
        fmt = fmt or ("npz" if partial else "npy")
        if partial and fmt != "npz":
            raise InvalidRequestError(
                "a partial weights update is an npz of 'edge_ids' and 'weights' (?format=npz).",
                field="format",
            )
        return await _receive_binary(request, store, settings, fmt)
    raise UnsupportedMediaTypeError(
        f"Content-Type {kind or '(none)'!r} is not accepted; send application/json or an "
        "application/octet-stream body (?format=npy for every weight, npz for edge_ids + weights).",
        field="content-type",
    )


def check_weights_header(upload: Upload, num_edges: int) -> None:
    """Refuse a full ``.npy`` replacement of the wrong length, dtype or size before the worker sees it."""
    if upload.format != "npy":
        return
    from gpu_core._backend.staging import read_npy_header
    from gpu_core.errors import GraphValidationError

    try:
        with open(upload.path, "rb") as f:
            shape, dtype, _ = read_npy_header(f)
    except (GraphValidationError, OSError) as exc:
        upload.discard()
        raise InvalidUploadError(f"the body is not a whole .npy of numbers: {exc}", field="body") from None
    if dtype.kind not in "iuf" or shape != (num_edges,):
        upload.discard()
        raise InvalidUploadError(
            f"the weights must be a one-dimensional array of {num_edges} numbers (one per edge); the .npy "
            f"holds shape {shape} of dtype {dtype}.",
            field="body",
        )


def _json_points_file(body: bytes, path: Path) -> str:
    """Write a JSON point set (``{"points": [[x, y, ...], ...]}``) as the ``.npy`` the worker reads."""
    try:
        upload = PointsUpload.model_validate_json(body)
    except ValidationError as exc:
        raise _validation_problem(exc) from None
    widths = {len(row) for row in upload.points}
    if len(widths) > 1:
        first = next(i for i, row in enumerate(upload.points) if len(row) != len(upload.points[0]))
        raise InvalidUploadError(
            f"'points[{first}]' has {len(upload.points[first])} coordinates, 'points[0]' has "
            f"{len(upload.points[0])}; every point needs the same number.",
            field="points",
            index=first,
        )
    with np.errstate(over="ignore"):
        points = np.array(upload.points, dtype=upload.dtype or "float64")
    with open(path, "wb") as f:
        np.save(f, points, allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())
    return "points.npy"


async def receive_points(request: Request, store: TmpPaths, settings: Settings, fmt: str | None) -> Upload:
    """Store the body of a point-set upload in the spool: JSON rows, or a binary ``.npy``/``.npz``."""
    check_encoding(request)
    kind = media_type(request)
    if kind == "application/json" or kind.endswith("+json"):
        _refuse_format_with_json(fmt)
        return await _json_to_spool(request, store, settings, ".points.npy", _json_points_file)
    if kind == "application/octet-stream":
        return await _receive_binary(request, store, settings, f"points.{fmt or 'npz'}", fmt or "npz")
    raise UnsupportedMediaTypeError(
        f"Content-Type {kind or '(none)'!r} is not accepted for points; send application/json rows or an "
        "application/octet-stream body (?format=npz with a 'points' array, or npy).",
        field="content-type",
    )


def json_points(body: bytes) -> np.ndarray[Any, Any]:
    """The ``(q, d)`` float64 array of JSON rows (``{"points": [[x, y, ...], ...]}``) to predict."""
    try:
        rows = PointsBody.model_validate_json(body).points
    except ValidationError as exc:
        raise _validation_problem(exc) from None
    if not rows:
        raise InvalidUploadError("'points' is empty; send at least one point to predict.", field="points")
    width = len(rows[0])
    for i, row in enumerate(rows):
        if len(row) != width:
            raise InvalidUploadError(
                f"'points[{i}]' has {len(row)} coordinates, 'points[0]' has {width}; every point needs "
                "the same number.",
                field="points",
                index=i,
            )
    with np.errstate(over="ignore"):
        return np.array(rows, dtype=np.float64).reshape(len(rows), width)


async def receive_prediction_points(
    request: Request, settings: Settings, fmt: str | None
) -> tuple[np.ndarray[Any, Any] | bytes, str | None]:
    """The points of a prediction, held in memory (never spooled): JSON rows parsed here (an
    array, format None), or a binary body's bytes and the format its worker reads them in
    (``points.npz``, ``points.npy``, ``points.arrow``); capped as uploads are."""
    check_encoding(request)
    kind = media_type(request)
    if kind == "application/json" or kind.endswith("+json"):
        _refuse_format_with_json(fmt)
        body = await _read_limited(request, settings.max_json_bytes)
        return json_points(body), None
    if kind == ARROW_STREAM_MEDIA_TYPE:
        if fmt not in (None, "arrow"):
            raise InvalidRequestError(
                f"?format={fmt} contradicts Content-Type {kind}; leave ?format= out.", field="format"
            )
        fmt = "arrow"
    elif kind != "application/octet-stream":
        raise UnsupportedMediaTypeError(
            f"Content-Type {kind or '(none)'!r} is not accepted for points to predict; send application/json "
            f"rows, an application/octet-stream body (?format=npz with a 'points' array, npy, or arrow) or "
            f"{ARROW_STREAM_MEDIA_TYPE}.",
            field="content-type",
        )
    if fmt == "arrow" and not pyarrow_available():
        raise UnsupportedMediaTypeError(
            "this server has no pyarrow, so it cannot read Arrow bodies; send npz or npy.", field="format"
        )
    body = await _read_limited(request, settings.max_upload_bytes, "binary")
    if not body:
        raise InvalidUploadError("the body is empty; send the points to predict.", field="body")
    return body, f"points.{fmt or 'npz'}"
