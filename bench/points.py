"""Point-set benchmarks (EMST and HDBSCAN*): ``python -m bench`` part ``points``, or on its own.

    python -m bench.points --suite quick|full [--backend auto] [--repeats N] [--out FILE.json]
    python -m bench --suite full --only points

For each point set (uniform or Gaussian blobs, 2-D and 3-D, every size of the suite):

* ``emst``: ``gpu_core.euclidean_mst`` with the points already on the device (CuPy in, the tree
  left on the device, as ArborX measures it) on the GPU backend, and from host memory to a tree
  in host memory (``host_seconds``); the CPU backend has only the latter;
* ``hdbscan`` with ``min_samples`` 2, 5 and 16: ``gpu_core.hdbscan`` end to end to labels in
  host memory, from the points where the EMST took them (on the device for the GPU backend: the
  tree, dendrogram, condensed tree, selection and labels are made there).

Each figure is the median of ``--repeats`` runs after one warm-up run; throughput is in
MFeatures/s (n*d / seconds, the paper's unit), with the engine's time split (index build,
core distances, Borůvka rounds and their nearest-neighbour search, the device sort, the host
part). Up to ``peer_max`` points the installed CPU peers (scikit-learn ``HDBSCAN``, ``hdbscan``,
``fast_hdbscan``) run once each on the same points and parameters, in a subprocess with a time
limit; their labels are compared with ours (adjusted Rand index, same noise points) and the
speed-up is reported. The quick suite runs on a CPU in seconds (CI's smoke test).
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import gpu_core

HERE = Path(__file__).resolve().parent
SUITES: dict[str, dict[str, Any]] = {
    "quick": {
        "sizes": [5_000],
        "dims": [2],
        "min_samples": [2, 5],
        "peer_max": 5_000,
        "repeats": 3,
        "peers": ("sklearn",),
    },
    "full": {
        "sizes": [10**6, 10**7, 3 * 10**7],
        "dims": [2, 3],
        "min_samples": [2, 5, 16],
        "peer_max": 10**6,
        "repeats": 5,
        "peers": ("fast_hdbscan", "hdbscan", "sklearn"),
    },
}


@dataclass(frozen=True)
class PointsSpec:
    """The point-set part of a ``python -m bench`` suite."""

    name: str
    suite: str


def make_points(kind: str, n: int, d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        return rng.random((n, d))
    centers = rng.random((20, d)) * 10
    return centers[rng.integers(0, 20, n)] + rng.normal(0, 0.15, (n, d))


def _peer_labels(name: str, points: np.ndarray, mcs: int, ms: int) -> np.ndarray | None:
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


def _peer_child(conn: Any, name: str, points: np.ndarray, mcs: int, ms: int) -> None:
    _peer_labels(name, points[:2_000], mcs, ms)  # imports and JIT compilation are not timed
    t0 = time.perf_counter()
    labels = _peer_labels(name, points, mcs, ms)
    conn.send((time.perf_counter() - t0, labels))


def run_peer(name: str, points: np.ndarray, mcs: int, ms: int, timeout_s: float) -> dict[str, Any] | None:
    """One run of a CPU peer in a subprocess: its seconds and labels, or why it has none."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_peer_child, args=(child, name, points, mcs, ms), daemon=True)
    proc.start()
    child.close()
    try:
        if not parent.poll(timeout_s):
            return {"status": "timeout", "seconds": None, "limit_s": timeout_s}
        seconds, labels = parent.recv()
    except EOFError:
        return {"status": "error", "seconds": None, "error": f"exit code {proc.exitcode}"}
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
    if labels is None:
        return None  # not installed
    return {"status": "ok", "seconds": seconds, "labels": labels}


def _median_run(fn: Callable[[], Any], repeats: int, warmup: bool = True) -> tuple[float, Any]:
    """Median seconds of ``repeats`` runs (after a warm-up run), and the last run's result (every
    run gives the same answer)."""
    if warmup:
        fn()
    runs = []
    result = None
    for _ in range(repeats):
        result = None  # as a caller that is done with the last answer (its memory can be reused)
        t0 = time.perf_counter()
        result = fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), result


def _split(timings: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 2) for k, v in timings.items()}


