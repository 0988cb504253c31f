"""A point set's metric refused before any work is queued: 422 at submission, not a failed job.

A point set's upload records the facts the metrics' checks read (:func:`gpu_core._points.metrics.
point_facts`: a zero row for cosine, rows outside haversine's range, the coordinates' span for
minkowski), so a job or a model of a metric its points cannot take is refused by the API process
with the engine's own message, without a worker reading the points. A point set stored before its
record held them (``"{}"``) is checked by its worker, as then.
"""

from __future__ import annotations

import json
from typing import Any

from ..storage.records import GraphRecord


def refuse_metric(record: GraphRecord, params: dict[str, Any]) -> None:
    """Raise the engine's error for ``params``' metric on the point set of ``record``, if its points
    cannot take it."""
    facts = json.loads(record.facts or "{}")
    if not facts:
        return
    from gpu_core._points.metrics import refusal, resolve_metric

    metric = resolve_metric(params.get("metric", "euclidean"), params.get("metric_params"))
    error = refusal(metric, facts)
    if error is not None:
        raise error
