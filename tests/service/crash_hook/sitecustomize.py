"""Test-only fault injection: a worker process that computes a forest of a graph holding the weight
``KILL_WEIGHT`` SIGKILLs itself, as a job that crashes its worker would (a segfault, the OOM killer).

Python imports ``sitecustomize`` at start-up from the first folder of ``sys.path`` that has one;
``tests/service/live.py`` (``CRASH_HOOK_ENV``) puts this folder first on ``PYTHONPATH`` for the
servers that need it, and their worker processes (spawned, so they start Python afresh) inherit
it. Nothing of this exists in the service: a production process never loads it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from typing import Any

#: a weight no test graph has by chance
KILL_WEIGHT = -987_654_321


def _install() -> None:
    import numpy as np

    import gpu_core

    compute = gpu_core.Graph.minimum_spanning_forest

    def forest(self: Any, *args: Any, **kwargs: Any) -> Any:
        worker = multiprocessing.current_process().name.startswith("mst-worker")
        if worker and self.num_edges and bool(np.any(self.weights() == KILL_WEIGHT)):
            os.kill(os.getpid(), signal.SIGKILL)
        return compute(self, *args, **kwargs)

    gpu_core.Graph.minimum_spanning_forest = forest  # type: ignore[method-assign]


_install()
