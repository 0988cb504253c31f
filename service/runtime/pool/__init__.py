"""The worker pool: the API side of the workers, one handle per worker, behind one interface.

Its parts, top to bottom (each imports only those below it; ``lint-imports`` checks it):

* ``local_pool`` | ``ray_pool``: the two pools (:class:`~.interface.WorkerPool`): worker
  processes on this host, or Ray actors on the hosts of a cluster; neither knows the other, nor
  the supervisor that uses them;
* ``processes``: a worker that is a local process (its pipe, its death, its standby);
* ``interface``: the pool interface the supervisor depends on, and each worker's config;
* ``handle``: one worker as the API sees it, whatever its transport: its life, requests,
  datasets, queue;
* ``dispatch`` | ``requests``: its task queue and dispatcher; its requests from making to answer;
* ``restarts``: what a worker's death does to its requests, and the order of reloads.

:func:`worker_pool` gives the pool ``MST_WORKER_POOL`` names; ``head_start`` (worker 0 and the GPU
probe spawned before the API was built, :mod:`.head_start`) sits below ``processes | interface``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...settings import Settings

if TYPE_CHECKING:  # the pools are imported when one is made: python -m service imports this
    # package to spawn worker 0 (.head_start) before anything heavy (the handle imports the engine)
    from .head_start import HeadStart
    from .interface import WorkerPool


def worker_pool(settings: Settings, head_start: HeadStart | None = None) -> WorkerPool:
    """The pool ``MST_WORKER_POOL`` names (the Ray pool is imported only then: it imports Ray)."""
    if settings.worker_pool == "ray":
        from .ray_pool import RayPool

        if head_start is not None:  # (python -m service begins one for the local pool only)
            head_start.abandon()
        return RayPool(settings)
    from .local_pool import LocalPool

    return LocalPool(settings, head_start)
