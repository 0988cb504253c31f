"""The worker pool: where the workers run, behind one interface the supervisor depends on.

Two implementations, side by side, neither importing its caller: the local pool (worker
processes on this host, :mod:`.local_pool`) and the Ray pool (Ray actors on the hosts of a
cluster, :mod:`.ray_pool`); ``MST_WORKER_POOL`` picks one (:func:`service.runtime.pool.worker_pool`).
"""

from __future__ import annotations

from typing import Protocol

from .handle import WorkerHandle
from .head_start import worker_config
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


__all__ = ["WorkerPool", "worker_config"]
