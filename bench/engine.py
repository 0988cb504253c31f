"""Engine-level benchmark: ``gpu_core`` on the GPU and the CPU, against the peers, on one graph.

For each graph, in one run:

* ``gpu``: ``Graph(..., backend="gpu")`` built once (graph resident), kernels
  warmed up, then ``graph.minimum_spanning_forest()`` run ``repeats`` times
  (11 by default in the full suite; median and spread). Per run: the forest's
  ``compute_ms`` (the engine's CUDA events around its kernels: the headline,
  comparable to the reference), CUDA events around the whole call (``call_ms``:
  plus sorting the forest, copying it to the host and Python), and host wall time.
  "With memcpy": Graph construction from host arrays (upload + device CSR
  build) plus the computation, timed on the host.
* ``cpu``: the NumPy backend, build (ranking) and compute timed separately.
* peers: SciPy's ``minimum_spanning_tree`` (CSR build included), NetworkX
  (small graphs), igraph (when importable).

Every one's total weight and component count are checked against the others.
Each part is guarded: a failure is recorded in its entry and the rest goes on.

One module past 500 lines on purpose: the graph families, the peers and the checks of one
benchmark, each part guarded in turn; the generators and the report live apart.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import importlib
import importlib.util
import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .generators import DEFAULT_CACHE, Edges, GraphSpec, load_or_make
from .suites import H100_ALLOWANCE, REFERENCE_GPU, STRETCH_MS
from .timing import repeat, summarize

ENGINES: tuple[str, ...] = ("gpu", "cpu", "scipy", "networkx", "igraph")


@dataclass
class EngineOptions:
    repeats: int = 9
    warmup: int = 2
    memcpy_repeats: int = 5
    peer_repeats: int = 3
    #: stop repeating a measurement (after its first run) once this many seconds went by
    budget_s: float = 60.0
    engines: tuple[str, ...] = ENGINES
    #: NetworkX takes seconds even on the small graphs: fewer runs
    networkx_repeats: int = 1
    networkx_max_edges: int = 600_000
    #: igraph's spanning_tree grows worse than linearly: 12 s on 5.4M road edges, 474 s on RMAT-22
    igraph_max_edges: int = 10_000_000
    cpu_max_edges: int | None = None
    scipy_max_edges: int | None = None
    cache_dir: Path | None = DEFAULT_CACHE


def _guard(part: str, fn: Callable[[], dict[str, Any]], log: Callable[[str], None]) -> dict[str, Any]:
    start = time.perf_counter()
    log(f"  {part}: running")
    try:
        out = fn()
    except Exception as exc:
        tb = traceback.format_exc(limit=8)
        log(f"  {part}: ERROR {type(exc).__name__}: {exc}")
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}", "traceback": tb}
    finally:
        gc.collect()
    out.setdefault("status", "ok")
    out["elapsed_s"] = round(time.perf_counter() - start, 3)
    log(f"  {part}: done in {out['elapsed_s']:.1f} s")
    return out


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _skipped(reason: str) -> dict[str, Any]:
    return {"status": "skipped", "reason": reason}


def _throughput(directed_edges: int, ms: float | None) -> float | None:
    return directed_edges / (ms / 1e3) if ms and ms > 0 else None


# --------------------------------------------------------------------------- gpu_core


def _forest_summary(forest: Any) -> dict[str, Any]:
    ids = np.ascontiguousarray(forest.edge_ids, dtype=np.int64)
    return {
        "edge_ids_sha256": hashlib.sha256(ids.tobytes()).hexdigest(),
        "total_weight": forest.total_weight,
        "num_components": int(forest.num_components),
        "forest_edges": int(forest.num_edges),
    }


def measure_gpu(edges: Edges, opts: EngineOptions, log: Callable[[str], None]) -> dict[str, Any]:
    import cupy as cp

    import gpu_core

    src, dst, weight, n = edges
    directed = edges.directed_edges
    pool = cp.get_default_memory_pool()
    device = cp.cuda.Device()

    def release() -> None:
        gc.collect()
        pool.free_all_blocks()

    t0 = time.perf_counter()
    gpu_core.warm_up("gpu")
    device.synchronize()
    warm_up_ms = (time.perf_counter() - t0) * 1e3

    release()
    used_before = pool.used_bytes()
    t0 = time.perf_counter()
    graph = gpu_core.Graph(src, dst, weight, n, backend="gpu")
    device.synchronize()
    build_ms = (time.perf_counter() - t0) * 1e3
    resident_pool_bytes = pool.used_bytes() - used_before
    nbytes = int(graph.nbytes)

    first = None
    for _ in range(max(opts.warmup, 1)):
        first = graph.minimum_spanning_forest()
    assert first is not None
    event_ms: list[float] = []
    wall_ms: list[float] = []
    forest_ms: list[float] = []
    deterministic = True
    start_all = time.perf_counter()
    for i in range(max(opts.repeats, 1)):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        t0 = time.perf_counter()
        start.record()
        forest = graph.minimum_spanning_forest()
        end.record()
        end.synchronize()
        wall_ms.append((time.perf_counter() - t0) * 1e3)
        event_ms.append(float(cp.cuda.get_elapsed_time(start, end)))
        forest_ms.append(float(forest.compute_ms))
        deterministic = deterministic and np.array_equal(forest.edge_ids, first.edge_ids)
        if i + 1 >= min(opts.repeats, 9) and time.perf_counter() - start_all > opts.budget_s:
            break
    peak_pool_bytes = int(pool.total_bytes())
    free_b, total_b = cp.cuda.runtime.memGetInfo()
    del graph, forest
    release()

    def with_memcpy() -> Any:
        g = gpu_core.Graph(src, dst, weight, n, backend="gpu")
        f = g.minimum_spanning_forest()
        device.synchronize()
        del g
        release()
        return f

    memcpy_ms, _ = repeat(with_memcpy, opts.memcpy_repeats, opts.budget_s)
    compute = summarize(forest_ms)
    call = summarize(event_ms)
    memcpy = summarize(memcpy_ms)
    return {
        # the engine's own CUDA events around its kernels (result left on the device): the
        # number comparable to the reference's
        "compute_ms": compute,
        # CUDA events around the whole graph.minimum_spanning_forest() call: kernels, sorting
        # the forest, copying it to the host, Python
        "call_ms": call,
        "wall_ms": summarize(wall_ms),
        "with_memcpy_ms": memcpy,
        "build_ms": build_ms,
        "warm_up_ms": warm_up_ms,
        "edges_per_s": _throughput(edges.num_edges, compute["median"]),
        "directed_edges_per_s": _throughput(directed, compute["median"]),
        "directed_edges_per_s_call": _throughput(directed, call["median"]),
        "directed_edges_per_s_with_memcpy": _throughput(directed, memcpy["median"]),
        "nbytes": nbytes,
        "bytes_per_edge": nbytes / max(edges.num_edges, 1),
        "resident_pool_bytes": int(resident_pool_bytes),
        "peak_pool_bytes": peak_pool_bytes,
        "device_memory_total_bytes": int(total_b),
        "device_memory_free_bytes_at_peak": int(free_b),
        "deterministic": bool(deterministic),
        **_forest_summary(first),
    }


def measure_cpu(edges: Edges, opts: EngineOptions, log: Callable[[str], None]) -> dict[str, Any]:
    import gpu_core

    src, dst, weight, n = edges
    t0 = time.perf_counter()
    graph = gpu_core.Graph(src, dst, weight, n, backend="cpu")
    build_ms = (time.perf_counter() - t0) * 1e3
    times, forest = repeat(graph.minimum_spanning_forest, opts.peer_repeats, opts.budget_s)
    compute = summarize(times)
    total_ms = build_ms + compute["median"]
    return {
        "compute_ms": compute,
        "forest_compute_ms": summarize([forest.compute_ms]),
        "build_ms": build_ms,
        "total_ms": total_ms,
        "directed_edges_per_s": _throughput(edges.directed_edges, compute["median"]),
        "directed_edges_per_s_total": _throughput(edges.directed_edges, total_ms),
        "nbytes": int(graph.nbytes),
        "bytes_per_edge": graph.nbytes / max(edges.num_edges, 1),
        **_forest_summary(forest),
    }


# --------------------------------------------------------------------------- peers


@dataclass
class PeerEdges:
    """The edge list the peers see: self-loops dropped, parallel edges merged keeping the lightest."""

    src: np.ndarray[Any, Any]
    dst: np.ndarray[Any, Any]
    weight: np.ndarray[Any, Any]
    num_vertices: int
    changed: bool
    prepare_ms: float


def peer_edges(edges: Edges) -> PeerEdges:
    """SciPy sums duplicate entries and NetworkX keeps the last of parallel edges; neither is the
    minimum spanning forest of a multigraph. Merge them first (untimed: the peers' users would
    have to do it too, but it is not their MST)."""
    src, dst, weight, n = edges
    if edges.stats.get("simple"):
        return PeerEdges(src, dst, weight, n, False, 0.0)
    t0 = time.perf_counter()
    u = np.minimum(src, dst).astype(np.int64)
    v = np.maximum(src, dst).astype(np.int64)
    keep = u != v
    u, v, w = u[keep], v[keep], weight[keep]
    order = np.lexsort((w, v, u))  # by pair, lightest first
    u, v, w = u[order], v[order], w[order]
    first = np.ones(u.shape[0], dtype=bool)
    first[1:] = (u[1:] != u[:-1]) | (v[1:] != v[:-1])
    u, v, w = u[first], v[first], w[first]
    return PeerEdges(u.astype(np.int32), v.astype(np.int32), w, n, True, (time.perf_counter() - t0) * 1e3)


def measure_scipy(
    pe: PeerEdges, directed: int, opts: EngineOptions, log: Callable[[str], None]
) -> dict[str, Any]:
    from scipy.sparse import coo_array
    from scipy.sparse.csgraph import minimum_spanning_tree

    weight = pe.weight
    shift = 0
    if weight.size and weight.min() <= 0:
        # SciPy treats zeros as absent edges: shift every weight; the forest is the same.
        shift = 1 - weight.min()
        weight = weight.astype(np.float64) + float(shift)
    n = pe.num_vertices
    csr_ms: list[float] = []
    mst_ms: list[float] = []

    def run() -> Any:
        t0 = time.perf_counter()
        csr = coo_array((weight, (pe.src, pe.dst)), shape=(n, n)).tocsr()
        t1 = time.perf_counter()
        tree = minimum_spanning_tree(csr)
        t2 = time.perf_counter()
        csr_ms.append((t1 - t0) * 1e3)
        mst_ms.append((t2 - t1) * 1e3)
        return tree

    times, tree = repeat(run, opts.peer_repeats, opts.budget_s)
    forest_edges = int(tree.nnz)
    total = float(tree.sum()) - float(shift) * forest_edges
    total_stats = summarize(times)
    return {
        "total_ms": total_stats,
        "csr_build_ms": summarize(csr_ms),
        "mst_ms": summarize(mst_ms),
        "directed_edges_per_s": _throughput(directed, total_stats["median"]),
        "weight_shift": float(shift),
        "total_weight": total,
        "num_components": n - forest_edges,
        "forest_edges": forest_edges,
    }


def measure_networkx(
    pe: PeerEdges, directed: int, opts: EngineOptions, log: Callable[[str], None]
) -> dict[str, Any]:
    import networkx as nx

    n = pe.num_vertices
    build_ms: list[float] = []
    mst_ms: list[float] = []

    def run() -> Any:
        t0 = time.perf_counter()
        g = nx.Graph()
        g.add_nodes_from(range(n))
        g.add_weighted_edges_from(zip(pe.src.tolist(), pe.dst.tolist(), pe.weight.tolist(), strict=True))
        t1 = time.perf_counter()
        tree = nx.minimum_spanning_tree(g, algorithm="kruskal")
        t2 = time.perf_counter()
        build_ms.append((t1 - t0) * 1e3)
        mst_ms.append((t2 - t1) * 1e3)
        return tree

    times, tree = repeat(run, opts.networkx_repeats, opts.budget_s)
    weights = [w for _, _, w in tree.edges(data="weight")]
    total_stats = summarize(times)
    return {
        "total_ms": total_stats,
        "build_ms": summarize(build_ms),
        "mst_ms": summarize(mst_ms),
        "directed_edges_per_s": _throughput(directed, total_stats["median"]),
        "total_weight": math.fsum(weights) if pe.weight.dtype.kind == "f" else sum(weights),
        "num_components": n - len(weights),
        "forest_edges": len(weights),
        "version": nx.__version__,
    }


def measure_igraph(
    pe: PeerEdges, directed: int, opts: EngineOptions, log: Callable[[str], None]
) -> dict[str, Any]:
    igraph = importlib.import_module("igraph")  # optional peer, untyped
    n = pe.num_vertices
    build_ms: list[float] = []
    mst_ms: list[float] = []

    def run() -> Any:
        t0 = time.perf_counter()
        g = igraph.Graph(n=n, edges=list(zip(pe.src.tolist(), pe.dst.tolist(), strict=True)))
        weights = pe.weight.tolist()
        t1 = time.perf_counter()
        ids = g.spanning_tree(weights=weights, return_tree=False)
        t2 = time.perf_counter()
        build_ms.append((t1 - t0) * 1e3)
        mst_ms.append((t2 - t1) * 1e3)
        return ids

    times, ids = repeat(run, opts.peer_repeats, opts.budget_s)
    chosen = pe.weight[np.asarray(ids, dtype=np.int64)]
    total = (
        float(chosen.sum(dtype=np.float64)) if chosen.dtype.kind == "f" else int(chosen.sum(dtype=np.int64))
    )
    total_stats = summarize(times)
    return {
        "total_ms": total_stats,
        "build_ms": summarize(build_ms),
        "mst_ms": summarize(mst_ms),
        "directed_edges_per_s": _throughput(directed, total_stats["median"]),
        "total_weight": total,
        "num_components": n - len(ids),
        "forest_edges": len(ids),
        "version": igraph.__version__,
    }


# --------------------------------------------------------------------------- checks


def totals_agree(a: float | int, b: float | int, is_float: bool) -> bool:
    """Integer totals must match exactly (SciPy sums in float64: exact below 2**53); float
    totals differ only by summation order."""
    if not is_float and abs(a) < 2**53 and abs(b) < 2**53:
        return float(a) == float(b)
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)


def _checks(record: dict[str, Any], is_float: bool) -> dict[str, Any]:
    results = record["results"]
    done = {k: v for k, v in results.items() if v.get("status") == "ok"}
    totals = {k: v["total_weight"] for k, v in done.items()}
    components = {k: v["num_components"] for k, v in done.items()}
    checks: dict[str, Any] = {"totals": totals, "components": components}
    if done:
        base_name = next(iter(done))
        base = totals[base_name]
        checks["baseline"] = base_name
        disagree = [k for k, t in totals.items() if not totals_agree(t, base, is_float)]
        checks["total_weight_agrees"] = not disagree
        checks["disagreeing"] = disagree
        checks["components_agree"] = len(set(components.values())) <= 1
    else:
        checks["total_weight_agrees"] = None
    # exact edge-id sets: the GPU and CPU backends must agree bit for bit (docs/design/exactness.md)
    digests = {k: v["edge_ids_sha256"] for k, v in done.items() if "edge_ids_sha256" in v}
    if "gpu" in digests and "cpu" in digests:
        checks["same_edges_gpu_cpu"] = digests["gpu"] == digests["cpu"]
    if "gpu" in done:
        checks["gpu_deterministic"] = bool(done["gpu"].get("deterministic", True))
    return checks


def _ratios(record: dict[str, Any]) -> dict[str, float | None]:
    r = record["results"]

    def ms(engine: str) -> float | None:
        entry = r.get(engine, {})
        if entry.get("status") != "ok":
            return None
        if engine == "gpu":
            return entry["compute_ms"]["median"]
        if engine == "cpu":
            return entry["total_ms"]
        return entry["total_ms"]["median"]

    def div(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    gpu = ms("gpu")
    gpu_call = r["gpu"]["call_ms"]["median"] if r.get("gpu", {}).get("status") == "ok" else None
    gpu_memcpy = r["gpu"]["with_memcpy_ms"]["median"] if r.get("gpu", {}).get("status") == "ok" else None
    out: dict[str, float | None] = {}
    for peer in ("cpu", "scipy", "networkx", "igraph"):
        out[f"{peer}_over_gpu"] = div(ms(peer), gpu)
        out[f"{peer}_over_gpu_with_memcpy"] = div(ms(peer), gpu_memcpy)
    out["cpu_over_scipy"] = div(ms("cpu"), ms("scipy"))
    ref = record.get("reference")
    if ref:
        out["gpu_over_reference"] = div(gpu, ref["ms"])
        out["gpu_call_over_reference"] = div(gpu_call, ref["ms"])
    if record.get("stretch_ms"):
        out["gpu_over_stretch"] = div(gpu, record["stretch_ms"])
    return out


# --------------------------------------------------------------------------- driver


def run_engine_benchmark(
    spec: GraphSpec, opts: EngineOptions, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Measure every engine and peer on one graph; always returns a record (errors inside)."""
    record: dict[str, Any] = {"name": spec.name, "type": "engine", "label": spec.label, "status": "ok"}
    log(f"[engine] {spec.name}: loading graph")
    try:
        edges, source = load_or_make(spec, opts.cache_dir)
    except Exception as exc:
        record.update(status="error", error=f"graph generation failed: {type(exc).__name__}: {exc}")
        record["traceback"] = traceback.format_exc(limit=8)
        return record
    m = edges.num_edges
    directed = edges.directed_edges
    record["graph"] = {
        "kind": spec.kind,
        "params": dict(spec.params),
        "weights": spec.weights,
        "weight_dtype": str(edges.weight.dtype),
        "seed": spec.seed,
        "num_vertices": edges.num_vertices,
        "num_edges": m,
        "directed_edges": directed,
        "stats": edges.stats,
        "obtained": source,
    }
    if spec.reference:
        ms, ref_edges = spec.reference
        record["reference"] = {
            "ms": ms,
            "directed_edges": ref_edges,
            "gpu": REFERENCE_GPU,
            "h100_allowance": H100_ALLOWANCE,
        }
    if spec.name in STRETCH_MS:
        record["stretch_ms"] = STRETCH_MS[spec.name]
    log(
        f"[engine] {spec.name}: n={edges.num_vertices:,} m={m:,} ({directed:,} directed), "
        f"{source['source']} in {source['seconds']} s"
    )

    results: dict[str, dict[str, Any]] = {}
    record["results"] = results

    def over(limit: int | None) -> bool:
        return limit is not None and m > limit

    if "gpu" in opts.engines:
        import gpu_core

        if not gpu_core.gpu_available():
            results["gpu"] = _skipped("no CUDA device visible to CuPy (or CuPy not installed)")
        else:
            results["gpu"] = _guard("gpu", lambda: measure_gpu(edges, opts, log), log)
    if "cpu" in opts.engines:
        results["cpu"] = (
            _skipped(f"more than {opts.cpu_max_edges:,} edges")
            if over(opts.cpu_max_edges)
            else _guard("cpu", lambda: measure_cpu(edges, opts, log), log)
        )
    pe = peer_edges(edges) if any(p in opts.engines for p in ("scipy", "networkx", "igraph")) else None
    if pe is not None and pe.changed:
        record["peer_edges"] = {"num_edges": int(pe.src.shape[0]), "prepare_ms": pe.prepare_ms}
    peers = (  # engine, module, why it may be missing, edge cap and why, measure
        ("scipy", "scipy", "SciPy is not installed", opts.scipy_max_edges, "", measure_scipy),
        ("networkx", "networkx", "NetworkX is not installed", opts.networkx_max_edges,
         " (NetworkX is for small graphs)", measure_networkx),
        ("igraph", "igraph", "igraph is not installed (pip install 'mst-service[bench]')",
         opts.igraph_max_edges, "", measure_igraph),
    )  # fmt: skip
    for engine, module, missing, cap, why_cap, measure in peers:
        if pe is None or engine not in opts.engines:
            continue
        if not _importable(module):
            results[engine] = _skipped(missing)
        elif over(cap):
            results[engine] = _skipped(f"more than {cap:,} edges{why_cap}")
        else:
            results[engine] = _guard(engine, functools.partial(measure, pe, directed, opts, log), log)

    finalize(record)
    for engine, entry in results.items():
        log(f"  {engine:9s} {_describe(engine, entry)}")
    return record


