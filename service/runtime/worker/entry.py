"""The entry points of the processes the supervisor spawns (a worker, the GPU probe), light to import.

``spawn`` pickles a process's target by name, so the supervisor imports the target's module to
start a worker and the child imports it before anything runs: this module imports nothing of the
engine. :func:`main` notes when the child got here (the end of its ``process`` phase: the
interpreter and what ``spawn`` imports), ignores Ctrl-C (which stops the supervisor, which stops
its workers), pins the worker's GPU with ``CUDA_VISIBLE_DEVICES`` before anything can load CUDA,
and only then imports the worker (:mod:`.process`, and through it gpu_core: its ``modules``
step). :func:`probe` is the throw-away child that tells the supervisor which backend and how
many GPUs, so that no process of the service but the workers ever loads CUDA.
"""

from __future__ import annotations

import os
import signal
import time
from multiprocessing.connection import Connection
from typing import Any

from .protocol import WorkerConfig


def main(config: WorkerConfig, board: Any, supervisor: Connection) -> None:
    """Entry point of a spawned worker process (see :func:`.process.main` for the arguments)."""
    entered = time.monotonic()  # system-wide on Linux: the supervisor compares it with its spawn time
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if config.cuda_device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = config.cuda_device
    from .process import main as run

    run(config, board, supervisor, entered=entered)


def probe(conn: Connection, backend: str) -> None:
    """Entry point of the probe process: resolve ``backend`` and count the CUDA devices; sends
    ``(backend, count, None)``, or ``("cpu", 0, error)`` where that failed."""
    try:
        import gpu_core

        chosen = gpu_core.resolve_backend(backend)
        count = 0
        if chosen == "gpu":
            import cupy

            count = int(cupy.cuda.runtime.getDeviceCount())
        conn.send((chosen, count, None))
    except Exception as exc:
        conn.send(("cpu", 0, f"{type(exc).__name__}: {exc}"))
    conn.close()
