"""The envelope of one GPU: the largest graph that builds and computes, its bytes, build and MST time.

``python -m bench.envelope uniform --log2-vertices 27 --edges 2.2e9`` builds a uniform random
graph (int32 ids, float32 weights in [0, 1), made on the device, so the host holds nothing of
its size) and reports:

* ``resident_b_per_edge``: ``Graph.nbytes / edges``;
* ``build_peak_b_per_edge``: the most bytes CuPy's pool held during the build on top of the
  input arrays (a counting allocator over the pool; the input stays the caller's), and
  ``build_peak_over_resident``; ``absolute_peak_gb`` counts the input too;
* ``build_s``: validation included, of the last of ``--builds`` builds (``earlier_builds_s``:
  the others; a process's first build also compiles CuPy's kernels for arrays of 2^31
  elements or more), and ``mst_ms`` (CUDA events, after ``prepare``; median of ``--runs``);
* ``check``: the forest against the cycle property on a sample. With ``F`` the forest and
  ``S`` random edges not in it, the minimum spanning forest of ``F + S`` (a second build, in
  ids' order, so ties break alike) must be ``F`` itself: that proves ``F`` acyclic and no
  sampled edge able to replace one of its edges; with one component, ``F`` spans. With
  ``--scipy`` SciPy's total of the same ``F + S`` is compared too.

``python -m bench.envelope rmat --scale 22`` times the compute of an RMAT graph (the
engine suite's ``rmat-22-float``) in the default layout, and with ``--wide`` forced into
the 64-bit one. Results are merged into ``--out``/envelope.json (one record per name).
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
from gpu_core._backend.memory import pool_peak

GENERATE_CHUNK = 1 << 27


def _cupy() -> Any:
    import cupy

    return cupy


def uniform_device_graph(num_vertices: int, num_edges: int, seed: int) -> tuple[Any, Any, Any]:
    """``num_edges`` uniform random edges (int32 ids, float32 weights), made on the device in chunks."""
    cp = _cupy()
    rs = cp.random.RandomState(seed)
    src = cp.empty(num_edges, dtype=cp.int32)
    dst = cp.empty(num_edges, dtype=cp.int32)
    weight = cp.empty(num_edges, dtype=cp.float32)
    for lo in range(0, num_edges, GENERATE_CHUNK):
        hi = min(num_edges, lo + GENERATE_CHUNK)
        src[lo:hi] = rs.randint(0, num_vertices, size=hi - lo, dtype=cp.int32)
        dst[lo:hi] = rs.randint(0, num_vertices, size=hi - lo, dtype=cp.int32)
        weight[lo:hi] = rs.random_sample(size=hi - lo, dtype=cp.float32)
    return src, dst, weight


def _timed_steps() -> dict[str, float]:
    """Wrap the build's steps (``GpuCsr`` methods) so each one's seconds are recorded, synchronized."""
    cp = _cupy()
    from gpu_core._graphs.gpu_csr import GpuCsr

    seconds: dict[str, float] = {}
    for name in ("_rank", "_gather_ids", "_fill_rows", "_heavy_chunks"):
        original = getattr(GpuCsr, name, None)
        if original is None:
            continue
        original = getattr(original, "__wrapped__", original)

        def timed(self: Any, *args: Any, _original: Any = original, _name: str = name) -> Any:
            cp.cuda.get_current_stream().synchronize()
            start = time.perf_counter()
            result = _original(self, *args)
            cp.cuda.get_current_stream().synchronize()
            seconds[_name] = seconds.get(_name, 0.0) + time.perf_counter() - start
            return result

        timed.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(GpuCsr, name, timed)
    return seconds


def _untimed_steps(seconds: dict[str, float]) -> dict[str, float]:
    """Put the build's steps back as they were; a copy of the seconds recorded so far."""
    from gpu_core._graphs.gpu_csr import GpuCsr

    for name in ("_rank", "_gather_ids", "_fill_rows", "_heavy_chunks"):
        method = getattr(GpuCsr, name, None)
        if method is not None and hasattr(method, "__wrapped__"):
            setattr(GpuCsr, name, method.__wrapped__)
    return dict(seconds)


