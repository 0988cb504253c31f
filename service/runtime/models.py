"""HDBSCAN* models kept resident with their point sets, and the predictions they answer.

A model is fitted on a point set's worker (``FIT``) and stays there beside the point set; its
record (parameters, clusters, bytes) is stored in SQLite, so it survives any restart. A worker
that restarts, or a point set evicted and loaded back, holds the point set without its models:
the next prediction fits the model again from its stored parameters on the reloaded points
(fitting is deterministic: the same model, the same answers), then predicts.

Fits and predictions are admitted by the worker's memory (the bytes they need against what is
free: 413 when the worker never has that much, 507 when it has not now, once idle datasets are
evicted). A prediction is one request to the worker holding the point set, answered with the
arrays in the reply (nothing is written to a disk); it counts against its owner's
MST_QUOTA_QUEUED_JOBS while it runs, as a job does, and does not wait in the worker's job queue.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

from ..errors import (
    DeviceQuotaExceededError,
    InsufficientMemoryError,
    ModelNotFoundError,
    PointSetNotFoundError,
    ServiceUnavailableError,
)
from ..storage.records import ModelRecord, new_id
from ..storage.store import Store
from ..timing import Steps
from .admission import Admission
from .catalog import Catalog
from .pool.handle import WorkerHandle
from .supervisor import Supervisor
from .worker.protocol import DROP_MODEL, FIT, INLINE, PREDICT, SERVED


class Models:
    """The models of the stored point sets (records cached in memory: a prediction reads no disk)."""

    def __init__(self, store: Store, supervisor: Supervisor, catalog: Catalog, admission: Admission) -> None:
        self._store = store
        self._supervisor = supervisor
        self._catalog = catalog
        self._admission = admission
        self._cache: dict[str, ModelRecord] = {}

    def _holder(self, points_id: str) -> WorkerHandle:
        handle = self._supervisor.holder(points_id)
        if handle is None:  # a placed point set always has its record (placed after, forgotten after)
            raise ServiceUnavailableError(
                f"point set {points_id} is not placed on any worker yet; retry shortly."
            )
        return handle

    async def _request(self, owner: str, points_id: str, op: str, *args: Any) -> dict[str, Any]:
        """One request on the point set's worker, loaded back first if it was evicted; while the
        worker has no room for it (507), idle datasets are evicted and it is asked again."""
        self._admission.admit(owner)
        self._admission.started(owner)
        try:
            handle = self._holder(points_id)
            while True:
                await handle.ensure_resident(points_id)
                handle.touch(points_id)
                try:
                    return await handle.request(op, points_id, *args)
                except InsufficientMemoryError as exc:
                    shortfall = (exc.needed_bytes or 0) - (exc.available_bytes or 0)
                    if await handle.evict(max(shortfall, 1), keep=points_id) == 0:
                        raise
        finally:
            self._admission.finished(owner)

    async def create(self, points_id: str, owner: str, params: dict[str, Any]) -> ModelRecord:
        """Fit a model of ``params`` on the point set and keep it; its record."""
        self._catalog.get(points_id, owner, kind="points")
        self._check_device_quota(owner, 1)  # a key at its device quota fits nothing
        model_id = new_id("m")
        summary = await self._request(owner, points_id, FIT, model_id, params)
        record = ModelRecord(
            id=model_id,
            points_id=points_id,
            created_at=time.time(),
            params=json.dumps(params, sort_keys=True, separators=(",", ":")),
            num_clusters=int(summary["num_clusters"]),
            num_noise=int(summary["num_noise"]),
            model_bytes=int(summary["model_bytes"]),
            num_points=int(summary["num_points"]),
            dims=int(summary["dims"]),
            owner=owner,
        )
        try:
            self._check_device_quota(owner, record.model_bytes)
            if self._store.get_graph(points_id) is None:  # deleted while it was fitted
                raise PointSetNotFoundError(f"point set {points_id!r} was deleted during the fit.")
            self._store.add_model(record)
        except BaseException:
            await self._drop(points_id, model_id)
            raise
        self._cache[model_id] = record
        self._resize(points_id, summary)
        return replace(record)

    def _check_device_quota(self, owner: str, model_bytes: int) -> None:
        limit = self._supervisor.settings.quota_device_bytes
        if not limit:
            return
        _, used = self._store.graph_usage(owner)
        if used + model_bytes > limit:
            raise DeviceQuotaExceededError(
                f"this API key's graphs, point sets and models hold {used} device bytes and a model "
                f"would add {model_bytes if model_bytes > 1 else 'more'}; its quota "
                f"MST_QUOTA_DEVICE_BYTES is {limit}. Delete models or point sets you no longer need.",
                quota="MST_QUOTA_DEVICE_BYTES",
                limit=limit,
                used=used,
            )

    def get(self, points_id: str, model_id: str, owner: str) -> ModelRecord:
        """The model's record; 404 when the point set is not ``owner``'s or holds no such model."""
        self._catalog.get(points_id, owner, kind="points")
        record = self._cache.get(model_id) or self._store.get_model(model_id)
        if record is None or record.points_id != points_id:
            raise ModelNotFoundError(f"point set {points_id} has no model {model_id!r}.")
        self._cache[model_id] = record
        return record

    def owned(self, points_id: str, owner: str) -> list[ModelRecord]:
        self._catalog.get(points_id, owner, kind="points")
        return self._store.list_models(points_id)

    async def delete(self, points_id: str, model_id: str, owner: str) -> None:
        self.get(points_id, model_id, owner)
        self._store.delete_model(model_id)
        self._cache.pop(model_id, None)
        await self._drop(points_id, model_id)

    def forget(self, points_id: str) -> None:
        """Drop the cached records of a deleted point set's models."""
        for model_id in [m for m, r in self._cache.items() if r.points_id == points_id]:
            del self._cache[model_id]

    async def _drop(self, points_id: str, model_id: str) -> None:
        handle = self._supervisor.holder(points_id)
        if handle is not None and handle.accepting:  # a worker starting again holds no model anyway
            self._resize(points_id, await handle.request(DROP_MODEL, points_id, model_id))

    def _resize(self, points_id: str, summary: dict[str, Any]) -> None:
        """Record the point set's bytes on its worker, models included (eviction frees them all)."""
        handle = self._supervisor.holder(points_id)
        residency = None if handle is None else handle.graphs.get(points_id)
        if residency is not None and residency.status == "resident":
            residency.device_bytes = int(summary["device_bytes"])

    async def predict(
        self,
        model: ModelRecord,
        owner: str,
        queries: Any,
        fmt: str | None,
        membership: bool,
        steps: Steps | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The summary and the arrays (``labels``, ``probabilities``, with ``membership`` the
        ``membership`` vectors) of new points: an array, or a body's bytes in ``fmt``.

        ``steps`` gets ``worker`` (the round trip) and its parts: ``send`` (admitted, then the
        request written, read and unpickled by the worker until its handler began, behind any other
        request there), the worker's
        own ``w-read`` (a binary body parsed), ``w-fit`` (a model fitted again), ``w-predict``,
        and ``reply`` (the answer pickled, sent and read back here)."""
        sent = time.monotonic()
        summary = await self._request(
            owner,
            model.points_id,
            PREDICT,
            model.id,
            json.loads(model.params),
            (model.num_points, model.dims),
            queries,
            fmt,
            membership,
        )
        replied = time.monotonic()
        arrays: dict[str, Any] = summary.pop(INLINE)
        if steps is not None:
            steps.lap("worker")
            steps.add(_round_trip(sent, replied, summary), "")
        # fitted again, or the exemplars' indexes built by a membership request: the point set's
        # worker holds more now, and the model's record (its owner's device quota counts it) says so
        self._resize(model.points_id, summary)
        held = int(summary.get("model_bytes", model.model_bytes))
        if held != model.model_bytes:
            self._store.set_model_bytes(model.id, held)
            self._cache[model.id] = replace(model, model_bytes=held)
        return summary, arrays


def _round_trip(sent: float, replied: float, summary: dict[str, Any]) -> dict[str, float]:
    """A prediction's round trip to its worker in parts (ms; see :meth:`Models.predict`).
    ``sent``, ``replied``: ``time.monotonic()`` here; the worker's :data:`SERVED` says when it
    began (the same clock on one host) and how long it took."""
    begun, worker_ms = summary.get(SERVED, (None, 0.0))
    own = {f"w-{name}": ms for name, ms in summary.get("timings_ms", {}).items()}
    if begun is None or not sent <= begun <= replied:  # no comparable clock (a Ray worker elsewhere)
        return {"send": max((replied - sent) * 1e3 - worker_ms, 0.0), **own}
    send = (begun - sent) * 1e3
    return {"send": send, **own, "reply": max((replied - sent) * 1e3 - send - worker_ms, 0.0)}
