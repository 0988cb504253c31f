"""``python -m bench.points --suite quick|full``: point-set benchmarks (EMST and HDBSCAN*).

For each point set (uniform or Gaussian blobs, 2-D and 3-D) it times
``gpu_core.euclidean_mst`` (min_samples 1) and ``gpu_core.hdbscan`` (min_samples 2, 5, 16),
prints throughput in MFeatures/s (n*d / seconds) with the engine's time split, and runs the
CPU peers installed (scikit-learn ``HDBSCAN``, ``hdbscan``, ``fast_hdbscan``) on the same
points, checking that their labels equal ours (adjusted Rand index, noise sets). Writes one
JSON record per measurement to ``--out`` (default ``bench/results/points-SUITE.json``).

The quick suite runs on a CPU in seconds (CI's smoke test); the full suite is for a GPU
host (10^6 to 3*10^7 points; peers only up to ``--peer-max-points``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import gpu_core

HERE = Path(__file__).resolve().parent
SUITES: dict[str, dict[str, Any]] = {
    "quick": {"sizes": [5_000], "dims": [2], "min_samples": [2, 5], "peer_max": 5_000},
    "full": {
        "sizes": [10**6, 10**7, 3 * 10**7],
        "dims": [2, 3],
        "min_samples": [2, 5, 16],
        "peer_max": 10**6,
    },
}


def make_points(kind: str, n: int, d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        return rng.random((n, d))
    centers = rng.random((20, d)) * 10
    return centers[rng.integers(0, 20, n)] + rng.normal(0, 0.15, (n, d))


def _peer(name: str, points: np.ndarray, mcs: int, ms: int) -> np.ndarray | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "sklearn":
            from sklearn.cluster import HDBSCAN

            return np.asarray(HDBSCAN(min_cluster_size=mcs, min_samples=ms).fit(points).labels_)
        try:
            module = importlib.import_module(name)
        except ImportError:
            return None
        # these packages do not count the point itself (scikit-learn's HDBSCAN docs): one less
        model = module.HDBSCAN(min_cluster_size=mcs, min_samples=max(ms - 1, 1))
        return np.asarray(model.fit(points).labels_)


def run(suite: str, backend: str, out: Path) -> list[dict[str, Any]]:
    from sklearn.metrics import adjusted_rand_score

    cfg = SUITES[suite]
    records: list[dict[str, Any]] = []
    for n in cfg["sizes"]:
        for d in cfg["dims"]:
            for kind in ("uniform", "blobs"):
                pts = make_points(kind, n, d)
                t0 = time.perf_counter()
                tree = gpu_core.euclidean_mst(pts, backend=backend)  # type: ignore[arg-type]
                sec = time.perf_counter() - t0
                rec = {"task": "emst", "points": kind, "n": n, "d": d, "backend": tree.backend,
                       "seconds": sec,
                       "mfeatures_per_s": n * d / sec / 1e6, "split_ms": tree.timings_ms}  # fmt: skip
                records.append(rec)
                print(json.dumps(rec))
                for ms in cfg["min_samples"]:
                    mcs = max(ms, 5)
                    t0 = time.perf_counter()
                    res = gpu_core.hdbscan(pts, min_cluster_size=mcs, min_samples=ms, backend=backend)  # type: ignore[arg-type]
                    sec = time.perf_counter() - t0
                    rec = {"task": "hdbscan", "points": kind, "n": n, "d": d, "min_samples": ms,
                           "backend": res.backend, "seconds": sec, "mfeatures_per_s": n * d / sec / 1e6,
                           "split_ms": res.timings_ms, "clusters": res.num_clusters, "peers": {}}  # fmt: skip
                    if n <= cfg["peer_max"]:
                        for peer in ("sklearn", "hdbscan", "fast_hdbscan"):
                            t0 = time.perf_counter()
                            labels = _peer(peer, pts, mcs, ms)
                            if labels is None:
                                continue
                            rec["peers"][peer] = {
                                "seconds": time.perf_counter() - t0,
                                "ari": float(adjusted_rand_score(labels, res.labels)),
                                "same_noise": bool(np.array_equal(labels == -1, res.labels == -1)),
                            }
                    records.append(rec)
                    print(json.dumps(rec))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(records, indent=1), encoding="utf-8")
    return records


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.points", description=__doc__.splitlines()[0])
    p.add_argument("--suite", choices=sorted(SUITES), default="quick")
    p.add_argument("--backend", choices=["auto", "gpu", "cpu"], default="auto")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    run(args.suite, args.backend, args.out or HERE / "results" / f"points-{args.suite}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
