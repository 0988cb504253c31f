"""HDBSCAN*'s prediction and soft clustering against the hdbscan library (issue 24's targets).

    python -m bench.hdbscan_predict [--backend auto] [--fit-n 1e7] [--queries 1e6] [--dims 3]
        [--peer-fit-n 1e6] [--peer-queries 1e5] [--membership-n 1e6] [--peer-membership-n 1e6]
        [--repeats 5] [--no-peer] [--parts predict,predict_vs_library,membership] [--smoke]
        [--out FILE.json]

Data: Gaussian blobs (64 centres in the unit cube, sd 0.02, 10 % uniform noise; seed 0), queries
drawn the same way (seed 1). Three parts, each the median of ``--repeats`` after a warm-up call:

* ``predict``: ``gpu_core.approximate_predict`` of ``--queries`` points against a model fitted on
  ``--fit-n`` (``prediction_data=True``), the queries device-resident on the GPU backend (CuPy in,
  CuPy out; the clock stops after a device synchronisation). Target: <= 50 ms for 10^6 3-D
  queries against 10^7 points on an H200.
* ``predict_vs_library``: the same on ``--peer-queries`` against ``--peer-fit-n`` points, ours
  and the hdbscan library's ``approximate_predict`` (``min_samples`` one less,
  ``approx_min_span_tree=False``, ``core_dist_n_jobs`` = the host's cores). Target: >= 100x.
* ``membership``: ``all_points_membership_vectors`` of a 2-D model of ``--membership-n`` points,
  ours and the library's (on ``--peer-membership-n`` points: its time per point is the figure
  compared when that is smaller). Target: >= 100x.

``--smoke``: tiny sizes on the CPU backend (tests/bench runs it). Results as JSON (``--out``;
bench/results/ keeps the lead's runs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from typing import Any

import numpy as np

import gpu_core

from .timing import median_ms, on_backend

MIN_CLUSTER_SIZE = 50
MIN_SAMPLES = 5  # ours; the library's 4


def blobs(n: int, d: int, seed: int) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(0).random((64, d))
    noise = n // 10
    which = rng.integers(0, 64, n - noise)
    points = centres[which] + rng.normal(0, 0.02, (n - noise, d))
    return np.concatenate([points, rng.random((noise, d))])


def library_model(points: np.ndarray[Any, Any]) -> Any:
    import hdbscan

    return hdbscan.HDBSCAN(
        min_cluster_size=MIN_CLUSTER_SIZE, min_samples=MIN_SAMPLES - 1, approx_min_span_tree=False,
        prediction_data=True, core_dist_n_jobs=os.cpu_count() or 1,
    ).fit(points)  # fmt: skip


def fit(points: np.ndarray[Any, Any], backend: Any) -> gpu_core.HDBSCAN:
    model = gpu_core.HDBSCAN(
        min_cluster_size=MIN_CLUSTER_SIZE, min_samples=MIN_SAMPLES, prediction_data=True, backend=backend
    )
    return model.fit(on_backend(backend, points))


def _predict_ms(fit_n: int, queries: int, dims: int, backend: str, repeats: int) -> tuple[float, int]:
    model = fit(blobs(fit_n, dims, 0), backend)
    new = on_backend(backend, blobs(queries, dims, 1))
    ms = median_ms(lambda: gpu_core.approximate_predict(model, new), repeats, backend)
    return ms, model.prediction_data_.num_labels


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", default="auto", choices=("auto", "gpu", "cpu"))
    parser.add_argument("--fit-n", type=float, default=1e7)
    parser.add_argument("--queries", type=float, default=1e6)
    parser.add_argument("--dims", type=int, default=3)
    parser.add_argument("--peer-fit-n", type=float, default=1e6)
    parser.add_argument("--peer-queries", type=float, default=1e5)
    parser.add_argument("--membership-n", type=float, default=1e6)
    parser.add_argument("--peer-membership-n", type=float, default=1e6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-peer", action="store_true", help="skip the hdbscan library")
    parser.add_argument(
        "--parts", default="predict,predict_vs_library,membership", help="which parts (comma-separated)"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU backend")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.smoke:
        args.backend, args.repeats = "cpu", 1
        args.fit_n = args.peer_fit_n = args.membership_n = args.peer_membership_n = 3000
        args.queries = args.peer_queries = 500
    backend = gpu_core.resolve_backend(args.backend)
    record: dict[str, Any] = {
        "benchmark": "hdbscan_predict", "backend": backend, "host": platform.node(),
        "cpus": os.cpu_count(), "min_cluster_size": MIN_CLUSTER_SIZE, "min_samples": MIN_SAMPLES,
        "repeats": args.repeats,
    }  # fmt: skip

    parts = set(args.parts.split(","))
    if "predict" in parts:
        record["predict"] = predict_part(args, backend)
    if "predict_vs_library" in parts:
        record["predict_vs_library"] = library_part(args, backend)
    if "membership" in parts:
        record["membership"] = membership_part(args, backend)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
    return record


def predict_part(args: argparse.Namespace, backend: str) -> dict[str, Any]:
    fit_n, queries = int(args.fit_n), int(args.queries)
    ms, labels = _predict_ms(fit_n, queries, args.dims, backend, args.repeats)  # the model freed after
    print(f"approximate_predict: {queries} queries vs {fit_n} points ({args.dims}-D): {ms:.1f} ms")
    return {"fit_n": fit_n, "queries": queries, "dims": args.dims, "ms": ms, "labels": labels}


def library_part(args: argparse.Namespace, backend: str) -> dict[str, Any]:
    peer_n, peer_q = int(args.peer_fit_n), int(args.peer_queries)
    points, new_host = blobs(peer_n, args.dims, 0), blobs(peer_q, args.dims, 1)
    model = fit(points, backend)
    new = on_backend(backend, new_host)
    ours = median_ms(lambda: gpu_core.approximate_predict(model, new), args.repeats, backend)
    part: dict[str, Any] = {"fit_n": peer_n, "queries": peer_q, "ours_ms": ours}
    if not args.no_peer:
        import hdbscan

        lib = library_model(points)
        peer_repeats = max(1, args.repeats // 2)
        theirs = median_ms(lambda: hdbscan.approximate_predict(lib, new_host), peer_repeats, "cpu")
        part.update(library_ms=theirs, speedup=theirs / ours)
        print(f"approximate_predict vs the library ({peer_q} vs {peer_n}): {ours:.1f} ms, "
              f"library {theirs:.0f} ms, {theirs / ours:.0f}x")  # fmt: skip
    return part


def membership_part(args: argparse.Namespace, backend: str) -> dict[str, Any]:
    mem_n, peer_mem_n = int(args.membership_n), int(args.peer_membership_n)
    soft = fit(blobs(mem_n, 2, 0), backend)
    ours = median_ms(lambda: gpu_core.all_points_membership_vectors(soft), args.repeats, backend)
    part: dict[str, Any] = {"n": mem_n, "ours_ms": ours, "labels": soft.prediction_data_.num_labels}
    print(f"all_points_membership_vectors ({mem_n}, 2-D, {part['labels']} clusters): ours {ours:.1f} ms")
    if not args.no_peer:
        import hdbscan

        started = time.perf_counter()
        lib = library_model(blobs(peer_mem_n, 2, 0))
        part["library_fit_ms"] = (time.perf_counter() - started) * 1e3
        print(f"  the library's fit of {peer_mem_n}: {part['library_fit_ms']:.0f} ms")
        started = time.perf_counter()
        hdbscan.all_points_membership_vectors(lib)
        theirs = (time.perf_counter() - started) * 1e3
        per_point = (theirs / peer_mem_n) / (ours / mem_n)
        part.update(library_n=peer_mem_n, library_ms=theirs, speedup_per_point=per_point)
        print(f"all_points_membership_vectors ({mem_n}, 2-D): {ours:.1f} ms; library on {peer_mem_n}: "
              f"{theirs:.0f} ms; {per_point:.0f}x per point")  # fmt: skip
    return part


if __name__ == "__main__":
    main()
