"""``/v1/points/{points_id}/models``: HDBSCAN* models resident with a point set, and predictions.

A model is fitted on its point set's worker (201, synchronous) and kept there beside the point
set; ``POST .../models/{model_id}/predict`` answers the labels and probabilities of new points
(the hdbscan library's ``approximate_predict``) and, with ``?membership=true``, their membership
vectors (``membership_vector``), in one round trip to that worker: JSON by default, an ``.npz``
or an Arrow IPC stream by ``Accept``, as job results are. A model's record survives restarts;
its worker fits it again from the stored parameters when it no longer holds it (see
:mod:`service.runtime.models`).
"""

from __future__ import annotations

import asyncio
import io
import json
from datetime import UTC, datetime
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Header, Query, Request, Response, status

from ..models import ModelList, ModelOut, ModelRequest, PredictFormat, PredictionOut
from ..storage.npzio import write_npz
from ..storage.records import ModelRecord
from ..timing import Steps
from .auth import owner_of
from .deps import OwnerDep, ServicesDep, checked_model_id, checked_points_id, services_of
from .docs import BINARY_SCHEMA, problems
from .encoders import negotiate
from .media_types import ARROW_STREAM_MEDIA_TYPE, JSON_MEDIA_TYPE, NPZ_MEDIA_TYPE
from .uploads import receive_prediction_points

router = APIRouter(prefix="/v1/points/{points_id}/models", tags=["models"])

_PREDICT_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/PointsBody"}},
            "application/octet-stream": {
                "schema": BINARY_SCHEMA,
                "description": "An npz with a 'points' array of shape (q, d) (?format=npz, default), an "
                ".npy of that array (?format=npy) or an Arrow IPC stream (?format=arrow).",
            },
            ARROW_STREAM_MEDIA_TYPE: {
                "schema": BINARY_SCHEMA,
                "description": "An Arrow IPC stream: one numeric column per coordinate, or one column of "
                "fixed-size lists (a point each).",
            },
        },
    }
}

_PREDICTION_CONTENT: dict[str, Any] = {
    "application/json": {"schema": {"$ref": "#/components/schemas/PredictionOut"}},
    "application/octet-stream": {"schema": BINARY_SCHEMA},
    ARROW_STREAM_MEDIA_TYPE: {"schema": BINARY_SCHEMA},
}


def _model_out(record: ModelRecord) -> ModelOut:
    return ModelOut(
        id=record.id,
        points_id=record.points_id,
        created_at=datetime.fromtimestamp(record.created_at, UTC),
        params=json.loads(record.params),
        num_clusters=record.num_clusters,
        num_noise=record.num_noise,
        model_bytes=record.model_bytes,
    )


@router.post(
    "",
    operation_id="createModel",
    status_code=status.HTTP_201_CREATED,
    response_model=ModelOut,
    summary="Fit an HDBSCAN* model on a point set",
    responses=problems(400, 404, 413, 422, 429, 503, 507),
)
async def create_model(
    points_id: str, body: ModelRequest, response: Response, services: ServicesDep, owner: OwnerDep
) -> ModelOut:
    """Fit the model on the point set's worker and keep it there for predictions; 201 with its
    record and a ``Location`` header. 507 when the worker has no room for it now, 413 when it
    never will (the problem names the bytes needed and those there are)."""
    params = body.model_dump()  # every parameter stored: the record says what was fitted
    record = await services.models.create(checked_points_id(points_id), owner, params)
    response.headers["Location"] = f"/v1/points/{points_id}/models/{record.id}"
    return _model_out(record)


@router.get(
    "",
    operation_id="listModels",
    response_model=ModelList,
    summary="List a point set's models",
    responses=problems(404),
)
async def list_models(points_id: str, services: ServicesDep, owner: OwnerDep) -> ModelList:
    """The point set's models, oldest first."""
    owned = services.models.owned(checked_points_id(points_id), owner)
    return ModelList(models=[_model_out(m) for m in owned])


@router.get(
    "/{model_id}",
    operation_id="getModel",
    response_model=ModelOut,
    summary="Describe a model",
    responses=problems(404),
)
async def get_model(points_id: str, model_id: str, services: ServicesDep, owner: OwnerDep) -> ModelOut:
    record = services.models.get(checked_points_id(points_id), checked_model_id(model_id), owner)
    return _model_out(record)