def finalize(record: dict[str, Any]) -> dict[str, Any]:
    """(Re)compute a record's checks, ratios and status from its per-engine results."""
    results = record["results"]
    checks = _checks(record, record["graph"]["weight_dtype"].startswith("float"))
    record["checks"] = checks
    record["ratios"] = _ratios(record)
    record["status"] = "ok"
    record.pop("error", None)
    errors = [k for k, v in results.items() if v.get("status") == "error"]
    if errors:
        record["status"] = "error"
        record["error"] = f"failed: {', '.join(errors)}"
    elif checks.get("total_weight_agrees") is False:
        record["status"] = "error"
        record["error"] = f"total weights disagree: {checks['totals']}"
    elif checks.get("components_agree") is False:
        record["status"] = "error"
        record["error"] = f"component counts disagree: {checks['components']}"
    elif checks.get("same_edges_gpu_cpu") is False:
        record["status"] = "error"
        record["error"] = "the GPU and CPU backends chose different edge ids"
    elif checks.get("gpu_deterministic") is False:
        record["status"] = "error"
        record["error"] = "the GPU backend returned different forests on repeated runs"
    return record


def _same_graph(a: dict[str, Any], b: dict[str, Any]) -> bool:
    keys = ("kind", "params", "weights", "seed", "num_vertices", "num_edges", "weight_dtype")
    return all(a.get(k) == b.get(k) for k in keys)