def build_measured(
    src: Any, dst: Any, weight: Any, num_vertices: int
) -> tuple[gpu_core.Graph, dict[str, Any]]:
    """Build on the GPU, counting the pool's high-water mark over what was held before."""
    cp = _cupy()
    steps = _timed_steps()
    with pool_peak() as seen:
        start = time.perf_counter()
        graph = gpu_core.Graph(src, dst, weight, num_vertices, backend="gpu")
        cp.cuda.Device().synchronize()
    build_s = time.perf_counter() - start
    steps = _untimed_steps(steps)  # later builds (the check's) must not add to this one's
    m = graph.num_edges
    impl: Any = graph._impl
    return graph, {
        "vertices": num_vertices,
        "edges": m,
        "loop_free_edges": int(impl.num_loop_free),
        "weight_dtype": str(graph.weight_dtype),
        "wide_slots": bool(getattr(impl, "wide", False)),
        "threshold": int(impl.threshold),
        "resident_bytes": graph.nbytes,
        "resident_b_per_edge": graph.nbytes / m,
        "build_peak_bytes": seen.peak,
        "build_peak_b_per_edge": seen.peak / m,
        "build_peak_over_resident": seen.peak / graph.nbytes,
        "absolute_peak_gb": seen.high / 1e9,
        "estimate": _estimate(num_vertices, m, graph.weight_dtype),
        "build_s": build_s,
        "build_steps_s": steps,  # the rest: validation, rows, workspace
    }


def _estimate(n: int, m: int, dtype: Any) -> dict[str, int]:
    e = gpu_core.estimate_device_bytes(n, m, dtype)
    return {"resident": e.resident, "peak": e.peak}


def time_mst(graph: gpu_core.Graph, runs: int) -> tuple[gpu_core.SpanningForest, dict[str, Any]]:
    """``prepare``, then ``runs`` computations: their CUDA-event milliseconds."""
    start = time.perf_counter()
    graph.prepare()
    prepare_s = time.perf_counter() - start
    times, forest = [], None
    for _ in range(runs):
        forest = graph.minimum_spanning_forest()
        times.append(forest.compute_ms)
    assert forest is not None
    return forest, {
        "prepare_s": prepare_s,
        "mst_ms": statistics.median(times),
        "mst_ms_min": min(times),
        "mst_ms_max": max(times),
        "mst_runs_ms": times,
        "forest_edges": forest.num_edges,
        "components": forest.num_components,
        "total_weight": forest.total_weight,
    }


def cycle_check(
    src: Any,
    dst: Any,
    weight: Any,
    n: int,
    forest: gpu_core.SpanningForest,
    samples: int,
    seed: int,
    scipy: bool,
) -> dict[str, Any]:
    """The minimum spanning forest of forest + ``samples`` random other edges is the forest itself."""
    cp = _cupy()
    m = int(src.shape[0])
    f_ids = cp.asarray(forest.edge_ids)
    in_forest = cp.zeros(m, dtype=cp.bool_)
    in_forest[f_ids] = True
    drawn = cp.unique(cp.random.RandomState(seed + 1).randint(0, m, size=samples, dtype=cp.int64))
    others = drawn[~in_forest[drawn]]
    del in_forest, drawn
    ids = cp.concatenate([f_ids, others])
    ids.sort()  # in ids' order: the sub-graph's (weight, position) order is the graph's (weight, id)
    sub_src, sub_dst, sub_w = src[ids], dst[ids], weight[ids]
    sub = gpu_core.Graph(sub_src, sub_dst, sub_w, n, backend="gpu").minimum_spanning_forest()
    kept = ids[cp.asarray(sub.edge_ids)].get()
    result: dict[str, Any] = {
        "sampled_other_edges": int(others.shape[0]),
        "forest_is_msf_of_forest_plus_sample": bool(np.array_equal(kept, forest.edge_ids)),
        "spanning_tree": forest.num_components == 1,
    }
    if scipy:
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import minimum_spanning_tree

        # SciPy drops zero weights: shift by one (the same shift for every edge keeps the tree's order)
        w = sub_w.get().astype(np.float64) + 1.0
        matrix = coo_matrix((w, (sub_src.get(), sub_dst.get())), shape=(n, n)).tocsr()
        tree = minimum_spanning_tree(matrix)
        scipy_total = float(tree.sum()) - tree.nnz
        result["scipy_total"] = scipy_total
        result["scipy_total_matches"] = abs(scipy_total - float(forest.total_weight)) <= 1e-6 * max(
            1.0, abs(scipy_total)
        )
    return result


