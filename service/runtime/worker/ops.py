"""A worker's operations: each request to its handler, and the one way a request is run.

:func:`handle` runs one request (``op`` and its arguments) and turns whatever it raises into
an answer that crosses back (:func:`~.state.portable`): shared by the worker process's loop
(:mod:`.process`) and the Ray actor, so both transports run every line of the same code.
Loading and computing go to the graph or the point-set code by the dataset's kind.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from gpu_core import MAX_DIMENSIONS
from gpu_core._points.metrics import point_facts
from gpu_core.errors import DeviceMemoryError

from ...errors import ModelOutdatedError, dataset_not_found
from ...storage import npzio
from ...timing import Steps
from .graphs import load_graph, replace_weights, run_task
from .oneshots import batched, oneshot
from .points import ResidentPoints, parse_points, read_points
from .protocol import (
    DESCRIBE,
    DROP,
    DROP_MODEL,
    FIT,
    INLINE,
    LOAD,
    MERGE,
    MST,
    ONESHOT,
    PING,
    PREDICT,
    SERVED,
    WEIGHTS,
    Reply,
)
from .shards import describe, merge
from .startup import probe_ms
from .state import Worker, portable


def load(
    worker: Worker,
    graph_id: str,
    path: str,
    fmt: str,
    num_vertices: int | None,
    canonical: str | None,
    weights: str | None = None,
) -> dict[str, Any]:
    """Make a dataset resident from a spool file: a graph (see :func:`.graphs.load_graph`), or a
    point set for a format ``points.npz`` or ``points.npy``."""
    if fmt.startswith("points."):
        return load_points(worker, graph_id, path, fmt, canonical)
    return load_graph(worker, graph_id, path, fmt, num_vertices, canonical, weights)


def load_points(worker: Worker, points_id: str, path: str, fmt: str, canonical: str | None) -> dict[str, Any]:
    """Make a point set resident from a spool file (``points.npy``, or ``points.npz`` with
    ``points``), once the worker's memory admits it (:meth:`~.state.Worker.admit_points`). Its
    models are not fitted here: a prediction fits a model its point set does not hold (after a
    restart or an eviction) from the parameters it carries."""
    import numpy as np

    config = worker.config
    raw = read_points(path, fmt, *config.inflate_caps())
    shape: tuple[int, ...] = raw.shape
    if len(shape) == 2 and shape[0] >= 1 and 1 <= shape[1] <= MAX_DIMENSIONS:  # else validation says why
        worker.admit_points(int(shape[0]), int(shape[1]))
    resident = ResidentPoints(raw, worker.backend)
    facts = point_facts(resident.coords)
    if canonical is not None:
        npzio.write_npz_file(canonical, {"points": np.ascontiguousarray(raw)}, sync=True)
    del raw
    worker.points[points_id] = resident
    free, total = worker.memory()
    return {
        "num_vertices": resident.num_points,
        "num_edges": resident.dims,
        "weight_dtype": str(resident.dtype),
        "facts": facts,
        "device_bytes": resident.nbytes,
        "free_bytes": free,
        "total_bytes": total,
    }


def fit(worker: Worker, points_id: str, model_id: str, params: dict[str, Any]) -> dict[str, Any]:
    """Fit an HDBSCAN* model on a resident point set, once memory admits it
    (:meth:`~.state.Worker.admit_fit`), and keep it with the point set as ``model_id``."""
    points = _resident_points(worker, points_id)
    worker.admit_fit(points, params)
    try:
        model = points.fit(model_id, params)
    except DeviceMemoryError:
        worker.release_cached()
        raise
    free, total = worker.memory()
    return {
        "num_clusters": model.num_clusters,
        "num_noise": model.num_noise,
        "num_points": points.num_points,
        "dims": points.dims,
        "model_bytes": model.nbytes,
        "device_bytes": points.nbytes,
        "compute_ms": model.fit_ms,
        "free_bytes": free,
        "total_bytes": total,
    }


def predict(
    worker: Worker,
    points_id: str,
    model_id: str,
    params: dict[str, Any],
    shape: tuple[int, int],
    queries: Any,
    fmt: str | None,
    membership: bool,
) -> dict[str, Any]:
    """Labels and probabilities (and with ``membership`` the membership vectors) of new points by
    a model of a resident point set, in the reply (:data:`~.protocol.INLINE`): nothing touches a
    disk. ``queries``: the points as an array (parsed from JSON by the API), or the body's bytes
    in ``fmt`` (``points.npz``, ``points.npy``, ``points.arrow``), read as an upload is.

    ``shape``: the point set's ``(n, d)`` when the model was fitted; a point set that differs now
    is refused (409, :class:`ModelOutdatedError`). A model the point set does not hold (dropped by
    a restart or an eviction) is fitted again first from ``params``: fitting is deterministic, so
    it is the same model. ``timings_ms``: ``read``, ``fit`` (such a fit), ``predict``; and
    :data:`~.protocol.SERVED`, when it began and how long it took."""
    started = time.monotonic()
    steps = Steps()
    points = _resident_points(worker, points_id)
    if (points.num_points, points.dims) != tuple(shape):
        raise ModelOutdatedError(
            f"model {model_id} was fitted on {shape[0]} points of {shape[1]} coordinates; point set "
            f"{points_id} now holds {points.num_points} of {points.dims}. Fit a new model.",
            field="model_id",
        )
    if fmt is not None:
        config = worker.config
        queries = parse_points(queries, fmt, *config.inflate_caps())
        steps.lap("read")
    model = points.models.get(model_id)
    if model is None:
        worker.admit_fit(points, params)
        model = points.fit(model_id, params)
        steps.lap("fit")
    worker.admit_prediction(model, queries, membership)
    try:
        arrays = model.predict(queries, membership)
    except DeviceMemoryError:
        worker.release_cached()
        raise
    steps.lap("predict")
    return {
        "num_points": int(arrays["labels"].shape[0]),
        "num_clusters": model.num_clusters,
        "model_bytes": model.nbytes,  # grows once a membership request built the exemplars' indexes
        "device_bytes": points.nbytes,
        INLINE: arrays,
        "timings_ms": steps.ms,
        SERVED: (started, (time.monotonic() - started) * 1e3),
    }


def drop_model(worker: Worker, points_id: str, model_id: str) -> dict[str, Any]:
    """Drop a model (if held); the point set's bytes now."""
    points = worker.points.get(points_id)
    if points is not None:
        points.models.pop(model_id, None)
    free, total = worker.memory()
    return {"device_bytes": 0 if points is None else points.nbytes, "free_bytes": free, "total_bytes": total}


