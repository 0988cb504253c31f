"""The worker process's entry point, as light to import as can be.

``spawn`` pickles a process's target by name, so the API process imports the target's module to
start a worker and the child imports it again before anything runs: this module imports nothing
of the engine. :func:`main` notes when the child got here (the end of its ``process`` phase:
the interpreter and the imports ``spawn`` makes), ignores Ctrl-C (which stops the API, which
stops its workers), pins the worker's GPU with ``CUDA_VISIBLE_DEVICES`` before anything can load
CUDA, and only then imports the worker (:mod:`.process`, and through it gpu_core).
"""

from __future__ import annotations

import os
import signal
import time
from multiprocessing.connection import Connection
from typing import Any

from .protocol import WorkerConfig


def main(conn: Connection, heartbeat: Any, config: WorkerConfig, running: Any = None) -> None:
    """Entry point of a spawned worker process (see :func:`.process.main` for the arguments)."""
    entered = time.monotonic()  # system-wide on Linux: the handle compares it with its spawn time
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if config.cuda_device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = config.cuda_device
    from .process import main as run

    run(conn, heartbeat, config, running, entered=entered)
