"""What keeping a point set's spatial index saves: ``hdbscan`` of several ``min_samples`` on one set.

    python -m bench.point_index [--n 1e5] [--d 2] [--kind uniform|blobs] [--backend auto]
                                [--min-samples 5,16] [--repeats 3] [--out FILE.json]

Each round, in one process and interleaved (so drift hits both alike):

* **fresh**: ``gpu_core.hdbscan(points, ...)`` for each ``min_samples`` in turn, from host points:
  every call validates the points, copies them to the device (GPU) and builds its own index;
* **reused**: ``gpu_core.build_point_index(points)`` once, then ``gpu_core.hdbscan(index, ...)``
  for each ``min_samples``: what a resident point set of the service does (issue 11).

Medians over ``--repeats`` rounds after one warm-up round; labels and probabilities are checked
equal between the two. ``saved_s``: fresh minus reused, index build included, over the whole
sequence of ``min_samples``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

import gpu_core

from .points import make_points


def _timed(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def _round(points: np.ndarray, ks: list[int], backend: str) -> dict[str, Any]:
    fresh: dict[int, float] = {}
    reused: dict[int, float] = {}
    answers = {}
    for k in ks:
        fresh[k], answers[k] = _timed(
            lambda k=k: gpu_core.hdbscan(points, min_cluster_size=max(5, k), min_samples=k, backend=backend)  # type: ignore[arg-type]
        )
    build_s, index = _timed(lambda: gpu_core.build_point_index(points, backend=backend))  # type: ignore[arg-type]
    for k in ks:
        mcs = max(5, k)
        reused[k], got = _timed(
            lambda k=k, mcs=mcs: gpu_core.hdbscan(index, min_cluster_size=mcs, min_samples=k)
        )
        if not (
            np.array_equal(got.labels, answers[k].labels)
            and np.array_equal(got.probabilities, answers[k].probabilities)
        ):
            raise RuntimeError(f"min_samples={k}: the reused index gave other labels than fresh points")
    return {"fresh": fresh, "reused": reused, "build": build_s, "bytes": index.nbytes,
            "backend": index.backend}  # fmt: skip


def measure(n: int, d: int, kind: str, backend: str, ks: list[int], repeats: int) -> dict[str, Any]:
    points = make_points(kind, n, d)
    _round(points[: min(n, 2000)], [k for k in ks if k <= min(n, 2000)], backend)  # warm-up
    rounds = [_round(points, ks, backend) for _ in range(repeats)]

    def med(values: list[float]) -> float:
        return float(statistics.median(values))

    fresh = {k: med([r["fresh"][k] for r in rounds]) for k in ks}
    reused = {k: med([r["reused"][k] for r in rounds]) for k in ks}
    build = med([r["build"] for r in rounds])
    totals_fresh = med([sum(r["fresh"].values()) for r in rounds])
    totals_reused = med([r["build"] + sum(r["reused"].values()) for r in rounds])
    return {
        "n": n, "d": d, "points": kind, "backend": rounds[0]["backend"], "min_samples": ks,
        "repeats": repeats, "fresh_s": fresh, "reused_s": reused, "index_build_s": build,
        "index_bytes": rounds[0]["bytes"], "fresh_total_s": totals_fresh,
        "reused_total_s": totals_reused, "saved_s": totals_fresh - totals_reused,
    }  # fmt: skip


def table(rec: dict[str, Any]) -> str:
    ks = rec["min_samples"]
    rows = [
        "| points | n | d | backend | min_samples | fresh | reused (index kept) | index build "
        "| index bytes |",
        "| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for k in ks:
        rows.append(
            f"| {rec['points']} | {rec['n']:.0e} | {rec['d']} | {rec['backend']} | {k} "
            f"| {rec['fresh_s'][k] * 1e3:.1f} ms | {rec['reused_s'][k] * 1e3:.1f} ms | | |"
        )
    rows.append(
        f"| {rec['points']} | {rec['n']:.0e} | {rec['d']} | {rec['backend']} | all, in turn "
        f"| {rec['fresh_total_s'] * 1e3:.1f} ms | {rec['reused_total_s'] * 1e3:.1f} ms "
        f"| {rec['index_build_s'] * 1e3:.2f} ms | {rec['index_bytes']} |"
    )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.point_index", description=__doc__.splitlines()[0])
    p.add_argument("--n", default="1e5", help="number of points (e.g. 1e5)")
    p.add_argument("--d", type=int, default=2)
    p.add_argument("--kind", choices=["uniform", "blobs"], default="uniform")
    p.add_argument("--backend", choices=["auto", "gpu", "cpu"], default="auto")
    p.add_argument("--min-samples", default="5,16", help="comma-separated, run in this order")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    ks = [int(x) for x in args.min_samples.split(",")]
    rec = measure(int(float(args.n)), args.d, args.kind, args.backend, ks, args.repeats)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rec, indent=1), encoding="utf-8")
    print(json.dumps(rec))
    print(table(rec))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