def _resident_points(worker: Worker, points_id: str) -> ResidentPoints:
    points = worker.points.get(points_id)
    if points is None:  # deleted meanwhile (the API loads a placed point set before it asks)
        raise dataset_not_found(points_id)
    return points


def mst(
    worker: Worker, graph_id: str, result_path: str, task: str = "mst", params: dict[str, Any] | None = None
) -> Reply:
    """The result's summary now; its file at ``result_path`` right after the reply.

    ``task`` (with ``params``): ``mst`` (objective, exclude), ``components`` (exclude),
    ``clusters`` (k or threshold) or ``dendrogram`` on a graph; ``emst``, ``hdbscan`` or
    ``single_linkage`` on a point set. The summary says when the worker began and how long it
    took (:data:`~.protocol.SERVED`).
    """
    started = time.monotonic()
    points = worker.points.get(graph_id)
    if points is not None:
        point_summary, point_arrays = points.run(task, params or {})
        reply = Reply(point_summary, lambda: worker.write_arrays(point_arrays, result_path))
    else:
        reply = run_task(worker, worker.resident_graph(graph_id), task, params or {}, result_path)
    reply.payload[SERVED] = (started, (time.monotonic() - started) * 1e3)
    return reply


def drop(worker: Worker, graph_id: str) -> dict[str, Any]:
    worker.graphs.pop(graph_id, None)
    worker.points.pop(graph_id, None)
    free, total = worker.memory()
    return {"free_bytes": free, "total_bytes": total}


def ping(worker: Worker) -> dict[str, Any]:
    return {"probe_ms": probe_ms(worker)}


#: the handler of each request operation
HANDLERS: dict[str, Callable[..., dict[str, Any] | Reply]] = {
    LOAD: load,
    MST: mst,
    WEIGHTS: replace_weights,
    ONESHOT: oneshot,
    DROP: drop,
    PING: ping,
    DESCRIBE: describe,
    MERGE: merge,
    FIT: fit,
    PREDICT: predict,
    DROP_MODEL: drop_model,
}


def handle(worker: Worker, op: str, args: Sequence[Any]) -> tuple[bool, Any, Callable[[], None] | None, bool]:
    """Run one request: (ok, the answer or the portable error, work to do once the answer is
    sent or None, whether this worker must end now). Shared by the worker process's loop
    (:mod:`.process`) and the Ray actor (:mod:`service.runtime.pool.ray_pool`)."""
    try:
        answer = HANDLERS[op](worker, *args)
    except BaseException as exc:
        from gpu_core.errors import DeviceError, DeviceMemoryError

        # out of device memory is not sticky: answer, free the pool's cache, carry on
        fatal = not isinstance(exc, Exception) or (
            isinstance(exc, DeviceError) and not isinstance(exc, DeviceMemoryError)
        )
        if isinstance(exc, DeviceMemoryError):
            worker.release_cached()
        return False, portable(exc), None, fatal
    if isinstance(answer, Reply):
        return True, answer.payload, answer.after, False
    return True, answer, None, False


def run_after(work: Callable[[], None]) -> BaseException | None:
    """Run a reply's ``after`` work: None when it succeeded, else the (portable) error."""
    try:
        work()
    except Exception as exc:
        return portable(exc)
    return None


def run_oneshots(
    worker: Worker, requests: list[tuple[int, list[Any]]]
) -> tuple[list[tuple[int, bool, Any]], bool]:
    """Several one-shot requests ``(req id, args)`` waiting together: their replies, and whether
    this worker must end now (the device failed). Those :func:`.oneshots.batched` computes as one
    union are answered from it; the others run alone, one after another."""
    replies, alone = batched(worker, requests)
    fatal = False
    for req_id, args in alone:
        if fatal:  # the device failed: the rest end worker_lost when this worker exits
            break
        ok, payload, _, fatal = handle(worker, ONESHOT, args)
        replies.append((req_id, ok, payload))
    return replies, fatal