@router.delete(
    "/{model_id}",
    operation_id="deleteModel",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a model",
    responses=problems(404),
)
async def delete_model(points_id: str, model_id: str, services: ServicesDep, owner: OwnerDep) -> Response:
    """Delete the model and free what it holds on its worker (the point set stays)."""
    await services.models.delete(checked_points_id(points_id), checked_model_id(model_id), owner)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/{model_id}/predict",
    operation_id="predictWithModel",
    summary="Predict new points with a model",
    response_model=None,
    openapi_extra=_PREDICT_BODY,
    responses={
        200: {
            "description": "Labels and probabilities (and membership vectors) by Accept: JSON by default; "
            "an .npz (arrays labels int64, probabilities float64, membership float64 (q, clusters)) for "
            "application/octet-stream; an Arrow IPC stream of the same columns for "
            f"{ARROW_STREAM_MEDIA_TYPE}. Binary answers carry the sizes in X-MST-* headers.",
            "content": _PREDICTION_CONTENT,
            "model": PredictionOut,
        },
        **problems(400, 404, 406, 409, 413, 415, 422, 429, 503, 507),
    },
)
async def predict(
    request: Request,
    points_id: str,
    model_id: str,
    membership: Annotated[
        bool, Query(description="true: also each point's membership vector (one value per cluster).")
    ] = False,
    format: Annotated[
        PredictFormat | None, Query(description="Format of an application/octet-stream body; default npz.")
    ] = None,
    accept: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Response:
    """The cluster each new point falls in (-1: noise) and how strongly, as the hdbscan library's
    ``approximate_predict`` answers with the same model (and ``membership_vector`` with
    ``?membership=true``). The points need the point set's number of coordinates (422 naming
    both otherwise), all finite."""
    steps = Steps()
    services, owner = services_of(request), owner_of(request.scope)
    representation = negotiate(accept)  # 406 before the body is read
    model = services.models.get(checked_points_id(points_id), checked_model_id(model_id), owner)
    steps.lap("lookup")
    queries, fmt = await receive_prediction_points(request, services.settings, format)
    steps.lap("receive")
    summary, arrays = await services.models.predict(model, owner, queries, fmt, membership, steps)
    headers = {
        "X-MST-Num-Points": str(summary["num_points"]),
        "X-MST-Num-Clusters": str(summary["num_clusters"]),
        # how many requests the worker predicted in one batch with this one (1: alone)
        "X-MST-Batched": str(summary.get("batched", 1)),
    }
    body: bytes | memoryview
    if representation == "npz":
        buffer = io.BytesIO()
        write_npz(buffer, arrays)
        body, media = buffer.getbuffer(), NPZ_MEDIA_TYPE
        headers["Content-Disposition"] = 'attachment; filename="prediction.npz"'
    elif representation == "arrow":
        size = sum(np.size(a) for a in arrays.values())
        body = _arrow(arrays) if size < 1 << 16 else await asyncio.to_thread(_arrow, arrays)
        media = ARROW_STREAM_MEDIA_TYPE
        headers["Content-Disposition"] = 'attachment; filename="prediction.arrows"'
    else:
        out: dict[str, Any] = {
            "model_id": model.id,
            "num_points": summary["num_points"],
            **{name: np.asarray(values).tolist() for name, values in arrays.items()},
        }
        body, media = json.dumps(out, separators=(",", ":")).encode(), JSON_MEDIA_TYPE
    steps.lap("encode")
    headers["Server-Timing"] = steps.header()
    return Response(body, media_type=media, headers=headers)


def _arrow(arrays: dict[str, Any]) -> bytes:
    """The arrays as columns of an Arrow IPC stream (membership vectors as fixed-size lists)."""
    import pyarrow as pa
    import pyarrow.ipc

    columns = {}
    for name, values in arrays.items():
        if values.ndim == 2:
            flat = pa.array(np.ascontiguousarray(values).reshape(-1))
            columns[name] = pa.FixedSizeListArray.from_arrays(flat, values.shape[1])
        else:
            columns[name] = pa.array(values)
    table = pa.table(columns)
    sink = pa.BufferOutputStream()
    with pyarrow.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())
