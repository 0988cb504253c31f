"""The supervisor: all workers of the service, where each dataset goes, and their health.

The workers come from the pool ``MST_WORKER_POOL`` names (:mod:`service.runtime.pool`: one
worker process per GPU of this host, ``MST_GPUS``, default all visible, or ``MST_CPU_WORKERS``
CPU workers; or Ray actors on the hosts of a cluster), each behind a
:class:`~.pool.handle.WorkerHandle` that owns its life, requests, datasets and queue. The
supervisor depends on the pool's interface only (:class:`~.pool.interface.WorkerPool`).

Placement: a new graph goes to the worker with the most free device memory (as the worker last
reported it, less what is being loaded; CPU workers, which share the host's memory: the one
holding the fewest bytes, :func:`room`); a job goes to the worker that holds its graph. A sharded
graph (see :mod:`service.runtime.sharding`) is placed shard by shard on distinct workers, each
shard held under its own key (:func:`shard_key`) like a graph. At start-up every stored dataset
is placed again, and each worker reloads its own when it is ready.

Health: a heartbeat monitor kills a worker whose heartbeat is older than
``MST_HEARTBEAT_TIMEOUT_S`` once it is up, or that is not up within
``MST_WORKER_START_TIMEOUT_S``; its handle then replaces it (see :mod:`.pool.handle`).
``ready``: some worker takes requests and beats.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable

from ..errors import ServiceUnavailableError
from ..settings import Settings
from .pool import worker_pool
from .pool.handle import WorkerHandle
from .pool.head_start import HeadStart
from .pool.interface import WorkerPool
from .pool.residency import Sources


def shard_key(graph_id: str, index: int) -> str:
    """The residency key of shard ``index`` of a sharded graph (what its worker holds it under)."""
    return f"{graph_id}.s{index}"


def parse_shard_key(key: str) -> tuple[str, int] | None:
    """``(graph id, shard index)`` of a :func:`shard_key`; None for a plain graph id."""
    graph_id, dot, index = key.rpartition(".s")
    if not dot or not index.isdigit():
        return None
    return graph_id, int(index)


def room(worker: WorkerHandle) -> tuple[int, int, int]:
    """How a worker ranks for a new dataset, the highest first: the most free memory (as it last
    reported it, less what is being loaded there); then the shortest queue, the lowest index.

    CPU workers rank by the fewest bytes held instead: they share the host's memory, so their
    free memory is one figure read at different moments, and placing by it put 9 of 16 graphs
    on one of 4 workers and none on another (a worker's jobs run one at a time: the others idled).
    """
    if worker.info.get("backend", worker.config.backend) == "cpu":
        held = sum(r.device_bytes for r in worker.graphs.values() if r.status != "evicted")
        return -(held + worker.reserved_bytes), -worker.queue_depth, -worker.index
    return worker.free_bytes - worker.reserved_bytes, -worker.queue_depth, -worker.index


class Supervisor:
    """All workers of the service, their placement and their health."""

    def __init__(
        self,
        settings: Settings,
        sources: Sources,
        pool: WorkerPool | None = None,
        head_start: HeadStart | None = None,
    ) -> None:
        self.settings = settings
        self._sources = sources
        #: where the workers run (``MST_WORKER_POOL``: this host's processes, or Ray actors);
        #: ``head_start``: worker 0 and the GPU probe already spawned (``python -m service``)
        self._pool = pool if pool is not None else worker_pool(settings, head_start)
        self.workers: list[WorkerHandle] = []
        self._monitor: asyncio.Task[None] | None = None
        #: sharded graphs and their shard counts; shard i is placed as :func:`shard_key` ``(id, i)``
        self.sharded: dict[str, int] = {}

    async def start(self) -> None:
        self.workers = await self._pool.start(self._sources)
        self._monitor = asyncio.create_task(self._watch(), name="heartbeat-monitor")

    async def stop(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        await asyncio.gather(*(w.stop() for w in self.workers))
        await self._pool.stop()

    async def _watch(self) -> None:
        interval = self.settings.heartbeat_interval_s
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for handle in self.workers:
                handle.check_spare(now)
                if handle.state in ("dead", "stopped"):
                    continue
                age = handle.heartbeat_age()
                # a starting worker is judged by MST_WORKER_START_TIMEOUT_S only: imports may be slow
                if handle.state != "starting" and age > self.settings.heartbeat_timeout_s:
                    handle.kill(f"no heartbeat for {age:.1f} s (MST_HEARTBEAT_TIMEOUT_S)")
                elif (
                    handle.state == "starting"
                    and now - handle.started_at > self.settings.worker_start_timeout_s
                ):
                    limit = self.settings.worker_start_timeout_s
                    handle.kill(f"not ready after {limit} s (MST_WORKER_START_TIMEOUT_S)")

    @property
    def ready(self) -> bool:
        return any(
            w.accepting and w.heartbeat_age() <= self.settings.heartbeat_timeout_s for w in self.workers
        )

    def place(self, estimate: int) -> WorkerHandle:
        """The worker for a new graph: the most room (:func:`room`) among those running (or starting)."""
        candidates = [w for w in self.workers if w.state != "stopped"]
        if not candidates:
            raise ServiceUnavailableError("no worker is running; the service is shutting down.")
        running = [w for w in candidates if w.accepting] or candidates
        return max(running, key=room)

    def holder(self, graph_id: str) -> WorkerHandle | None:
        for handle in self.workers:
            if graph_id in handle.graphs:
                return handle
        return None

    def place_shards(self, count: int) -> list[WorkerHandle]:
        """The workers for the ``count`` shards of a new graph: distinct workers, most free memory
        first (a worker takes a second shard only when there are more shards than workers)."""
        first = self.place(0)
        others = sorted(
            (w for w in self.workers if w is not first and w.state != "stopped"), key=room, reverse=True
        )
        ordered = [first, *others]
        return [ordered[i % len(ordered)] for i in range(count)]

    def shard_holders(self, graph_id: str) -> list[tuple[str, WorkerHandle | None]] | None:
        """Each shard's key and the worker holding it, in edge order; None when the graph is not sharded."""
        count = self.sharded.get(graph_id)
        if count is None:
            return None
        return [(key, self.holder(key)) for key in (shard_key(graph_id, i) for i in range(count))]

    def place_existing_shards(self, graph_id: str, count: int, device_bytes: int) -> None:
        """Place a stored sharded graph at start-up, its shards on distinct workers (as far as there
        are workers), the least loaded first; each worker reloads its own when ready."""
        ranked = sorted(
            self.workers,
            key=lambda w: (sum(r.device_bytes for r in w.graphs.values()), len(w.graphs), w.index),
        )
        self.sharded[graph_id] = count
        for i in range(count):
            handle, key = ranked[i % len(ranked)], shard_key(graph_id, i)
            handle.datasets.place(key, device_bytes // max(count, 1))

    def place_existing(self, graph_ids: Iterable[tuple[str, int, int]]) -> None:
        """Place stored graphs (id, device bytes, weights version) at start-up; each worker reloads
        its own when ready."""
        for graph_id, nbytes, version in graph_ids:
            handle = max(
                self.workers,
                key=lambda w: (-sum(r.device_bytes for r in w.graphs.values()), -len(w.graphs), -w.index),
            )
            handle.datasets.place(graph_id, nbytes, weights_version=version)