def run_uniform(args: argparse.Namespace) -> dict[str, Any]:
    cp = _cupy()
    n, m = 1 << args.log2_vertices, int(float(args.edges))
    if args.wide:
        from gpu_core._graphs import layout as _layout

        _layout.WIDE_EDGES_FROM = 0
    start = time.perf_counter()
    src, dst, weight = uniform_device_graph(n, m, args.seed)
    cp.cuda.Device().synchronize()
    record: dict[str, Any] = {"generate_s": time.perf_counter() - start}
    cold: list[float] = []
    for _ in range(args.builds - 1):  # the first build of a process compiles CuPy's kernels for its sizes
        graph, built = build_measured(src, dst, weight, n)
        cold.append(built["build_s"])
        print(f"earlier build: {built['build_s']:.2f} s, steps {built['build_steps_s']}", flush=True)
        del graph
    graph, built = build_measured(src, dst, weight, n)
    record.update(built)
    record["earlier_builds_s"] = cold
    forest, timed = time_mst(graph, args.runs)
    record.update(timed)
    del graph
    cp.get_default_memory_pool().free_all_blocks()
    if args.check_samples:
        record["check"] = cycle_check(src, dst, weight, n, forest, args.check_samples, args.seed, args.scipy)
    return record


def run_rmat(args: argparse.Namespace) -> dict[str, Any]:
    from bench.generators import GraphSpec, load_or_make

    if args.wide:
        from gpu_core._graphs import layout as _layout

        _layout.WIDE_EDGES_FROM = 0
    spec = GraphSpec(f"rmat-{args.scale}-float", "rmat", (("scale", args.scale), ("edge_factor", 8)), "float")
    edges, _ = load_or_make(spec, Path(args.cache) if args.cache else None)
    cp = _cupy()
    src, dst, weight = cp.asarray(edges.src), cp.asarray(edges.dst), cp.asarray(edges.weight)
    graph, record = build_measured(src, dst, weight, edges.num_vertices)
    _, timed = time_mst(graph, args.runs)
    record.update(timed)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.envelope", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="graph", required=True)
    uniform = sub.add_parser("uniform", help="a uniform random graph made on the device")
    uniform.add_argument("--log2-vertices", type=int, default=27)
    uniform.add_argument("--edges", default="2.2e9", help="edges (e.g. 2.2e9)")
    uniform.add_argument("--check-samples", type=int, default=1 << 22, help="cycle-check sample (0: none)")
    uniform.add_argument("--scipy", action="store_true", help="also SciPy's total of forest + sample")
    uniform.add_argument("--builds", type=int, default=2, help="builds in a row; the last one is reported")
    rmat = sub.add_parser("rmat", help="an RMAT graph (8 edges per vertex, float weights)")
    rmat.add_argument("--scale", type=int, default=22)
    rmat.add_argument("--cache", default="", help="folder to cache the generated topology in")
    for p in (uniform, rmat):
        p.add_argument("--runs", type=int, default=5)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--wide", action="store_true", help="force the 64-bit slot layout")
        p.add_argument("--name", default="", help="record name (default: from the parameters)")
        p.add_argument("--out", default="bench/results/envelope/h200")
    args = parser.parse_args(argv)
    cp = _cupy()
    record = run_uniform(args) if args.graph == "uniform" else run_rmat(args)
    _free, total = cp.cuda.Device().mem_info
    record["device"] = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    record["device_total_gb"] = total / 1e9
    name = args.name or (
        f"uniform-2^{args.log2_vertices}-{float(args.edges):.3g}"
        if args.graph == "uniform"
        else f"rmat-{args.scale}"
    ) + ("-wide" if args.wide else "")
    record["name"] = name
    print(json.dumps(record, indent=1, default=str), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "envelope.json"
    records = json.loads(path.read_text()) if path.exists() else {}
    records[name] = record
    path.write_text(json.dumps(records, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
