"""Client processes for the load benchmarks: many connections without one interpreter's lock.

One Python process tops out near a thousand small requests a second, and its threads' waits for
its lock would count as the server's latency; :func:`run_client_processes` spreads the clients
over several ``spawn`` processes that start together (a barrier) and hand back what they measured.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from typing import Any

_MP = multiprocessing.get_context("spawn")


def run_client_processes(
    target: Callable[..., None],
    clients: int,
    processes: int,
    duration_s: float,
    args_of: Callable[[int, int], tuple[Any, ...]],
) -> tuple[list[Any], float, int]:
    """Run ``clients`` clients in ``min(processes, clients)`` processes for ``duration_s`` seconds.

    Process ``i`` runs ``target(*args_of(share, first), barrier, out)``: ``share`` clients, the
    first of them numbered ``first``; it waits at ``barrier`` and puts one result on ``out``.
    Returns the results, the seconds from the start to the last result, and the process count.
    """
    procs = max(1, min(processes, clients))
    shares = [clients // procs + (i < clients % procs) for i in range(procs)]
    barrier = _MP.Barrier(procs + 1)
    out = _MP.Queue()
    children = [
        _MP.Process(target=target, args=(*args_of(share, sum(shares[:i])), barrier, out), daemon=True)
        for i, share in enumerate(shares)
    ]
    for child in children:
        child.start()
    barrier.wait(timeout=120)
    started = time.perf_counter()
    parts = [out.get(timeout=duration_s + 300) for _ in children]
    elapsed = time.perf_counter() - started
    for child in children:
        child.join(30)
    return parts, elapsed, procs
