"""Jobs on sharded graphs: every shard's forest on its own worker, then the union's on one worker.

A graph whose edges do not fit one worker (or that the client or ``MST_SHARD_EDGES_ABOVE``
asks to shard) is stored whole in the spool and held as ``k`` shards, the contiguous edge-id
ranges of :func:`gpu_core.edge_ranges`, shard ``i`` resident on a worker under
:func:`~service.runtime.supervisor.shard_key` ``(graph id, i)`` like any graph (evicted,
reloaded after a restart, dropped on delete).

A job on it is a :class:`ShardedRun`:

1. a :class:`ShardStep` is queued on each shard's worker (they run in parallel, each in its
   worker's queue order): the shard's spanning forest (of the job's objective, without the
   job's excluded edges that fall in the shard), written to a tmp file as a plain MST result;
2. once all are written, a :class:`MergeStep` is queued on the worker with the most free
   memory: the task itself (``mst``, ``components``, ``clusters``, ``dendrogram``) on the
   union of the shard forests, whose positions ascend with the global edge ids, so the tie
   order is the whole graph's (see :mod:`gpu_core._shards`). Its result file is the job's.

The job is ``running`` from the moment its first step is handed to a worker; until then it
can be cancelled (every step is taken out of its queue). Any step that fails fails the job with
that step's error (a worker lost while running a step: ``worker_lost``, not retried, as for an
unsharded job; a step handed to a worker that died before running it goes to its next process);
the steps still queued are taken back, those running finish unheard.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gpu_core

from ..errors import InsufficientMemoryError, ServiceUnavailableError, dataset_not_found
from ..storage.records import JobRecord
from ..storage.store import Store
from .pool.dispatch import WorkerCalls, new_future, settle_from
from .pool.handle import WorkerHandle
from .supervisor import Supervisor
from .worker.protocol import MERGE, MST

log = logging.getLogger("service.runtime.sharding")


class Abandoned(Exception):
    """A step will never run (the service is stopping): the job is left as it is in the store."""


def _consume(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def shard_params(task: str, params: dict[str, Any], lo: int, hi: int) -> dict[str, Any]:
    """The MST parameters of a task's step on shard ``[lo, hi)``: the forest the task needs
    (``max`` for a maximum forest), without the excluded edges of the shard (local ids)."""
    out: dict[str, Any] = {}
    if task == "mst" and params.get("objective", "min") != "min":
        out["objective"] = params["objective"]
    exclude = params.get("exclude")
    if exclude is not None and task in ("mst", "components"):
        out["exclude"] = [int(e) - lo for e in exclude if lo <= int(e) < hi]
    return out


def merge_params(task: str, params: dict[str, Any]) -> dict[str, Any]:
    """The task's parameters for the union (the shards have left the excluded edges out already)."""
    return {k: v for k, v in params.items() if k != "exclude"}


@dataclass
class ShardStep:
    """One shard's forest, in the queue of the worker that holds the shard."""

    task_id: str
    #: the shard's residency key (so the worker never evicts it while this step waits)
    graph_id: str
    params: dict[str, Any]
    out: str
    #: called when the step is handed to its worker; False: the job is gone, do not run
    start: Callable[[], bool]
    done: asyncio.Future[Any] = field(default_factory=new_future)

    async def run(self, worker: WorkerCalls) -> None:
        if self.done.done():
            return
        if not self.start():
            self.done.cancel()
            return
        await settle_from(self.done, self._ask(worker))

    async def _ask(self, worker: WorkerCalls) -> Any:
        await worker.ensure_resident(self.graph_id)
        worker.touch(self.graph_id)
        summary, stored = await worker.request_with_note(MST, self.graph_id, self.out, "mst", self.params)
        await stored
        return summary

    def abandon(self, reason: str) -> None:
        if not self.done.done():
            self.done.set_exception(Abandoned(reason))


@dataclass
class MergeStep:
    """The task on the union of the shard forests, on one worker."""

    task_id: str
    args: tuple[Any, ...]
    graph_id: None = None
    done: asyncio.Future[Any] = field(default_factory=new_future)

    async def run(self, worker: WorkerCalls) -> None:
        await settle_from(self.done, self._ask(worker))

    async def _ask(self, worker: WorkerCalls) -> tuple[dict[str, Any], asyncio.Future[None]]:
        while True:  # no room for the union: evict idle graphs, as a load does
            try:
                return await worker.request_with_note(MERGE, *self.args)
            except InsufficientMemoryError as exc:
                shortfall = (exc.needed_bytes or 0) - (exc.available_bytes or 0)
                if await worker.evict(max(shortfall, 1)) == 0:
                    raise

    def abandon(self, reason: str) -> None:
        if not self.done.done():
            self.done.set_exception(Abandoned(reason))


