"""Queries of a resident graph on the GPU: the cost of new weights, a maximum forest, a what-if, labels.

    python -m bench.queries [--scale 22] [--repeats 7] [--json OUT.json]

Builds RMAT 2^scale (8 edges per vertex, random int32 weights) on the device and times, after a
warm-up, each query's device work with CUDA events on the graph's stream (median of ``repeats``):

* ``set_weights``: a full replacement of the weights (the arrays already on the device) and the
  rebuild of what depends on them (the rank order, every slot's rank, the rows' filter split);
* ``mst`` on the new weights, the first one (learns its plan) and a replayed one;
* ``max``: switching the order to ``(-weight, edge_id)`` and computing the maximum forest;
* ``what_if``: a forest with 1,000 random edges left out;
* ``labels``: component labels, and labels of 64 clusters cut from the forest.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .generators import rmat_topology


def _timed(cp: Any, stream: Any, work: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """(median device ms by events on ``stream``, median wall ms) of ``work``."""
    device, wall = [], []
    for _ in range(repeats):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        cp.cuda.runtime.deviceSynchronize()
        t0 = time.perf_counter()
        start.record(stream)
        work()
        stop.record(stream)
        stop.synchronize()
        cp.cuda.runtime.deviceSynchronize()
        wall.append((time.perf_counter() - t0) * 1e3)
        device.append(cp.cuda.get_elapsed_time(start, stop))
    return statistics.median(device), statistics.median(wall)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.queries", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=22)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    import cupy as cp

    import gpu_core

    gpu_core.warm_up("gpu")
    topo = rmat_topology(args.scale, 8)
    m = int(topo.src.shape[0])
    rng = np.random.default_rng(1)
    weights = [rng.integers(1, 2**24, m, dtype=np.int32) for _ in range(2)]
    graph = gpu_core.Graph(cp.asarray(topo.src), cp.asarray(topo.dst), cp.asarray(weights[0]),
                           topo.num_vertices, backend="gpu")  # fmt: skip
    graph.prepare()
    stream = graph._impl._stream  # type: ignore[attr-defined]  # the graph's own stream: every query runs on it
    on_device = [cp.asarray(w) for w in weights]
    turn = iter(range(10**9))
    rows: dict[str, tuple[float, float]] = {}
    rows["set_weights (full replacement, rebuild)"] = _timed(
        cp, stream, lambda: graph.set_weights(on_device[next(turn) % 2]), args.repeats
    )

    def first_mst_after_new_weights() -> None:
        graph.set_weights(on_device[next(turn) % 2])
        graph.minimum_spanning_forest()

    rows["set_weights + first mst"] = _timed(cp, stream, first_mst_after_new_weights, args.repeats)
    graph.prepare()
    rows["mst (planned, replayed)"] = _timed(cp, stream, graph.minimum_spanning_forest, args.repeats)

    def max_then_back() -> None:
        graph.maximum_spanning_forest()
        graph.minimum_spanning_forest()

    graph.prepare("max")
    rows["max forest + back to min (two re-ranks)"] = _timed(cp, stream, max_then_back, args.repeats)
    exclude = rng.choice(m, 1000, replace=False)
    rows["what-if, 1000 edges out"] = _timed(
        cp, stream, lambda: graph.minimum_spanning_forest(exclude=exclude), args.repeats
    )
    rows["component labels"] = _timed(cp, stream, graph.component_labels, args.repeats)
    clusters = graph.minimum_spanning_forest().num_components + 63  # 64 more than the components
    rows["cluster labels (64 cuts)"] = _timed(
        cp, stream, lambda: graph.cluster_labels(k=clusters), args.repeats
    )
    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    print(f"RMAT 2^{args.scale}: {topo.num_vertices} vertices, {m} edges, {name}, median of {args.repeats}")
    print(f"{'query':45s} {'device ms':>10s} {'wall ms':>10s}")
    for what, (device, wall) in rows.items():
        print(f"{what:45s} {device:10.2f} {wall:10.2f}")
    if args.json:
        record = {"graph": f"rmat-{args.scale}", "edges": m, "gpu": name, "repeats": args.repeats,
                  "rows": {k: {"device_ms": d, "wall_ms": w} for k, (d, w) in rows.items()}}  # fmt: skip
        with open(args.json, "w") as f:
            json.dump(record, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
