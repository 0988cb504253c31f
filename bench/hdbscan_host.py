"""HDBSCAN*'s host part alone: from a mutual-reachability tree in host memory to labels.

    python -m bench.hdbscan_host [--n 1000000] [--repeats 5] [--min-cluster-size 5] [--numpy]
                                 [--cache DIR] [--out FILE.json]

The tree is the CPU backend's tree of ``n`` uniform 2-D points (seed 0, ``min_samples=5``), the
tree ``gpu_core.hdbscan`` gets from the GPU for the same points; it is computed once and cached
in ``--cache`` (``bench/cache/``; about 30 s at 10^6 points and 7 min at 10^7 on 2 cores).
Measured: ``gpu_core._clustering.hdbscan.labels_from_edges`` on that tree, which is everything
``gpu_core.hdbscan`` does after the tree (to-host is nothing for a host tree): the tree's checks,
union-find and condensed tree (``linkage_ms``), stabilities, selection, labels and probabilities
(``selection_ms``). Median of ``--repeats`` runs after a warm-up call. Also measured, each in a
fresh process: the one-time cost of compiling the passes (empty Numba cache) and of loading them
from the cache, i.e. what ``gpu_core.warm_up`` adds to a worker's start. With ``--numpy`` the NumPy
path (the implementation before the compiled passes, and the reference they must equal) runs
too, and the two answers are compared bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import gpu_core
from gpu_core._clustering import hdbscan as _hdbscan

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def load_tree(n: int, cache: Path) -> tuple[np.ndarray[Any, Any], ...]:
    path = cache / f"hdbscan-host-tree-uniform2d-{n}-ms5.npz"
    if not path.exists():
        points = np.random.default_rng(0).random((n, 2))
        started = time.perf_counter()
        tree = gpu_core.euclidean_mst(points, min_samples=5, backend="cpu")
        print(f"tree of {n} points computed in {time.perf_counter() - started:.0f} s, cached in {path}")
        cache.mkdir(parents=True, exist_ok=True)
        np.savez(path, src=tree.src, dst=tree.dst, weights=tree.weights)
    with np.load(path) as f:
        return f["src"], f["dst"], f["weights"]


def one_time_costs() -> dict[str, float]:
    """Seconds of ``warm_up_compiled`` in a fresh process: first with an empty Numba cache
    (compilation), then with the cache that run filled (loading); the import of Numba included."""
    script = (
        "import time; t = time.perf_counter(); from gpu_core._clustering import hdbscan as _hdbscan; "
        "_hdbscan.warm_up_compiled(); print(time.perf_counter() - t)"
    )
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
        for key in ("compile_s", "load_from_cache_s"):
            command = [sys.executable, "-c", script]
            run = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            out[key] = float(run.stdout.strip().splitlines()[-1])
    return out


def measure(
    n: int, u: Any, v: Any, w: Any, mcs: int, method: str, eps: float, compiled: bool, repeats: int
) -> tuple[dict[str, float], tuple[Any, Any]]:
    answer = _hdbscan.labels_from_edges(n, u, v, w, mcs, method, eps, compiled=compiled)  # warm-up
    runs: list[dict[str, float]] = []
    for _ in range(repeats):
        timings: dict[str, float] = {}
        started = time.perf_counter()
        answer = _hdbscan.labels_from_edges(n, u, v, w, mcs, method, eps, compiled=compiled, timings=timings)
        timings["host_ms"] = (time.perf_counter() - started) * 1e3
        runs.append(timings)
    medians = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    medians["runs_host_ms"] = [round(r["host_ms"], 1) for r in runs]  # type: ignore[assignment]
    return medians, answer


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=10**6, help="points (default 10^6)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--min-cluster-size", type=int, default=5)
    p.add_argument("--method", choices=("eom", "leaf"), default="eom")
    p.add_argument("--epsilon", type=float, default=0.0)
    p.add_argument("--numpy", action="store_true", help="also the NumPy path, and compare")
    p.add_argument("--no-one-time", action="store_true", help="skip the compile/load measurement")
    p.add_argument("--cache", type=Path, default=HERE / "cache")
    p.add_argument("--out", type=Path, help="write the record as JSON")
    args = p.parse_args(argv)
    u, v, w = load_tree(args.n, args.cache)
    params = (args.min_cluster_size, args.method, args.epsilon)
    record: dict[str, Any] = {
        "n": args.n,
        "tree": "CPU backend, uniform 2-D points, seed 0, min_samples 5",
        "min_cluster_size": args.min_cluster_size,
        "method": args.method,
        "epsilon": args.epsilon,
        "repeats": args.repeats,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "load_average": os.getloadavg(),
    }
    if not args.no_one_time:
        record["one_time"] = one_time_costs()
    record["compiled"], fast = measure(args.n, u, v, w, *params, True, args.repeats)
    record["clusters"] = int(fast[0].max()) + 1
    if args.numpy:
        record["numpy"], ref = measure(args.n, u, v, w, *params, False, max(1, args.repeats // 2))
        record["identical"] = bool(np.array_equal(fast[0], ref[0]) and fast[1].tobytes() == ref[1].tobytes())
        record["speedup"] = record["numpy"]["host_ms"] / record["compiled"]["host_ms"]
    print(json.dumps(record, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return record


if __name__ == "__main__":
    main()
