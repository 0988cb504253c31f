"""Issue 45's speed targets for the metrics, on a GPU, with scikit-learn beside it on the host's cores.

    python -m bench.metrics [--repeats 5] [--peer-timeout 90] [--out bench/results/metrics]
    python -m bench.metrics --peers-only --out DIR &   # scikit-learn alone (beside other work) ...
    python -m bench.metrics --no-peers --out DIR       # ... then ours, with the speed-ups
    python -m bench.metrics --peers-only --serial --sets cosine=52000 --out DIR
                                           # one peer at a time, each with the host to itself
    python -m bench.metrics --smoke        # small sizes, any backend: the script's own check

Targets (medians of ``--repeats`` runs after a warm-up, points already on the device, to labels in
host memory; ``min_samples=5``, ``min_cluster_size=5``):

* haversine HDBSCAN* of 10^7 (latitude, longitude) points uniform on the sphere <= 2x the 3-D
  Euclidean HDBSCAN* of 10^7 uniform points (the same run);
* manhattan and chebyshev HDBSCAN* of those 10^7 3-D points <= 2x the Euclidean time;
* cosine on 10^5 x 384 (Gaussian blobs) within 1.2x of Euclidean on the same points;
* precomputed: a dense 40,000 x 40,000 float64 matrix already on the device in <= 1 s;
* every metric >= 100x scikit-learn's HDBSCAN with that metric, on data where it takes at least a
  minute: scikit-learn runs in processes of their own on the host's cores while the GPU is timed,
  each stopped after ``--peer-timeout`` seconds (a run that did not finish gives a lower bound of
  the speed-up: ``> timeout / ours``).

Writes ``metrics.json`` (every figure, the split of each of our runs) and ``README.md`` (the table).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np

import gpu_core
from bench.timing import device_sync

HERE = Path(__file__).resolve().parent
#: the peers' sets: (metric, metric_params, maker, n), sized for a minute or more of scikit-learn
PEER_SETS: list[tuple[str, dict[str, Any] | None, str, int]] = [
    ("euclidean", None, "cube", 400_000),
    ("manhattan", None, "cube", 400_000),
    ("chebyshev", None, "cube", 400_000),
    ("minkowski", {"p": 3}, "cube", 60_000),
    ("haversine", None, "sphere", 60_000),
    ("cosine", None, "embeddings", 30_000),
    ("precomputed", None, "matrix", 30_000),
]
SMOKE_PEER_SETS = [(m, p, k, 2000 if k != "embeddings" else 500) for m, p, k, _ in PEER_SETS]


def make(kind: str, n: int, seed: int = 0, xp: Any = np) -> Any:
    """The benchmark's points: a uniform cube (3-D), uniform on the sphere (latitude, longitude),
    Gaussian blobs of 384 coordinates (embeddings), or the distances of cube points (a matrix)."""
    rng = np.random.default_rng(seed)
    if kind == "cube":
        return xp.asarray(rng.random((n, 3)))
    if kind == "sphere":
        return xp.asarray(np.column_stack((np.arcsin(rng.uniform(-1, 1, n)), rng.uniform(-np.pi, np.pi, n))))
    if kind == "embeddings":
        centres = rng.normal(size=(20, 384))
        return xp.asarray(centres[rng.integers(0, 20, n)] + 0.3 * rng.normal(size=(n, 384)))
    points = xp.asarray(rng.random((n, 3)))
    return distance_matrix(points, xp)


def distance_matrix(points: Any, xp: Any, rows: int = 2048) -> Any:
    """Euclidean distances of ``points``, exactly symmetric (the lighter orientation of each pair)."""
    n = int(points.shape[0])
    out = xp.empty((n, n))
    norms = (points * points).sum(axis=1)
    for lo in range(0, n, rows):
        block = points[lo : lo + rows]
        d2 = norms[lo : lo + rows, None] + norms[None, :] - 2.0 * (block @ points.T)
        out[lo : lo + rows] = xp.sqrt(xp.maximum(d2, 0.0))
    for lo in range(0, n, rows):  # symmetric: each block against its transposed twin
        out[lo : lo + rows] = xp.minimum(out[lo : lo + rows], out[:, lo : lo + rows].T)
    xp.fill_diagonal(out, 0.0)
    return out


def ours(points: Any, metric: str, params: Any, repeats: int) -> dict[str, Any]:
    """Median seconds of HDBSCAN* (to labels on the host) and the last run's split."""
    backend: Literal["gpu", "cpu"] = "gpu" if gpu_core.gpu_available() else "cpu"

    def run() -> Any:
        result = gpu_core.hdbscan(
            points, min_cluster_size=5, min_samples=5, metric=metric, metric_params=params, backend=backend
        )
        device_sync(backend)
        return result

    run()
    times, result = [], None
    for _ in range(repeats):
        result = None
        t0 = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - t0)
    assert result is not None
    return {"seconds": float(np.median(times)), "runs": times, "clusters": result.num_clusters,
            "split_ms": {k: round(v, 2) for k, v in result.timings_ms.items()}}  # fmt: skip