def measure_set(
    kind: str, n: int, d: int, cfg: dict[str, Any], backend: str, repeats: int, peer_timeout_s: float,
    log: Callable[[str], None] = print, warmup: bool = True,
) -> list[dict[str, Any]]:  # fmt: skip
    """Every measurement of one point set."""
    from sklearn.metrics import adjusted_rand_score

    pts = make_points(kind, n, d)
    records: list[dict[str, Any]] = []
    common = {"points": kind, "n": n, "d": d}
    host_s, tree = _median_run(lambda: gpu_core.euclidean_mst(pts, backend=backend), repeats, warmup)  # type: ignore[arg-type]
    rec: dict[str, Any] = {"task": "emst", **common, "backend": tree.backend, "host_seconds": host_s}
    if tree.backend == "gpu":
        import cupy as cp

        on_device = cp.asarray(pts)
        seconds, dtree = _median_run(
            lambda: gpu_core.euclidean_mst(on_device, backend="gpu"), repeats, warmup
        )
        if not np.array_equal(dtree.src.get(), tree.src) or not np.array_equal(dtree.dst.get(), tree.dst):
            raise RuntimeError("the tree of device points differs from the tree of host points")
        rec.update(seconds=seconds, split_ms=_split(dtree.timings_ms), input="device")
        del on_device, dtree
    else:
        rec.update(seconds=host_s, split_ms=_split(tree.timings_ms), input="host")
    rec["mfeatures_per_s"] = n * d / rec["seconds"] / 1e6
    rec["host_mfeatures_per_s"] = n * d / host_s / 1e6
    records.append(rec)
    log(json.dumps(rec))
    emst_seconds = rec["seconds"]
    # as the EMST: the points on the device on the GPU backend (the labels come back to the host)
    source: Any = pts
    if rec["input"] == "device":
        import cupy as cp

        source = cp.asarray(pts)
    for ms in cfg["min_samples"]:
        mcs = max(ms, 5)

        def clusters(ms: int = ms, mcs: int = mcs) -> Any:
            return gpu_core.hdbscan(source, min_cluster_size=mcs, min_samples=ms, backend=backend)  # type: ignore[arg-type]

        seconds, res = _median_run(clusters, repeats, warmup)
        rec = {"task": "hdbscan", **common, "input": rec["input"], "min_samples": ms, "min_cluster_size": mcs,
               "backend": res.backend, "seconds": seconds, "mfeatures_per_s": n * d / seconds / 1e6,
               "versus_emst": seconds / emst_seconds, "split_ms": _split(res.timings_ms),
               "clusters": res.num_clusters, "peers": {}}  # fmt: skip
        if n <= cfg["peer_max"] and ms in cfg.get("peer_min_samples", cfg["min_samples"]):
            for peer in cfg["peers"]:
                got = run_peer(peer, pts, mcs, ms, peer_timeout_s)
                if got is None:
                    continue
                labels = got.pop("labels", None)
                if labels is not None:
                    got["ari"] = float(adjusted_rand_score(labels, res.labels))
                    got["same_noise"] = bool(np.array_equal(labels == -1, res.labels == -1))
                    got["speedup"] = got["seconds"] / seconds
                rec["peers"][peer] = got
        records.append(rec)
        log(json.dumps(rec))
    return records


def run(
    suite: str, backend: str, out: Path | None, repeats: int | None = None, peer_timeout_s: float = 600.0,
    log: Callable[[str], None] = print, overrides: dict[str, Any] | None = None, warmup: bool = True,
) -> list[dict[str, Any]]:  # fmt: skip
    cfg = {**SUITES[suite], **(overrides or {})}
    records: list[dict[str, Any]] = []
    for n in cfg["sizes"]:
        for d in cfg["dims"]:
            for kind in ("uniform", "blobs"):
                records += measure_set(
                    kind, n, d, cfg, backend, repeats or cfg["repeats"], peer_timeout_s, log, warmup
                )
                if out is not None:  # after every set: an interrupted run keeps what it measured
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_text(json.dumps(records, indent=1), encoding="utf-8")
    return records


