"""One-shot computations (``POST /v1/mst``): an uploaded graph's forest, nothing stored.

A one-shot counts against its owner's queued jobs (:mod:`.admission`) while it runs, goes to the
worker with the most room like a new dataset, and waits in its queue like a job; the worker
computes those waiting together as one union (see :mod:`service.runtime.worker.oneshots`). Its
forest comes back in the worker's reply when it is small (``MST_ONESHOT_INLINE_BYTES``), else in
a result file the caller removes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..metrics import Metrics
from ..storage.records import new_id
from ..storage.store import Store
from .admission import Admission
from .links.fleet import Fleet
from .worker.protocol import BATCH_MEMBERS, INLINE, ONESHOT


class OneShots:
    """The one-shot computations of this API process."""

    def __init__(self, store: Store, fleet: Fleet, admission: Admission, metrics: Metrics) -> None:
        self._store = store
        self._fleet = fleet
        self._admission = admission
        self._metrics = metrics

    def admit(self, owner: str) -> str | None:
        """Refuse a one-shot of ``owner`` before its body is read (quota, full queues); its quota
        token (None without a quota), for :meth:`release`."""
        token = new_id("o")
        return token if self._admission.admit(owner, token) else None

    def release(self, token: str | None) -> None:
        if token is not None:
            self._admission.release(token)

    async def compute(self, path: Path, fmt: str) -> tuple[dict[str, Any], Path | dict[str, Any]]:
        """Compute the forest of an uploaded file without storing anything; (summary, the result:
        its arrays ``edge_ids`` and ``weights`` when small, see ``MST_ONESHOT_INLINE_BYTES``, else
        its file, which the caller removes)."""
        link = self._fleet.link(self._fleet.place())
        result = self._store.tmp_path(".npz")
        try:
            summary: dict[str, Any] = await link.call(ONESHOT, str(path), fmt, None, str(result))
        except BaseException:
            result.unlink(missing_ok=True)
            raise
        self._metrics.oneshot_batch_members.observe(summary.pop(BATCH_MEMBERS, 1))
        arrays: dict[str, Any] | None = summary.pop(INLINE, None)
        return summary, result if arrays is None else arrays
