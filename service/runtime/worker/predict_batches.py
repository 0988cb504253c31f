"""Predictions against one model waiting together, answered by one computation.

``approximate_predict``'s answer for a point depends on that point and the model alone (its
neighbours are exact, ordered by (distance, index)), so a batch concatenates the points of the
requests waiting for one model, predicts once and hands each request its own rows: each answer is
the one it would get alone. A request whose points do not parse or fail the engine's checks (dtype,
shape, finite coordinates) runs alone and gets its own error; so does a request for membership
vectors, and every request of a batch that fails as a whole. Why: docs/design/architecture.md
(one worker answers a hot model; batching lets it answer many clients at once).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .points import parse_points
from .protocol import INLINE, SERVED
from .state import Worker

#: the most points predicted in one batch (a request larger than this runs alone)
MAX_BATCH_POINTS = 1 << 18

#: a PREDICT request's arguments: points id, model id, params, (n, d), queries, format, membership
PredictArgs = list[Any]


def batchable(first: PredictArgs, other: PredictArgs) -> bool:
    """Whether ``other`` may be predicted in one batch with ``first``: the same model of the same
    point set, fitted on the same shape, labels and probabilities only."""
    return (
        other[0] == first[0]
        and other[1] == first[1]
        and tuple(other[3]) == tuple(first[3])
        and not first[6]
        and not other[6]
    )


def predict_together(
    worker: Worker, requests: list[tuple[int, PredictArgs]]
) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, PredictArgs]]]:
    """Several :func:`batchable` prediction requests ``(key, args)``: the answers of those predicted
    as one batch, and those that must run alone (:func:`.ops.predict`). Raises what the batch's
    prediction raises (then the caller runs each alone, for each to get its own answer)."""
    started = time.monotonic()
    points_id, model_id = requests[0][1][0], requests[0][1][1]
    points = worker.points.get(points_id)
    model = None if points is None else points.models.get(model_id)
    if points is None or model is None or (points.num_points, points.dims) != tuple(requests[0][1][3]):
        return [], requests  # deleted, outdated or not fitted: the first runs alone and says so (or fits)
    members: list[tuple[int, np.ndarray[Any, Any], bool]] = []
    alone: list[tuple[int, PredictArgs]] = []
    total = 0
    for key, args in requests:
        coords = _checked(worker, args[4], args[5], points.dims)
        if coords is None or total + coords.shape[0] > MAX_BATCH_POINTS:
            alone.append((key, args))
            continue
        members.append((key, coords, args[5] is not None))
        total += coords.shape[0]
    if len(members) < 2:
        return [], requests
    read_ms = (time.monotonic() - started) * 1e3
    combined = np.concatenate([coords for _, coords, _ in members])
    worker.admit_prediction(model, combined, False)
    arrays = model.predict(combined, False)
    predict_ms = (time.monotonic() - started) * 1e3 - read_ms
    served = (started, (time.monotonic() - started) * 1e3)
    answers: list[tuple[int, dict[str, Any]]] = []
    at = 0
    for key, coords, read in members:
        rows = slice(at, at + coords.shape[0])
        at = rows.stop
        answers.append(
            (
                key,
                {
                    "num_points": int(coords.shape[0]),
                    "num_clusters": model.num_clusters,
                    "model_bytes": model.nbytes,
                    "device_bytes": points.nbytes,
                    "batched": len(members),
                    INLINE: {name: np.ascontiguousarray(array[rows]) for name, array in arrays.items()},
                    # the batch's checks count as a body's read (or, for a JSON body, as prediction)
                    "timings_ms": {"read": read_ms, "predict": predict_ms}
                    if read
                    else {"predict": read_ms + predict_ms},
                    SERVED: served,
                },
            )
        )
    return answers, alone


def _checked(worker: Worker, queries: Any, fmt: str | None, dims: int) -> np.ndarray[Any, Any] | None:
    """A request's points as the engine's checks leave them (float64, C order, finite, ``dims``
    coordinates), or None where they fail (the request runs alone, for its own error)."""
    from gpu_core._points.validate import validate_points

    try:
        if fmt is not None:
            queries = parse_points(queries, fmt, *worker.config.inflate_caps())
        coords: np.ndarray[Any, Any] = validate_points(queries)
    except Exception:
        return None
    return coords if coords.shape[1] == dims else None
