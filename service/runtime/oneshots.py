"""One-shot computations (``POST /v1/mst``): an uploaded graph's forest, nothing stored.

A one-shot counts against its owner's queued jobs (:mod:`.admission`), waits in the queue of
the worker with the most free memory like a job, and is handed to it beyond
``MST_DISPATCH_DEPTH`` (``batched``: the worker computes those waiting together as one union,
see :mod:`service.runtime.worker.oneshots`). Its forest comes back in the worker's reply when
it is small (``MST_ONESHOT_INLINE_BYTES``), else in a result file the caller removes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..metrics import Metrics
from ..storage.records import new_id
from ..storage.store import Store
from .admission import Admission
from .pool.dispatch import QueuedRequest, WorkerCalls, await_queued, new_future
from .supervisor import Supervisor
from .worker.protocol import BATCH_MEMBERS, INLINE, ONESHOT


@dataclass
class OneShotTask(QueuedRequest):
    """A one-shot computation waiting for its turn on a worker."""

    pipelined: ClassVar[bool] = True
    #: handed to the worker beyond MST_DISPATCH_DEPTH (see pool.dispatch.BATCHED_DEPTH)
    batched: ClassVar[bool] = True

    task_id: str
    #: the upload's spool file
    path: str
    fmt: str
    result_path: str
    done: asyncio.Future[Any] = field(default_factory=new_future)

    async def ask(self, worker: WorkerCalls) -> dict[str, Any]:
        return await worker.request(ONESHOT, self.path, self.fmt, None, self.result_path)


class OneShots:
    """The one-shot computations of the service."""

    def __init__(self, store: Store, supervisor: Supervisor, admission: Admission, metrics: Metrics) -> None:
        self._store = store
        self._supervisor = supervisor
        self._admission = admission
        self._metrics = metrics

    def admit(self, owner: str) -> None:
        """Refuse a one-shot of ``owner`` before its body is read (quota, full queues)."""
        self._admission.admit(owner)

    async def compute(
        self, path: Path, fmt: str, estimate: int, owner: str
    ) -> tuple[dict[str, Any], Path | dict[str, Any]]:
        """Compute the forest of an uploaded file without storing anything; (summary, the result:
        its arrays ``edge_ids`` and ``weights`` when small, see ``MST_ONESHOT_INLINE_BYTES``, else
        its file, which the caller removes)."""
        self._admission.admit(owner)
        self._admission.started(owner)
        try:
            return await self._compute(path, fmt, estimate)
        finally:
            self._admission.finished(owner)

    async def _compute(
        self, path: Path, fmt: str, estimate: int
    ) -> tuple[dict[str, Any], Path | dict[str, Any]]:
        handle = self._supervisor.place(estimate)
        result = self._store.tmp_path(".npz")
        task = OneShotTask(new_id("o"), str(path), fmt, str(result))
        try:
            summary: dict[str, Any] = await await_queued(handle.dispatch, task)
        except BaseException:
            result.unlink(missing_ok=True)
            raise
        self._metrics.oneshot_batch_members.observe(summary.pop(BATCH_MEMBERS, 1))
        arrays: dict[str, Any] | None = summary.pop(INLINE, None)
        return summary, result if arrays is None else arrays
