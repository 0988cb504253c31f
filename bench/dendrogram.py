"""Single-linkage dendrogram on the device against the host's union-find (issue 11's HDBSCAN* host part).

    python -m bench.dendrogram --sizes 1e6,1e7 [--dims 2,3] [--kinds uniform,blobs] [--repeats 5]
        [--tails 32,64,128,256,512] [--spacings 16,32,64] [--out FILE.json]

For each point set the Euclidean MST is computed on the device (CuPy points, the tree left there);
then, on that tree, ``gpu_core._dendrogram.gpu.linkage_on_device`` (device time by CUDA events:
median of ``--repeats`` runs after a warm-up, split into its phases: input check, reps, sort by
winner, Euler tour and its ranking, rows) for every ``--tails`` x ``--spacings`` tuning, the wall
time of the same call, the copy of the matrix to the host, and ``gpu_core.linkage_from_sorted_edges``
on the host copy of the tree (the path it replaces). Every device matrix is checked equal to the
host's. The EMST's own time is printed for scale (issue 11: HDBSCAN* within 2x of the EMST).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from .points import make_points


def _ints(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x]


def measure(n: int, d: int, kind: str, tails: list[int], spacings: list[int], repeats: int) -> dict[str, Any]:
    import cupy as cp

    import gpu_core
    from gpu_core._dendrogram.gpu import linkage_on_device

    points = cp.asarray(make_points(kind, n, d))
    gpu_core.euclidean_mst(points, backend="gpu")  # warm-up: kernels compiled
    tree = gpu_core.euclidean_mst(points, backend="gpu")
    src, dst, w = (cp.asnumpy(a) for a in (tree.src, tree.dst, tree.weights))
    gpu_core.linkage_from_sorted_edges(n, src, dst, w)  # warm-up: the compiled loop
    began = time.perf_counter()
    want = gpu_core.linkage_from_sorted_edges(n, src, dst, w)
    host_s = time.perf_counter() - began
    record: dict[str, Any] = {
        "n": n, "d": d, "kind": kind, "emst_ms": tree.compute_ms, "host_linkage_ms": host_s * 1e3,
        "device": [],
    }  # fmt: skip
    for tail in tails:
        for spacing in spacings:
            z = linkage_on_device(n, tree.src, tree.dst, tree.weights, tail=tail, spacing=spacing)
            assert np.array_equal(z.get(), want), f"device matrix differs (tail {tail}, spacing {spacing})"
            del z
            phases: list[dict[str, float]] = []
            totals, walls = [], []
            for _ in range(repeats):
                timings: dict[str, float] = {}
                cp.cuda.Device().synchronize()
                began = time.perf_counter()
                z = linkage_on_device(n, tree.src, tree.dst, tree.weights, tail=tail, spacing=spacing,
                                      timings_ms=timings)  # fmt: skip
                cp.cuda.Device().synchronize()
                walls.append((time.perf_counter() - began) * 1e3)
                totals.append(sum(timings.values()))
                phases.append(timings)
            began = time.perf_counter()
            z.get()
            copy_ms = (time.perf_counter() - began) * 1e3
            del z
            phases_ms = {k: statistics.median(p[k] for p in phases) for k in phases[0]}
            row: dict[str, Any] = {
                "tail": tail, "spacing": spacing, "device_ms": statistics.median(totals),
                "wall_ms": statistics.median(walls), "copy_to_host_ms": copy_ms,
                "phases_ms": phases_ms,
            }  # fmt: skip
            record["device"].append(row)
            split = " ".join(f"{k} {v:.2f}" for k, v in phases_ms.items())
            print(
                f"{kind:7s} n={n:>9,d} d={d} tail={tail:<5d} spacing={spacing:<4d} "
                f"device {row['device_ms']:7.2f} ms (wall {row['wall_ms']:7.2f}; {split}); "
                f"copy to host {copy_ms:6.1f} ms; host union-find {record['host_linkage_ms']:7.1f} ms; "
                f"EMST {tree.compute_ms:7.1f} ms",
                flush=True,
            )
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.dendrogram", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1e6,1e7", help="comma-separated point counts")
    p.add_argument("--dims", default="2,3")
    p.add_argument("--kinds", default="uniform,blobs")
    p.add_argument("--tails", default="32,64,128,256,512", help="edges one thread finishes (powers of two)")
    p.add_argument("--spacings", default="32", help="tour tokens per splitter (powers of two)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    records = [
        measure(n, d, kind, _ints(args.tails), _ints(args.spacings), args.repeats)
        for n in _ints(args.sizes)
        for d in _ints(args.dims)
        for kind in args.kinds.split(",")
    ]
    if args.out is not None:
        args.out.write_text(json.dumps(records, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