def _peer(conn: Any, metric: str, params: Any, kind: str, n: int) -> None:
    import warnings

    from sklearn.cluster import HDBSCAN

    warnings.simplefilter("ignore")
    data = make(kind, n, seed=1)
    t0 = time.perf_counter()
    HDBSCAN(min_cluster_size=5, min_samples=5, metric=metric, metric_params=params, copy=True).fit(data)
    conn.send(time.perf_counter() - t0)


def start_peers(sets: list[tuple[str, Any, str, int]]) -> list[tuple[Any, Any, float]]:
    ctx = multiprocessing.get_context("spawn")
    started = []
    for metric, params, kind, n in sets:
        mine, theirs = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_peer, args=(theirs, metric, params, kind, n), daemon=True)
        proc.start()
        started.append((proc, mine, time.perf_counter()))
    return started


def collect_peer(proc: Any, conn: Any, began: float, timeout: float) -> dict[str, Any]:
    left = max(0.0, timeout - (time.perf_counter() - began))
    if conn.poll(left):
        try:
            return {"seconds": conn.recv(), "finished": True}
        except EOFError:  # the peer died without an answer (killed: the host's memory, most often)
            proc.join(10)
            return {"seconds": None, "finished": False, "exitcode": proc.exitcode}
    proc.kill()
    return {"seconds": timeout, "finished": False}


def targets(repeats: int, smoke: bool) -> dict[str, Any]:
    xp = _device_module()
    n = 20_000 if smoke else 10**7
    out: dict[str, Any] = {}
    cube = make("cube", n, xp=xp)
    out["euclidean_3d"] = ours(cube, "euclidean", None, repeats)
    out["manhattan_3d"] = ours(cube, "manhattan", None, repeats)
    out["chebyshev_3d"] = ours(cube, "chebyshev", None, repeats)
    del cube
    out["haversine"] = ours(make("sphere", n, xp=xp), "haversine", None, repeats)
    wide = make("embeddings", 2000 if smoke else 10**5, xp=xp)
    out["euclidean_384"] = ours(wide, "euclidean", None, repeats)
    out["cosine_384"] = ours(wide, "cosine", None, repeats)
    del wide
    matrix = make("matrix", 2000 if smoke else 40_000, xp=xp)
    out["precomputed_40000"] = ours(matrix, "precomputed", None, repeats)
    return out


def _agreement(ours: np.ndarray, theirs: np.ndarray) -> float:
    """The share of points with the same label once labels are matched by assignment."""
    from scipy.optimize import linear_sum_assignment

    a, b = np.unique(ours, return_inverse=True)[1], np.unique(theirs, return_inverse=True)[1]
    counts = np.zeros((a.max() + 1, b.max() + 1))
    np.add.at(counts, (a, b), 1)
    rows, cols = linear_sum_assignment(-counts)
    return float(counts[rows, cols].sum() / ours.size)


