"""Test-only: a worker process's warm-up waits for a gate file, so a test can look at the service
while its worker is warming up.

Where ``MST_TEST_WARM_UP_GATE`` names a path, a worker process (``mst-worker-*``) that reaches its
kernels' warm-up (``gpu_core._warm_up.warm_start``, which its start calls after the engine's
imports and the device) first creates ``<gate>.<pid>.waiting``, then waits until ``<gate>``
exists. ``tests/service/test_head_start.py`` puts this folder first on ``PYTHONPATH`` (Python
imports ``sitecustomize`` at start-up; spawned workers inherit it). A production process never
loads it.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

GATE_ENV = "MST_TEST_WARM_UP_GATE"


def _install(gate: str) -> None:
    import gpu_core._warm_up as warm

    original = warm.warm_start

    def gated(*args: Any, **kwargs: Any) -> Any:
        if multiprocessing.current_process().name.startswith("mst-worker"):
            Path(f"{gate}.{os.getpid()}.waiting").touch()
            while not Path(gate).exists():
                time.sleep(0.01)
        return original(*args, **kwargs)

    warm.warm_start = gated


if os.environ.get(GATE_ENV):
    _install(os.environ[GATE_ENV])
