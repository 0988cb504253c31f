"""A graph larger than one GPU, sharded over the GPUs of a host: sizes and times (issue 12).

``python -m bench.multigpu --log2-vertices 24 --edges 4.0e9 --gpus 2`` splits a uniform random
graph of ``--edges`` edges into one contiguous edge-id range per GPU, as the service's sharding
does (:func:`gpu_core.edge_ranges`). Each GPU runs in its own process with only its device
visible, as a service worker does: it makes its shard on the device (int32 ids, float32 weights;
shard ``i`` from seed ``seed + i``, so the whole graph is defined by the seed), builds it, and
computes its shard's forest (:func:`gpu_core.shard_forest`'s steps, on device arrays). The shard
forests come back to this process, whose GPU 0 computes the forest of their union
(:func:`gpu_core.merge_shard_forests`), which by the cycle property is the whole graph's.

Reported: whether the whole graph could be built on one of the GPUs (the build's peak from
``estimate_device_bytes`` against the device's memory), each shard's build seconds, resident
bytes and MST milliseconds (CUDA events, median of ``--runs``), the merge's seconds, and the
wall time from the start of the shards to the final forest. ``check``: the final forest ``F``
against the cycle property on a sample ``S`` of other edges (each shard draws its own): the
minimum spanning forest of ``F + S``, built in global-id order, must be ``F`` itself.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

import gpu_core

_MP = multiprocessing.get_context("spawn")


def _shard(device: int, n: int, lo: int, hi: int, seed: int, runs: int, samples: int, out: Any) -> None:
    """One GPU's part (a child process that sees only ``device``)."""
    os.environ["CUDA_VISIBLE_DEVICES"] = str(device)
    try:
        import cupy as cp

        from bench.envelope import uniform_device_graph

        started = time.perf_counter()
        src, dst, weight = uniform_device_graph(n, hi - lo, seed)
        cp.cuda.Device().synchronize()
        generate_s = time.perf_counter() - started
        started = time.perf_counter()
        graph = gpu_core.Graph(src, dst, weight, n, backend="gpu")
        cp.cuda.Device().synchronize()
        build_s = time.perf_counter() - started
        graph.prepare()
        times, forest = [], None
        for _ in range(runs):
            forest = graph.minimum_spanning_forest()
            times.append(forest.compute_ms)
        assert forest is not None
        resident = graph.nbytes
        del graph
        local = cp.asarray(forest.edge_ids)
        drawn = cp.unique(
            cp.random.RandomState(seed + 1000).randint(0, hi - lo, size=samples, dtype=cp.int64)
        )
        out.put(
            {
                "device": device,
                "name": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                "total_bytes": int(cp.cuda.Device().mem_info[1]),
                "edges": hi - lo,
                "generate_s": generate_s,
                "build_s": build_s,
                "resident_bytes": resident,
                "resident_b_per_edge": resident / (hi - lo),
                "mst_ms": statistics.median(times),
                "mst_runs_ms": times,
                "forest": gpu_core.ShardForest(
                    forest.edge_ids.astype(np.int64) + lo, src[local].get(), dst[local].get(), forest.weights
                ),
                "sample": (drawn.get() + lo, src[drawn].get(), dst[drawn].get(), weight[drawn].get()),
            }
        )
    except BaseException as exc:
        out.put({"device": device, "error": f"{type(exc).__name__}: {exc}"})
        raise


def cycle_check(
    forest: gpu_core.SpanningForest, parts: list[gpu_core.ShardForest], samples: list[Any], n: int
) -> dict[str, Any]:
    """The minimum spanning forest of the forest plus sampled other edges is the forest itself."""
    f_ids = np.asarray(forest.edge_ids, dtype=np.int64)
    union_ids = np.concatenate([p.edge_ids for p in parts])
    where = {name: np.concatenate([getattr(p, name) for p in parts]) for name in ("src", "dst", "weights")}
    order = np.argsort(union_ids)
    pos = order[np.searchsorted(union_ids, f_ids, sorter=order)]  # the forest's edges in the union
    s_ids = np.concatenate([s[0] for s in samples])
    keep = ~np.isin(s_ids, f_ids)
    ids = np.concatenate([f_ids, s_ids[keep]])
    src = np.concatenate([where["src"][pos], np.concatenate([s[1] for s in samples])[keep]])
    dst = np.concatenate([where["dst"][pos], np.concatenate([s[2] for s in samples])[keep]])
    weight = np.concatenate([where["weights"][pos], np.concatenate([s[3] for s in samples])[keep]])
    by_id = np.argsort(ids, kind="stable")  # ids' order: (weight, position) ties break as (weight, id)
    sub = gpu_core.Graph(src[by_id], dst[by_id], weight[by_id], n, backend="gpu").minimum_spanning_forest()
    kept = np.sort(ids[by_id][np.asarray(sub.edge_ids)])
    return {
        "sampled_other_edges": int(keep.sum()),
        "forest_is_msf_of_forest_plus_sample": bool(np.array_equal(kept, np.sort(f_ids))),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.multigpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--log2-vertices", type=int, default=24)
    parser.add_argument("--edges", default="4.0e9")
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check-samples", type=int, default=1 << 21, help="sampled edges per shard")
    parser.add_argument("--out", default="bench/results/multigpu")
    args = parser.parse_args(argv)
    n, m = 1 << args.log2_vertices, int(float(args.edges))
    ranges = gpu_core.edge_ranges(m, args.gpus)
    estimate = gpu_core.estimate_device_bytes(n, m, np.float32)
    queue = _MP.Queue()
    started = time.perf_counter()
    children = [
        _MP.Process(
            target=_shard,
            args=(i, n, lo, hi, args.seed + i, args.runs, args.check_samples, queue),
            daemon=True,
        )
        for i, (lo, hi) in enumerate(ranges)
    ]
    for child in children:
        child.start()
    shards = sorted((queue.get(timeout=3000) for _ in children), key=lambda s: s["device"])
    shards_s = time.perf_counter() - started
    for child in children:
        child.join(60)
    failed = [s["error"] for s in shards if "error" in s]
    if failed:
        raise SystemExit("a shard failed: " + "; ".join(failed))
    parts = [s.pop("forest") for s in shards]
    samples = [s.pop("sample") for s in shards]
    merge_started = time.perf_counter()
    forest = gpu_core.merge_shard_forests(parts, n, backend="gpu")
    merge_s = time.perf_counter() - merge_started
    total_s = time.perf_counter() - started
    record: dict[str, Any] = {
        "vertices": n,
        "edges": m,
        "gpus": args.gpus,
        "device": shards[0]["name"],
        "device_total_gb": shards[0]["total_bytes"] / 1e9,
        "whole_graph_estimate_gb": {"resident": estimate.resident / 1e9, "peak": estimate.peak / 1e9},
        # the whole graph's build would need its peak on one device
        "builds_on_one_gpu": estimate.peak <= min(s["total_bytes"] for s in shards),
        "shards": shards,
        "shards_wall_s": shards_s,
        "merge_s": merge_s,
        "merge_compute_ms": forest.compute_ms,
        "total_wall_s": total_s,
        "forest_edges": forest.num_edges,
        "components": forest.num_components,
        "total_weight": forest.total_weight,
    }
    if args.check_samples:
        record["check"] = cycle_check(forest, parts, samples, n)
    print(json.dumps(record, indent=1, default=str), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"uniform-v{args.log2_vertices}-e{m}-{args.gpus}gpus.json").write_text(
        json.dumps(record, indent=1, default=str) + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
