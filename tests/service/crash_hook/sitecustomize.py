"""Test-only fault injection in the worker processes of a test's server.

* A worker that computes a forest of a graph holding the weight ``KILL_WEIGHT`` SIGKILLs itself,
  as a job that crashes its worker would (a segfault, the OOM killer).
* A worker that computes a forest of a graph holding a weight ``w`` in
  ``[HOLD_WEIGHT, HOLD_WEIGHT + HOLD_RANGE)`` first writes ``<MST_TEST_HOLD_DIR>/<w>.running`` and
  then waits while ``<MST_TEST_HOLD_DIR>/<w>`` exists: a test holds a job *running* for as long as
  it needs (``tests/service/live.py``, ``LiveServer.hold``).

Python imports ``sitecustomize`` at start-up from the first folder of ``sys.path`` that has one;
``tests/service/live.py`` (``CRASH_HOOK_ENV``) puts this folder first on ``PYTHONPATH`` for the
servers that need it, and their worker processes (spawned, so they start Python afresh) inherit
it. Nothing of this exists in the service: a production process never loads it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

#: a weight no test graph has by chance
KILL_WEIGHT = -987_654_321
#: the first weight that holds a job running, and how many such weights there are
HOLD_WEIGHT = -555_000_000
HOLD_RANGE = 100_000


def _hold(weights: Any) -> None:
    import numpy as np

    folder = os.environ.get("MST_TEST_HOLD_DIR")
    if not folder:
        return
    held = weights[(weights >= HOLD_WEIGHT) & (weights < HOLD_WEIGHT + HOLD_RANGE)]
    for value in np.unique(held).tolist():
        gate = Path(folder) / str(int(value))
        gate.with_suffix(".running").touch()
        while gate.exists():
            time.sleep(0.01)


def _install() -> None:
    import numpy as np

    import gpu_core

    compute = gpu_core.Graph.minimum_spanning_forest

    def forest(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.num_edges and multiprocessing.current_process().name.startswith("mst-worker"):
            weights = self.weights()
            if bool(np.any(weights == KILL_WEIGHT)):
                os.kill(os.getpid(), signal.SIGKILL)
            _hold(weights)
        return compute(self, *args, **kwargs)

    gpu_core.Graph.minimum_spanning_forest = forest  # type: ignore[method-assign]


_install()
