"""HDBSCAN* models kept resident with their point sets, and the predictions they answer.

A model is fitted on a point set's worker (``FIT``) and stays there beside the point set; its
record (parameters, clusters, bytes) is in the store, so every API process sees it and it
survives any restart. A worker
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

from ..errors import DeviceQuotaExceededError, ModelNotFoundError, PointSetNotFoundError
from ..settings import Settings
from ..storage.records import ModelRecord, new_id
from ..storage.store import Store
from ..timing import Steps
from .admission import Admission
from .catalog import Catalog
from .links.fleet import Fleet
from .links.link import WorkerLink
from .metric_checks import refuse_metric
from .worker.protocol import DROP_MODEL, FIT, INLINE, PREDICT, SERVED


class Models:
    """The models of the stored point sets (their records in the store)."""

    def __init__(
        self, settings: Settings, store: Store, fleet: Fleet, catalog: Catalog, admission: Admission
    ) -> None:
        self._settings = settings
        self._store = store
        self._fleet = fleet
        self._catalog = catalog
        self._admission = admission

    def _link(self, points_id: str) -> WorkerLink:
        placements = self._store.placements_of(points_id)
        if not placements:
            raise PointSetNotFoundError(f"no point set has id {points_id!r}.")
        return self._fleet.link(placements[0].worker)

    async def _request(self, owner: str, points_id: str, op: str, *args: Any) -> dict[str, Any]:
        """One request on the point set's worker (which loads it back first if it was evicted, and
        evicts idle datasets while it has no room), counted against the owner's quota meanwhile."""
        token = new_id("t")
        taken = self._admission.admit(owner, token)
        try:
            answer: dict[str, Any] = await self._link(points_id).call(op, points_id, *args)
            return answer
        finally:
            if taken:
                self._admission.release(token)

    async def create(self, points_id: str, owner: str, params: dict[str, Any]) -> ModelRecord:
        """Fit a model of ``params`` on the point set and keep it; its record."""
        refuse_metric(self._catalog.get(points_id, owner, kind="points"), params)
        self._device_quota(owner, 1)(*self._store.graph_usage(owner))  # a key at its quota fits nothing
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
            if not self._store.add_model(record, self._device_quota(owner, record.model_bytes)):
                raise PointSetNotFoundError(f"point set {points_id!r} was deleted during the fit.")
        except BaseException:
            await self._drop(points_id, model_id)
            raise
        return replace(record)

    def _device_quota(self, owner: str, model_bytes: int) -> Any:
        limit = self._settings.quota_device_bytes

        def check(count: int, used: int) -> None:
            del count
            if limit and used + model_bytes > limit:
                raise DeviceQuotaExceededError(
                    f"this API key's graphs, point sets and models hold {used} device bytes and a model "
                    f"would add {model_bytes if model_bytes > 1 else 'more'}; its quota "
                    f"MST_QUOTA_DEVICE_BYTES is {limit}. Delete models or point sets you no longer need.",
                    quota="MST_QUOTA_DEVICE_BYTES",
                    limit=limit,
                    used=used,
                )

        return check

    def get(self, points_id: str, model_id: str, owner: str) -> ModelRecord:
        """The model's record; 404 when the point set is not ``owner``'s or holds no such model."""
        self._catalog.get(points_id, owner, kind="points")
        record = self._store.get_model(model_id)
        if record is None or record.points_id != points_id:
            raise ModelNotFoundError(f"point set {points_id} has no model {model_id!r}.")
        return record

    def owned(self, points_id: str, owner: str) -> list[ModelRecord]:
        self._catalog.get(points_id, owner, kind="points")
        return self._store.list_models(points_id)

    async def delete(self, points_id: str, model_id: str, owner: str) -> None:
        self.get(points_id, model_id, owner)
        self._store.delete_model(model_id)
        await self._drop(points_id, model_id)

    async def _drop(self, points_id: str, model_id: str) -> None:
        link = self._link(points_id)
        if link.connected:  # a worker starting again holds no model anyway
            await link.call(DROP_MODEL, points_id, model_id)

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
        request there), the worker's own ``w-read`` (a binary body parsed), ``w-fit`` (a model
        fitted again), ``w-predict``, and ``reply`` (the answer pickled, sent and read back here)."""
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
        # a membership request built the exemplars' indexes: the model holds more now, and its record
        # (its owner's device quota counts it) says so
        held = int(summary.get("model_bytes", model.model_bytes))
        if held != model.model_bytes:
            self._store.set_model_bytes(model.id, held)
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