def run_points_benchmark(spec: PointsSpec, backend: str, log: Callable[[str], None]) -> dict[str, Any]:
    """The ``points`` record of ``python -m bench``."""
    records = run(spec.suite, backend, None, log=log)
    return {"name": spec.name, "type": "points", "status": "ok", "records": records}


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _emst_row(e: dict[str, Any], same: list[dict[str, Any]]) -> str:
    hd = " / ".join(_fmt_s(r["seconds"]) for r in same)
    five = next((r for r in same if r["min_samples"] == 5), None)
    ratio = "-" if five is None else f"{five['versus_emst']:.2f}x"
    parts = e["split_ms"].items()
    split = ", ".join(f"{int(v)} rounds" if k == "rounds" else f"{k[:-3]} {v}" for k, v in parts)
    cells = [e["points"], f"{e['n']:.0e}", e["d"], _fmt_s(e["seconds"]), f"{e['mfeatures_per_s']:.3g}",
             _fmt_s(e["host_seconds"]), hd, ratio, split]  # fmt: skip
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _peer_row(r: dict[str, Any], name: str, p: dict[str, Any]) -> str:
    cells = [
        r["points"], f"{r['n']:.0e}", r["d"], r["min_samples"], _fmt_s(r["seconds"]), name,
        _fmt_s(p["seconds"]) if p["status"] == "ok" else p["status"],
        "-" if p.get("speedup") is None else f"{p['speedup']:.1f}x",
        "-" if p.get("ari") is None else f"{p['ari']:.4f}", p.get("same_noise", "-"),
    ]  # fmt: skip
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table(record: dict[str, Any]) -> str:
    """Markdown: one row per point set (EMST and HDBSCAN*), then one per peer comparison."""
    rows = [
        "| points | n | d | EMST | MFeatures/s | from/to host | hdbscan ms=2 / 5 / 16 | ms=5 / EMST "
        "| split (EMST, ms) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    peers = [
        "",
        "| points | n | d | min_samples | ours | peer | peer time | speed-up | ARI | same noise |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    recs = record.get("records", [])
    for e in (r for r in recs if r["task"] == "emst"):
        key = (e["points"], e["n"], e["d"])
        same = [r for r in recs if r["task"] == "hdbscan" and (r["points"], r["n"], r["d"]) == key]
        rows.append(_emst_row(e, same))
        peers += [_peer_row(r, name, p) for r in same for name, p in r["peers"].items()]
    return "\n".join(rows + (peers if len(peers) > 3 else []))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.points", description=__doc__.splitlines()[0])
    p.add_argument("--suite", choices=sorted(SUITES), default="quick")
    p.add_argument("--backend", choices=["auto", "gpu", "cpu"], default="auto")
    p.add_argument("--repeats", type=int, help="timed runs per measurement (median reported)")
    p.add_argument("--peer-timeout", type=float, default=600.0, help="seconds one CPU peer run may take")
    p.add_argument("--no-warmup", action="store_true", help="time the first run too")
    p.add_argument("--sizes", help="comma-separated point counts instead of the suite's (e.g. 1e6,1e7)")
    p.add_argument("--dims", help="comma-separated dimensions instead of the suite's")
    p.add_argument("--min-samples", help="comma-separated min_samples of the hdbscan runs")
    p.add_argument("--peers", help="comma-separated CPU peers (fast_hdbscan,hdbscan,sklearn) or 'none'")
    p.add_argument("--peer-min-samples", help="the min_samples values the peers run with (default all)")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    overrides: dict[str, Any] = {}
    for key, value, conv in (
        ("sizes", args.sizes, lambda x: int(float(x))),
        ("dims", args.dims, int),
        ("min_samples", args.min_samples, int),
        ("peer_min_samples", args.peer_min_samples, int),
    ):
        if value:
            overrides[key] = [conv(x) for x in value.split(",")]
    if args.peers:
        overrides["peers"] = () if args.peers == "none" else tuple(args.peers.split(","))
    out = args.out or HERE / "results" / "points" / f"points-{args.suite}.json"
    records = run(
        args.suite, args.backend, out, args.repeats, args.peer_timeout, overrides=overrides,
        warmup=not args.no_warmup,
    )  # fmt: skip
    print(table({"records": records}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
