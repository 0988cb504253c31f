"""HDBSCAN*'s part after the dendrogram on the device, against the host's passes (issue 11).

    python -m bench.hdbscan_device --sizes 1e6,1e7 [--dims 2,3] [--kinds uniform,blobs]
        [--min-cluster-size 5] [--min-samples 5] [--repeats 5] [--out FILE.json]

For each point set the mutual-reachability tree is computed on the device (CuPy points, the tree
left there) and its dendrogram too (``gpu_core._dendrogram.gpu.linkage_on_device``); then
``gpu_core._clustering.dendrogram_labels.labels_from_dendrogram`` on the device columns: the
wall time of the whole call (median of ``--repeats`` after a warm-up, the device synchronized),
and its parts timed one by one the same way (the condensed tree; stabilities and deaths; the
selection by heavy paths, their decomposition alone, and for comparison the copy to the host and
the host's selection, checked equal; the labels). The host's compiled passes on the host copy of
the tree (``gpu_core._clustering.hdbscan.labels_from_edges``: union-find, condensed tree,
selection, labels) are timed for scale, and the device's labels and probabilities are checked
equal to theirs, bit for bit. ``--cpu`` runs the same driver with NumPy on the CPU backend's
tree (a smoke test; no timing claims).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .points import make_points


def _ints(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x]


def _median_ms(run: Callable[[], Any], sync: Callable[[], None], repeats: int) -> tuple[float, Any]:
    out = run()  # warm-up
    times = []
    for _ in range(repeats):
        sync()
        began = time.perf_counter()
        out = run()
        sync()
        times.append((time.perf_counter() - began) * 1e3)
    return statistics.median(times), out


def measure(n: int, d: int, kind: str, mcs: int, min_samples: int, repeats: int, cpu: bool) -> dict[str, Any]:
    import gpu_core
    from gpu_core._clustering import condense as _condense
    from gpu_core._clustering import dendrogram_labels as _dendrogram_labels
    from gpu_core._clustering import eom_paths as _eom_paths
    from gpu_core._clustering import hdbscan as _hdbscan

    if cpu:
        xp: Any = np
        tree = gpu_core.euclidean_mst(make_points(kind, n, d), min_samples=min_samples, backend="cpu")
        z = gpu_core.linkage_from_sorted_edges(n, tree.src, tree.dst, tree.weights)

        def sync() -> None:
            pass

        launch = None
        host = (tree.src, tree.dst, tree.weights)
    else:
        import cupy as cp

        from gpu_core._dendrogram.gpu import linkage_on_device

        xp = cp
        points = cp.asarray(make_points(kind, n, d))
        gpu_core.euclidean_mst(points, min_samples=min_samples, backend="gpu")  # warm-up
        tree = gpu_core.euclidean_mst(points, min_samples=min_samples, backend="gpu")
        z = linkage_on_device(n, tree.src, tree.dst, tree.weights)

        def sync() -> None:
            cp.cuda.Device().synchronize()

        launch = _dendrogram_labels._cupy_launch
        host = tuple(cp.asnumpy(a) for a in (tree.src, tree.dst, tree.weights))
    left, right, sizes, distances = (xp.ascontiguousarray(z[:, i]) for i in (0, 1, 3, 2))
    record: dict[str, Any] = {
        "n": n, "d": d, "kind": kind, "min_samples": min_samples, "min_cluster_size": mcs,
        "emst_ms": tree.compute_ms, "device": "cpu (NumPy)" if cpu else "gpu (CuPy)",
    }  # fmt: skip
    whole_ms, (labels, prob) = _median_ms(
        lambda: _dendrogram_labels.labels_from_dendrogram(left, right, sizes, distances, mcs), sync, repeats
    )
    record["labels_from_dendrogram_ms"] = whole_ms
    # the parts, one by one (each synchronized: their sum exceeds the whole a little)
    parts: dict[str, float] = {}
    parts["condense_ms"], clusters = _median_ms(
        lambda: _condense.condense_columns(left, right, distances, sizes, mcs, xp, launch), sync, repeats
    )
    parts["stabilities_ms"], (stability, deaths) = _median_ms(
        lambda: _condense.summaries(clusters, xp, launch), sync, repeats
    )

    def host_select() -> Any:
        to_host = _dendrogram_labels._to_host
        parent, birth, stab = (to_host(a) for a in (clusters.parent, clusters.birth, stability))
        return xp.asarray(_dendrogram_labels._select_on_host(n, parent, birth, stab, "eom", 0.0, None))

    parts["host_selection_ms"], selected = _median_ms(host_select, sync, repeats)  # for comparison
    anchor = None
    if launch is not None:  # the selection the device path runs: excess of mass by heavy paths
        parts["heavy_paths_ms"], paths = _median_ms(
            lambda: _eom_paths.heavy_paths(clusters.parent, clusters.size, xp, launch), sync, repeats
        )
        record["paths"] = {"rounds": len(paths.rounds), "longest": int(paths.length.max())}
        parts["selection_ms"], (by_paths, anchor) = _median_ms(
            lambda: _eom_paths.select_on_device(clusters.parent, clusters.size, stability, "eom", xp, launch),
            sync,
            repeats,
        )
        record["same_selection"] = bool(xp.array_equal(by_paths, selected))
    parts["labels_ms"], _ = _median_ms(
        lambda: _condense.labels_and_probabilities(clusters, selected, deaths, xp, anchor, launch),
        sync,
        repeats,
    )
    record["parts"] = parts
    record["clusters"] = int(clusters.birth.shape[0])
    host_ms, ref = _median_ms(lambda: _hdbscan.labels_from_edges(n, *host, mcs, compiled=True), sync, repeats)
    record["host_compiled_passes_ms"] = host_ms
    got = (_dendrogram_labels._to_host(labels), _dendrogram_labels._to_host(prob))
    record["identical"] = bool(np.array_equal(got[0], ref[0]) and got[1].tobytes() == ref[1].tobytes())
    record["selected_clusters"] = int(ref[0].max()) + 1
    return record


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1e6,1e7")
    p.add_argument("--dims", default="2,3")
    p.add_argument("--kinds", default="uniform,blobs")
    p.add_argument("--min-cluster-size", type=int, default=5)
    p.add_argument("--min-samples", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--cpu", action="store_true", help="NumPy on the CPU backend's tree (a smoke test)")
    p.add_argument("--out", type=Path, help="write the records as JSON")
    args = p.parse_args(argv)
    records = []
    for n in _ints(args.sizes):
        for d in _ints(args.dims):
            for kind in args.kinds.split(","):
                record = measure(n, d, kind, args.min_cluster_size, args.min_samples, args.repeats, args.cpu)
                records.append(record)
                parts = " ".join(f"{k} {v:.1f}" for k, v in record["parts"].items())
                print(
                    f"{kind} {n:.0e} {d}-D: emst {record['emst_ms']:.1f} ms, after the dendrogram "
                    f"{record['labels_from_dendrogram_ms']:.1f} ms ({parts}), host passes "
                    f"{record['host_compiled_passes_ms']:.1f} ms, {record['clusters']} clusters, "
                    f"identical {record['identical']}",
                    flush=True,
                )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(records, indent=1) + "\n")
    return records


if __name__ == "__main__":
    main()