def merge_records(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """Keep the engines an earlier run measured on the same graph that this run did not run
    (e.g. ``--engines gpu`` after a full run keeps the peers), marked ``carried_from``."""
    if (
        not old
        or old.get("type") != "engine"
        or new.get("type") != "engine"
        or "results" not in old
        or "results" not in new
        or not _same_graph(old.get("graph", {}), new.get("graph", {}))
    ):
        return new
    carried = []
    for engine, entry in old["results"].items():
        if engine not in new["results"]:
            new["results"][engine] = {
                **entry,
                "carried_from": entry.get("carried_from") or old.get("measured_at"),
            }
            carried.append(engine)
    if carried:
        new["carried"] = carried
        finalize(new)
    return new


def _describe(engine: str, entry: dict[str, Any]) -> str:
    status = entry.get("status")
    if status != "ok":
        return f"{status}: {entry.get('reason') or entry.get('error')}"
    if engine == "gpu":
        c = entry["compute_ms"]
        return (
            f"compute {c['median']:.3f} ms median ({c['min']:.3f}-{c['max']:.3f}, n={c['n']}), "
            f"call {entry['call_ms']['median']:.3f} ms, "
            f"with memcpy {entry['with_memcpy_ms']['median']:.1f} ms, {entry['bytes_per_edge']:.1f} B/edge, "
            f"total {entry['total_weight']}"
        )
    if engine == "cpu":
        return (
            f"{entry['total_ms']:.1f} ms (build {entry['build_ms']:.1f} + compute "
            f"{entry['compute_ms']['median']:.1f}), total {entry['total_weight']}"
        )
    return f"{entry['total_ms']['median']:.1f} ms, total {entry['total_weight']}"