class ShardedRun:
    """One job (or a lost result's recomputation) on a sharded graph; see the module's docstring."""

    def __init__(
        self,
        supervisor: Supervisor,
        run_id: str,
        graph_id: str,
        graph_path: str,
        num_vertices: int,
        num_edges: int,
        shards: list[tuple[str, WorkerHandle]],
        task: str,
        params: dict[str, Any],
        result_path: str,
        tmp_path: Callable[[], Path],
        on_start: Callable[[], bool] = lambda: True,
    ) -> None:
        self._supervisor = supervisor
        self.run_id = run_id
        self.graph_id = graph_id
        self._graph_path = graph_path
        self._num_vertices = num_vertices
        self._task, self._params = task, params
        self._result_path = result_path
        self._on_start = on_start
        #: whether a step has been handed to a worker (then the job is running)
        self.started = False
        self._ranges = gpu_core.edge_ranges(num_edges, len(shards))
        self._outs = [tmp_path() for _ in shards]
        self._steps = [
            (
                handle,
                ShardStep(
                    f"{run_id}.s{i}",
                    key,
                    shard_params(task, params, lo, hi),
                    str(out),
                    self._start,
                ),
            )
            for i, ((key, handle), (lo, hi), out) in enumerate(
                zip(shards, self._ranges, self._outs, strict=True)
            )
        ]
        for _, step in self._steps:
            step.done.add_done_callback(_consume)

    def _start(self) -> bool:
        if not self.started:
            self.started = self._on_start()
        return self.started

    def withdraw(self) -> None:
        """Take the steps still queued out of their queues (a cancel, or another step failed)."""
        for handle, step in self._steps:
            if handle.remove(step.task_id) is not None and not step.done.done():
                step.done.cancel()

    async def run(self) -> tuple[dict[str, Any], asyncio.Future[None]]:
        """Every shard's forest, then the union's task: (its summary, the note of its result file).

        Raises the first failing step's error; :class:`Abandoned` when the service stops first,
        :class:`asyncio.CancelledError` when the job was cancelled before it started.
        """
        try:
            for handle, step in self._steps:
                handle.enqueue(step)
            try:
                summaries = await asyncio.gather(*(step.done for _, step in self._steps))
            except BaseException:
                self.withdraw()
                raise
            parts = [(str(out), lo) for out, (lo, _) in zip(self._outs, self._ranges, strict=True)]
            args = (
                self._graph_path,
                self._num_vertices,
                parts,
                self._task,
                merge_params(self._task, self._params),
                self._result_path,
            )
            handle = self._supervisor.place(0)
            merge = MergeStep(f"{self.run_id}.merge", args)
            merge.done.add_done_callback(_consume)
            handle.enqueue(merge)
            try:
                summary, stored = await merge.done
            except BaseException:
                if handle.remove(merge.task_id) is not None and not merge.done.done():
                    merge.done.cancel()
                raise
        finally:  # the union has read them before its answer
            for out in self._outs:
                out.unlink(missing_ok=True)
        summary = dict(summary)
        # the job's computing time: the slowest shard (they run in parallel) plus the union
        summary["compute_ms"] = max(float(s["compute_ms"]) for s in summaries) + float(summary["compute_ms"])
        return summary, stored


def check_shards(graph_id: str, shards: list[tuple[str, WorkerHandle | None]]) -> None:
    """Refuse (503) a job on a sharded graph while one of its shards is not placed on a worker."""
    if any(handle is None for _, handle in shards):
        raise ServiceUnavailableError(
            f"a shard of graph {graph_id} is not placed on any worker yet; retry shortly."
        )


def sharded_run(
    store: Store, supervisor: Supervisor, job: JobRecord, result_path: str, on_start: Callable[[], bool]
) -> ShardedRun:
    """The run of ``job`` on its sharded graph, writing its result to ``result_path`` (404 when the
    graph is gone or not sharded, 503 while a shard is not placed)."""
    record = store.get_graph(job.graph_id)
    shards = supervisor.shard_holders(job.graph_id)
    if record is None or shards is None:
        raise dataset_not_found(job.graph_id)
    check_shards(job.graph_id, shards)
    return ShardedRun(
        supervisor,
        job.id,
        job.graph_id,
        str(store.graph_path(job.graph_id)),
        record.num_vertices,
        record.num_edges,
        [(key, handle) for key, handle in shards if handle is not None],
        job.task,
        json.loads(job.params),
        result_path,
        lambda: store.tmp_path(".npz"),
        on_start,
    )