def ties_table() -> str:
    """Agreement with scikit-learn's HDBSCAN where mutual-reachability distances tie
    (docs/design/exactness.md)."""
    import warnings

    from sklearn.cluster import HDBSCAN

    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    centres = np.random.default_rng(1).uniform(-10, 10, (5, 2))
    blobs = np.concatenate(
        [c + rng.normal(scale=0.8, size=(300, 2)) for c in centres] + [rng.uniform(-12, 12, (300, 2))]
    )
    grid = np.random.default_rng(0).integers(0, 12, (2000, 3)).astype(float) + 1
    sets = [("blobs 2-D", blobs, 5), ("blobs 2-D", blobs, 10), ("integer grid 3-D", grid, 8)]
    lines = [
        "| metric | data | min_samples | labels equal | max |Δ probability| |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    metrics = (
        ("euclidean", None),
        ("manhattan", None),
        ("chebyshev", None),
        ("minkowski", {"p": 3}),
        ("cosine", None),
    )
    for metric, params in metrics:
        for name, x, k in sets:
            ours = gpu_core.hdbscan(
                x, min_cluster_size=15, min_samples=k, metric=metric, metric_params=params, backend="cpu"
            )
            theirs = HDBSCAN(
                min_cluster_size=15, min_samples=k, metric=metric, metric_params=params, copy=True
            ).fit(x)
            delta = np.abs(ours.probabilities - theirs.probabilities_).max()
            lines.append(
                f"| {metric} | {name} | {k} | {_agreement(ours.labels, theirs.labels_):.4f} | {delta:.3g} |"
            )
    places = np.concatenate([c + rng.normal(scale=0.05, size=(250, 2)) for c in np.column_stack(
        (rng.uniform(-1.2, 1.2, 6), rng.uniform(-3, 3, 6)))] + [np.column_stack((rng.uniform(-1.5, 1.5, 300),
        rng.uniform(-3.1, 3.1, 300)))])  # fmt: skip
    for k in (5, 10):
        ours = gpu_core.hdbscan(places, min_cluster_size=15, min_samples=k, metric="haversine", backend="cpu")
        theirs = HDBSCAN(min_cluster_size=15, min_samples=k, metric="haversine", copy=True).fit(places)
        delta = np.abs(ours.probabilities - theirs.probabilities_).max()
        share = _agreement(ours.labels, theirs.labels_)
        lines.append(f"| haversine | clusters on the sphere | {k} | {share:.4f} | {delta:.3g} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--peer-timeout", type=float, default=90.0)
    parser.add_argument("--peers-only", action="store_true", help="only scikit-learn's runs: sklearn.json")
    parser.add_argument(
        "--no-peers", action="store_true", help="ours only; speed-ups from --out's sklearn.json"
    )
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument(
        "--ties", action="store_true", help="agreement with scikit-learn where weights tie (CPU)"
    )
    parser.add_argument(
        "--sets",
        default=None,
        help="only these peer sets, resized: METRIC=N,... (e.g. cosine=60000,precomputed=45000)",
    )
    parser.add_argument(
        "--serial",
        action="store_true",
        help="with --peers-only: one peer at a time (the big sets' n x n matrices do not fit together)",
    )
    parser.add_argument("--skip-targets", action="store_true", help="the peer sets only, no targets")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args(argv)
    if args.serial and not args.peers_only:
        parser.error("--serial runs the peers one at a time alone: it goes with --peers-only")
    if args.ties:
        print(ties_table())
        return 0
    sets = SMOKE_PEER_SETS if args.smoke else PEER_SETS
    if args.sets:
        sets = chosen_sets(sets, args.sets)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.peers_only and args.serial:
        found = [collect_peer(*start_peers([one])[0], args.peer_timeout) for one in sets]
        (args.out / "sklearn.json").write_text(json.dumps(found, indent=1) + "\n")
        return 0
    if not args.no_peers:
        peers = start_peers(sets)
        if args.peers_only:  # beside other work: the GPU is left to it
            found = [collect_peer(*peer, args.peer_timeout) for peer in peers]
            (args.out / "sklearn.json").write_text(json.dumps(found, indent=1) + "\n")
            return 0
    began = time.perf_counter()
    record: dict[str, Any] = {
        "host": platform.node(),
        "python": platform.python_version(),
        "repeats": args.repeats,
    }
    if not args.skip_targets:
        record["targets"] = targets(args.repeats, args.smoke)
    mine = []
    for metric, params, kind, n in sets:
        data = make(kind, n, seed=1, xp=_device_module())
        mine.append(ours(data, metric, params, min(args.repeats, 3)))
        del data
    saved = args.out / "sklearn.json"
    if args.no_peers:
        theirs = json.loads(saved.read_text()) if saved.exists() else [None] * len(sets)
    else:
        theirs = [collect_peer(*peer, args.peer_timeout) for peer in peers]
    record["peers"] = [
        {"metric": m, "params": p, "points": k, "n": n, "ours": o, "sklearn": t,
         "speed_up": None if t is None or t["seconds"] is None else t["seconds"] / o["seconds"]}
        for (m, p, k, n), o, t in zip(sets, mine, theirs, strict=True)
    ]  # fmt: skip
    record["wall_s"] = time.perf_counter() - began
    text = json.dumps(record, indent=1, default=str)
    print(text)
    (args.out / "metrics.json").write_text(text + "\n")
    return 0


def chosen_sets(
    sets: list[tuple[str, dict[str, Any] | None, str, int]], text: str
) -> list[tuple[str, dict[str, Any] | None, str, int]]:
    """``sets`` reduced to the metrics ``text`` names (``METRIC=N,...``), each with its new size."""
    sizes = {}
    for part in text.split(","):
        metric, _, n = part.strip().partition("=")
        sizes[metric] = int(float(n))
    unknown = set(sizes) - {m for m, *_ in sets}
    if unknown:
        raise SystemExit(f"--sets names no peer set: {sorted(unknown)}")
    return [(m, p, k, sizes[m]) for m, p, k, _ in sets if m in sizes]


def _device_module() -> Any:
    if gpu_core.gpu_available():
        import cupy

        return cupy
    return np


if __name__ == "__main__":
    raise SystemExit(main())
