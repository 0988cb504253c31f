"""The worker pool: where the workers run, behind one interface the supervisor depends on.

Two implementations, side by side, neither importing its caller: the local pool (worker
processes on this host, :mod:`.local_pool`) and the Ray pool (Ray actors on the hosts of a
cluster, :mod:`.ray_pool`); ``MST_WORKER_POOL`` picks one (:func:`service.runtime.pool.worker_pool`).
"""

from __future__ import annotations

from typing import Protocol

from ...settings import Settings
from ..worker.protocol import WorkerConfig
from .handle import WorkerHandle
from .residency import Sources


class WorkerPool(Protocol):
    """Starts the workers of the service and stops what holds them."""

    async def start(self, sources: Sources) -> list[WorkerHandle]:
        """Plan the workers, make a started handle for each (``sources``: where each reloads a
        placed dataset from); the handles, in worker order."""
        ...

    async def stop(self) -> None:
        """Once every handle has stopped: let go of what the pool holds beyond them."""
        ...


def worker_config(settings: Settings, index: int, backend: str, device: str | None) -> WorkerConfig:
    """The config of worker ``index`` (on ``backend``, CUDA_VISIBLE_DEVICES ``device``)."""
    return WorkerConfig(
        index=index,
        backend=backend,
        cuda_device=device,
        tmp_dir=str(settings.spool_dir / "tmp"),
        max_edges=settings.max_edges,
        memory_bytes=settings.worker_memory_bytes,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        spin_s=settings.worker_spin_ms / 1e3,
        max_vertices=settings.max_vertices,
        max_inflated_bytes=settings.max_inflated_bytes,
        max_compression_ratio=settings.max_compression_ratio,
        coalesce=settings.coalesce_jobs,
        oneshot_batch_edges=settings.oneshot_batch_edges,
        oneshot_inline_bytes=settings.oneshot_inline_bytes,
    )
