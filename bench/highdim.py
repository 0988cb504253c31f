"""HDBSCAN* of points of many coordinates (the brute-force path) against its floors and its peers.

    python -m bench.highdim [--backend auto] [--n 1e6] [--dims 128] [--min-samples 10] [--k 10]
        [--devices 0,1] [--no-all-pairs] [--peer-n 1e5] [--peer-dims 768] [--peers hdbscan,fast_hdbscan]
        [--no-peers] [--peer-limit 600] [--no-floor] [--predict] [--predict-n 1e6] [--predict-dims 384]
        [--predict-queries 1e5] [--crossover] [--crossover-n 1e5] [--crossover-dims 4,8,12,16,24,32]
        [--repeats 3] [--cpu] [--out FILE.json]

Data: embeddings-like blobs (``embeddings``: 32 centres on the unit sphere, each point its centre
plus Gaussian noise of total sd 0.35, 10 % of the points noise on the sphere; seed 0), points on
the device (CuPy) for the GPU backend. Parts, each the median of ``--repeats`` after a warm-up:

* ``floor``: on the GPU first the all-pairs floors of the device, every pair's inner product by
  cuBLAS in 4,096-row blocks, nothing selected, in IEEE float32 (``float32_floor_ms``) and on the
  tensor cores in float16 (``float16_floor_ms``); then the exact brute-force k-nearest-neighbour
  lists (``--k``, the point itself counted) of the points, index build included (``floor_ms``:
  the search every exact method pays, what ``hdbscan`` starts with). ``gemm_ms``: the filter's
  products alone (on the GPU the fused kernel with its selection left out).
* ``hdbscan``: ``gpu_core.hdbscan`` of the same points (``--min-samples``, ``min_cluster_size`` 100),
  its tree's timings (lists, rounds, refreshed points), on the GPU its launches' device time
  (``launches_ms``: ``select``, the fused products and selection; ``flush``, the exact recheck),
  and its ratio to the floors. Targets (issue 46): 10^6 x 128 in <= 3 s and <= 4x the float16
  floor on one H200; 10^5 x 768 in <= 250 ms. ``--devices 0,1``: the searches split over those GPUs.
* ``peers`` (``--peer-n`` x ``--peer-dims``): ours against the hdbscan library (its defaults, what a
  user gets: ``algorithm="best"``, an approximate tree, ``core_dist_n_jobs`` = the host's cores)
  and fast_hdbscan (above 30 coordinates it takes an approximate nearest-neighbour graph from
  pynndescent), each with ``min_samples`` one less (their convention leaves the point itself out),
  their labels' agreement with ours (adjusted Rand index). Either peer is skipped where it is not
  installed. Each fits once, in a child process, stopped after ``--peer-limit`` seconds: a peer
  stopped there reports ``speedup_at_least`` (the limit over ours), a lower bound. Target: >= 100x
  both at 10^5 x 768.
* ``predict`` (``--predict``): ``approximate_predict`` and ``membership_vector`` of
  ``--predict-queries`` new points against a model of ``--predict-n`` x ``--predict-dims`` (target:
  10^5 against 10^6 x 384 in <= 300 ms).
* ``crossover`` (``--crossover``): the spatial index (k-d tree; on the GPU the hierarchy, up to 32
  coordinates) against brute force, ``min_samples`` 1 and 10, at ``--crossover-n`` points of each
  of ``--crossover-dims``: where brute force starts to win is ``SPATIAL_MAX_DIMENSIONS``.

``--cpu``: small sizes on the CPU backend, every part, the hdbscan library the only peer (tests/bench
runs it; fast_hdbscan's first fit compiles for a minute). Results as JSON (``--out``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import queue
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

import gpu_core
from gpu_core._points.brute import BruteIndex
from gpu_core._points.index import build_index, validated

from .timing import median_ms, on_backend

MIN_CLUSTER_SIZE = 100


def embeddings(n: int, d: int, seed: int = 0) -> np.ndarray[Any, Any]:
    """Blobs around 32 centres on the unit sphere (noise sd 0.35 in all, spread over the
    coordinates) and 10 % of the points scattered on the sphere, as float32 (embeddings' dtype)."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(1234).normal(size=(32, d))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    noise = n // 10
    points = centres[rng.integers(0, 32, n - noise)] + rng.normal(0, 0.35 / np.sqrt(d), (n - noise, d))
    scattered = rng.normal(size=(noise, d))
    scattered /= np.linalg.norm(scattered, axis=1, keepdims=True)
    return np.concatenate([points, scattered]).astype(np.float32)


def brute_index(points: Any, backend: str, search: str = "brute", **engine: Any) -> gpu_core.PointIndex:
    coords, chosen, from_cupy = validated(points, backend)  # type: ignore[arg-type]
    return build_index(points, coords, chosen, from_cupy, search, **engine)  # type: ignore[arg-type]


#: rows of a block of the all-pairs floors (one cuBLAS GEMM each, into one reused output)
ALL_PAIRS_BLOCK = 4096


@contextlib.contextmanager
def _ieee_float32() -> Iterator[None]:
    """CuPy's float32 products in IEEE float32 (not TF32) while inside, then as they were."""
    import numpy

    try:
        from cupy._core import _routines_linalg as linalg

        before = linalg.get_compute_type(numpy.float32)
        linalg.set_compute_type(numpy.float32, 2)  # COMPUTE_TYPE_PEDANTIC
    except (ImportError, AttributeError):
        yield
        return
    try:
        yield
    finally:
        linalg.set_compute_type(numpy.float32, before)


def all_pairs_ms(points: Any, dtype: str, repeats: int) -> float:
    """Every pair's inner product by cuBLAS in ``dtype`` (float32: IEEE; float16: the tensor cores),
    :data:`ALL_PAIRS_BLOCK` rows at a time, nothing selected: the all-pairs floor of the device."""
    import cupy as cp

    x = cp.ascontiguousarray(points.astype(dtype))
    n = int(x.shape[0])
    out = cp.empty((min(ALL_PAIRS_BLOCK, n), n), dtype=dtype)

    def run() -> None:
        for lo in range(0, n, ALL_PAIRS_BLOCK):
            a = x[lo : lo + ALL_PAIRS_BLOCK]
            cp.matmul(a, x.T, out=out[: a.shape[0]])

    with _ieee_float32():
        ms = median_ms(run, repeats, "gpu")
    return ms


def _event_totals(events: list[Any]) -> dict[str, float]:
    """Milliseconds per kind of timed launch (``DeviceEngine.events``: the fused products and
    selection, the exact recheck)."""
    import cupy

    out: dict[str, float] = {}
    for what, begin, end in events:
        end.synchronize()
        out[f"{what}_ms"] = out.get(f"{what}_ms", 0.0) + float(cupy.cuda.get_elapsed_time(begin, end))
    return out


def floor_and_hdbscan(args: argparse.Namespace, backend: str, engine: dict[str, Any]) -> dict[str, Any]:
    n, d = int(args.n), args.dims
    points = on_backend(backend, embeddings(n, d))
    gpu = backend == "gpu"
    floors: dict[str, float] = {}
    if gpu and not args.no_all_pairs:
        floors = {f"{t}_floor_ms": all_pairs_ms(points, t, args.repeats) for t in ("float32", "float16")}
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()  # the floors' outputs (16 GB at 10^6 points)

    def knn() -> Any:
        state: Any = brute_index(points, backend, **engine)._state
        assert isinstance(state, BruteIndex)
        return state.nearest(args.k)

    floor_ms = median_ms(knn, args.repeats, backend)
    index = brute_index(points, backend, **engine)
    products = index._state.engine.products_only  # type: ignore[attr-defined]
    gemm_ms = median_ms(products, args.repeats if gpu else 1, backend)
    runs: list[Any] = []
    events: list[Any] = []

    def cluster() -> None:
        built = brute_index(points, backend, **engine)
        if gpu:
            events.clear()
            built._state.engine.events = events  # type: ignore[attr-defined]
        runs.append(
            gpu_core.hdbscan(built, min_cluster_size=MIN_CLUSTER_SIZE, min_samples=args.min_samples)
        )  # fmt: skip

    hdbscan_ms = median_ms(cluster, args.repeats, backend)
    tree_timings = runs[-1].timings_ms
    launches = _event_totals(events) if gpu else {}
    ratio = hdbscan_ms / floor_ms
    fp16 = floors.get("float16_floor_ms")
    print(f"{n} x {d}, min_samples={args.min_samples}, {backend}: hdbscan {hdbscan_ms:.0f} ms, exact "
          f"{args.k}-NN floor {floor_ms:.0f} ms (products alone {gemm_ms:.0f} ms): {ratio:.2f}x the floor; "
          f"{runs[-1].num_clusters} clusters, {tree_timings.get('refreshed', 0):.0f} points refreshed in "
          f"{tree_timings.get('rounds', 0):.0f} rounds")  # fmt: skip
    if fp16:
        print(f"  all-pairs floors: float32 {floors['float32_floor_ms']:.0f} ms, float16 {fp16:.0f} ms; "
              f"hdbscan {hdbscan_ms / fp16:.2f}x the float16 floor; launches {launches}")  # fmt: skip
    return {
        "n": n, "dims": d, "k": args.k, "min_samples": args.min_samples, "floor_ms": floor_ms,
        "gemm_ms": gemm_ms, "hdbscan_ms": hdbscan_ms, "ratio": ratio, "clusters": runs[-1].num_clusters,
        "tree_timings_ms": tree_timings, **floors, "launches_ms": launches,
        "ratio_float16_floor": None if not fp16 else hdbscan_ms / fp16, "devices": engine.get("devices"),
    }  # fmt: skip


def predict(args: argparse.Namespace, backend: str) -> dict[str, Any]:
    """``approximate_predict`` and ``membership_vector`` of ``--predict-queries`` new points against a
    model of ``--predict-n`` points (``--predict-dims``), each the median of ``--repeats``."""
    n, d, q = int(args.predict_n), args.predict_dims, int(args.predict_queries)
    points = on_backend(backend, embeddings(n, d, seed=4))
    queries = on_backend(backend, embeddings(q, d, seed=5))
    started = time.perf_counter()
    model = gpu_core.HDBSCAN(
        min_cluster_size=MIN_CLUSTER_SIZE,
        min_samples=args.min_samples,
        prediction_data=True,
        backend=backend,  # type: ignore[arg-type]
    ).fit(points)
    fit_s = time.perf_counter() - started
    predict_ms = median_ms(lambda: gpu_core.approximate_predict(model, queries), args.repeats, backend)
    vector_ms = median_ms(lambda: gpu_core.membership_vector(model, queries), args.repeats, backend)
    print(f"predict {q} new points against {n} x {d}: approximate_predict {predict_ms:.0f} ms, "
          f"membership_vector {vector_ms:.0f} ms (fit {fit_s:.1f} s)")  # fmt: skip
    return {"n": n, "dims": d, "queries": q, "fit_s": fit_s, "approximate_predict_ms": predict_ms,
            "membership_vector_ms": vector_ms}  # fmt: skip


def _peer_fit(name: str, n: int, d: int, min_samples: int, out: Any) -> None:
    """In a child process: one fit of a peer on the peers' points (made here from their seed),
    its milliseconds and labels sent back (fast_hdbscan compiled first on a small set)."""
    cores = os.cpu_count() or 1
    if name == "hdbscan":
        import hdbscan

        def make() -> Any:
            return hdbscan.HDBSCAN(
                min_cluster_size=MIN_CLUSTER_SIZE, min_samples=min_samples - 1, core_dist_n_jobs=cores
            )
    else:
        import fast_hdbscan

        def make() -> Any:
            return fast_hdbscan.HDBSCAN(min_cluster_size=MIN_CLUSTER_SIZE, min_samples=min_samples - 1)

        make().fit(embeddings(2000, d, seed=3))  # Numba compiles on the first fit
    host = embeddings(n, d, seed=2)
    out.put(("started", None))
    started = time.perf_counter()
    labels = make().fit(host).labels_
    out.put(((time.perf_counter() - started) * 1e3, np.asarray(labels)))


def timed_peer(name: str, n: int, d: int, min_samples: int, limit_s: float) -> tuple[float, Any] | None:
    """A peer's fit in a child process, stopped after ``limit_s`` seconds: (ms, labels), or None
    when it did not finish (the figure is then a lower bound: at least the limit)."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    child = context.Process(target=_peer_fit, args=(name, n, d, min_samples, out), daemon=True)
    child.start()
    deadline = None  # set when the child's clock starts (after its compile and its data)
    while deadline is None or time.monotonic() < deadline:
        try:
            what, labels = out.get(timeout=1.0)
        except queue.Empty:
            if not child.is_alive():
                raise RuntimeError(f"{name}'s fit ended without a result (exit {child.exitcode})") from None
            continue
        if what == "started":
            deadline = time.monotonic() + limit_s
            continue
        child.join()
        return float(what), labels
    child.kill()
    child.join()
    return None


def peers(args: argparse.Namespace, backend: str, engine: dict[str, Any]) -> dict[str, Any]:
    from sklearn.metrics import adjusted_rand_score

    n, d = int(args.peer_n), args.peer_dims
    host = embeddings(n, d, seed=2)
    points = on_backend(backend, host)
    results: list[Any] = []

    def ours() -> None:
        results.append(
            gpu_core.hdbscan(
                brute_index(points, backend, **engine), min_cluster_size=MIN_CLUSTER_SIZE,
                min_samples=args.min_samples,
            )
        )  # fmt: skip

    ours_ms = median_ms(ours, args.repeats, backend)
    labels = results[-1].labels
    part: dict[str, Any] = {"n": n, "dims": d, "ours_ms": ours_ms, "clusters": results[-1].num_clusters}
    print(f"peers at {n} x {d}: ours {ours_ms:.0f} ms ({results[-1].num_clusters} clusters)")
    wanted = set(args.peers.split(","))
    for name in ("hdbscan", "fast_hdbscan"):
        if name not in wanted:
            continue
        try:
            __import__(name)
        except ImportError:
            print(f"  {name}: not installed, skipped")
            continue
        try:
            got = timed_peer(name, n, d, args.min_samples, args.peer_limit)
        except RuntimeError as exc:  # a peer that cannot run here (a missing extra): said, not fatal
            part[name] = {"error": str(exc)}
            print(f"  {name}: {exc}")
            continue
        if got is None:
            limit_ms = args.peer_limit * 1e3
            part[name] = {"ms": None, "over_ms": limit_ms, "speedup_at_least": limit_ms / ours_ms}
            print(f"  {name}: did not finish in {args.peer_limit:.0f} s (stopped): "
                  f">= {limit_ms / ours_ms:.0f}x")  # fmt: skip
            continue
        theirs, their_labels = got
        agreement = float(adjusted_rand_score(labels, their_labels))
        part[name] = {"ms": theirs, "speedup": theirs / ours_ms, "adjusted_rand": agreement}
        print(f"  {name}: {theirs:.0f} ms, {theirs / ours_ms:.0f}x; adjusted Rand index {agreement:.4f}")
    return part


def crossover(args: argparse.Namespace, backend: str, engine: dict[str, Any]) -> dict[str, Any]:
    n = int(args.crossover_n)
    rows = []
    for d in (int(x) for x in args.crossover_dims.split(",")):
        points = on_backend(backend, embeddings(n, d, seed=3))
        row: dict[str, Any] = {"dims": d}
        for search in ("spatial", "brute"):
            if backend == "gpu" and search == "spatial" and d > 32:
                continue
            options = engine if search == "brute" else {}
            for k in (1, 10):

                def tree(k: int = k, search: str = search, options: Any = options, pts: Any = points) -> Any:
                    index = brute_index(pts, backend, search, **options)
                    return gpu_core.euclidean_mst(index, min_samples=k)

                row[f"{search}_k{k}_ms"] = median_ms(tree, args.repeats, backend)
        rows.append(row)
        print("  crossover " + ", ".join(f"{key} {value:.0f}" for key, value in row.items()))
    wins = [r["dims"] for r in rows if "spatial_k1_ms" in r and r["brute_k1_ms"] <= r["spatial_k1_ms"]
            and r["brute_k10_ms"] <= r["spatial_k10_ms"]]  # fmt: skip
    return {"n": n, "rows": rows, "brute_wins_from_dims": min(wins) if wins else None}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", default="auto", choices=("auto", "gpu", "cpu"))
    parser.add_argument("--n", type=float, default=1e6)
    parser.add_argument("--dims", type=int, default=128)
    parser.add_argument("--min-samples", type=int, default=10)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--devices", default=None, help="GPU ids the brute-force searches share, e.g. 0,1")
    parser.add_argument("--no-all-pairs", action="store_true", help="skip the cuBLAS all-pairs floors (GPU)")
    parser.add_argument("--predict", action="store_true", help="time prediction against a large model")
    parser.add_argument("--predict-n", type=float, default=1e6)
    parser.add_argument("--predict-dims", type=int, default=384)
    parser.add_argument("--predict-queries", type=float, default=1e5)
    parser.add_argument("--peer-n", type=float, default=1e5)
    parser.add_argument("--peer-dims", type=int, default=768)
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--no-floor", action="store_true", help="skip the floor and hdbscan part")
    parser.add_argument(
        "--peer-limit", type=float, default=600.0,
        help="seconds a peer's fit may take; a peer stopped there reports its speedup as a lower bound",
    )  # fmt: skip
    parser.add_argument("--peers", default="hdbscan,fast_hdbscan", help="which peers (comma-separated)")
    parser.add_argument("--crossover", action="store_true")
    parser.add_argument("--crossover-n", type=float, default=1e5)
    parser.add_argument("--crossover-dims", default="4,8,12,16,24,32")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpu", action="store_true", help="small sizes on the CPU backend")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.cpu:
        args.backend, args.repeats, args.crossover, args.peers = "cpu", 1, True, "hdbscan"
        args.n, args.dims, args.peer_n, args.peer_dims = 1500, 64, 800, 128
        args.crossover_n, args.crossover_dims = 800, "8,24"
        args.predict, args.predict_n, args.predict_dims, args.predict_queries = True, 1200, 48, 300
    backend = gpu_core.resolve_backend(args.backend)
    engine: dict[str, Any] = {}
    if args.devices:
        engine["devices"] = [int(i) for i in args.devices.split(",")]
    record: dict[str, Any] = {
        "benchmark": "highdim", "backend": backend, "host": platform.node(), "cpus": os.cpu_count(),
        "min_cluster_size": MIN_CLUSTER_SIZE, "repeats": args.repeats, "devices": engine.get("devices"),
    }  # fmt: skip
    if backend == "gpu":
        import cupy

        record["gpu"] = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()
    if not args.no_floor:
        record["floor_and_hdbscan"] = floor_and_hdbscan(args, backend, engine)
    if not args.no_peers:
        record["peers"] = peers(args, backend, engine)
    if args.crossover:
        record["crossover"] = crossover(args, backend, engine)
    if args.predict:
        record["predict"] = predict(args, backend)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
    return record


if __name__ == "__main__":
    main()
