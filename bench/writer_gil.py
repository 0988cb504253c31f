"""A worker's result writer beside a busy loop: how long one file takes at each GIL switch interval.

    python -m bench.writer_gil [--seconds 3] [--intervals 5,1,0.2]

The main thread runs Python without pause (as a worker's loop does under load) while a second
thread writes result files of an RMAT 2^16 forest (65,535 edges: 786 KB, npz, handed to the disk
as the worker does); printed per switch interval: files written, their p50 and p99 in ms. The
writer gives the GIL up at each system call and waits for it back: at most a switch interval
each time (``service/runtime/worker/writer.py``'s ``SWITCH_INTERVAL_S``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from service.storage import npzio


def one_interval(interval_s: float, seconds: float, folder: Path) -> dict[str, Any]:
    ids = np.arange(65_535, dtype=np.int64)
    weights = np.random.default_rng(0).random(65_535).astype(np.float32)
    stop = threading.Event()
    took: list[float] = []

    def write() -> None:
        i = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            npzio.write_npz_file(
                folder / f"{i % 32}.npz", {"edge_ids": ids, "weights": weights}, write_out=True
            )
            took.append(time.perf_counter() - t0)
            i += 1

    previous = sys.getswitchinterval()
    sys.setswitchinterval(interval_s)
    try:
        thread = threading.Thread(target=write)
        thread.start()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:  # the busy loop: Python, no system call
            sum(k * 2 for k in range(200))
        stop.set()
        thread.join()
    finally:
        sys.setswitchinterval(previous)
    ms = np.array(took) * 1e3
    p50, p99 = (round(float(np.percentile(ms, q)), 2) for q in (50, 99))
    return {"switch_interval_ms": interval_s * 1e3, "files": len(took), "p50_ms": p50, "p99_ms": p99}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(prog="python -m bench.writer_gil", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--intervals", default="5,1,0.2", help="switch intervals in ms")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for ms in args.intervals.split(","):
            row = one_interval(float(ms) / 1e3, args.seconds, Path(folder))
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


if __name__ == "__main__":
    main()
