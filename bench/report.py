"""What a run writes: the environment, ``results.json``, ``results.md`` and ``throughput.png``.

Past 500 lines on purpose: one writer per benchmark's section of ``results.md``, all reading the
same ``results.json``; apart, a benchmark's table would live away from the others it sits beside.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import json
import math
import os
import platform
import socket
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from .suites import H100_ALLOWANCE
from .timing import fmt_ms

SCHEMA_VERSION = 1
REPO_ROOT = Path(__file__).resolve().parent.parent
#: an empty cell of a table
DASH = "\u2013"
ENGINE_LABELS = {
    "gpu": "gpu_core GPU",
    "gpu_memcpy": "gpu_core GPU with memcpy",
    "cpu": "gpu_core CPU",
    "scipy": "SciPy",
    "networkx": "NetworkX",
    "igraph": "igraph",
}


# --------------------------------------------------------------------------- environment


def _run(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _version(module: str) -> str | None:
    try:
        mod = __import__(module)
    except Exception:
        return None
    return str(getattr(mod, "__version__", "?"))


def _cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


def _memory_bytes() -> int | None:
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return None


def gpu_environment() -> dict[str, Any]:
    """GPU name, driver and CUDA versions, CuPy version; ``{"available": False, ...}`` without one."""
    info: dict[str, Any] = {"available": False}
    smi = _run(
        [
            "nvidia-smi",
            "--query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit",
            "--format=csv,noheader",
        ]
    )
    if smi:
        info["nvidia_smi"] = smi.splitlines()
    try:
        import cupy
    except ImportError:
        info["reason"] = "CuPy is not installed"
        return info
    info["cupy"] = cupy.__version__
    try:
        count = cupy.cuda.runtime.getDeviceCount()
        if count < 1:
            info["reason"] = "no CUDA device"
            return info
        props = cupy.cuda.runtime.getDeviceProperties(0)
        name = props["name"]
        info.update(
            available=True,
            device_count=int(count),
            name=name.decode() if isinstance(name, bytes) else str(name),
            compute_capability=f"{props['major']}.{props['minor']}",
            memory_bytes=int(props["totalGlobalMem"]),
            multiprocessors=int(props["multiProcessorCount"]),
            driver_version=_cuda_version(cupy.cuda.runtime.driverGetVersion()),
            runtime_version=_cuda_version(cupy.cuda.runtime.runtimeGetVersion()),
        )
        if smi:
            info["driver"] = smi.splitlines()[0].split(",")[1].strip()
    except Exception as exc:  # CUDA errors have their own types
        info["reason"] = f"{type(exc).__name__}: {exc}"
    return info


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def environment(include_gpu: bool = True) -> dict[str, Any]:
    commit = _run(["git", "rev-parse", "HEAD"])
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
        "git": {"commit": commit, "dirty": bool(dirty) if dirty is not None else None},
        "versions": {m: _version(m) for m in ("numpy", "scipy", "networkx", "igraph", "gpu_core", "httpx")},
        "gpu": gpu_environment() if include_gpu else {"available": False, "reason": "not probed"},
    }


# --------------------------------------------------------------------------- results.json


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items() if not str(k).startswith("_")}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**53:
        return str(value)  # exact big totals survive JSON readers that use doubles
    return value


def load_results(out: Path, suite: str, fresh: bool = False) -> dict[str, Any]:
    """The ``results.json`` of an earlier run of this suite in ``out`` (to merge into), or a new one."""
    path = out / "results.json"
    if path.exists() and not fresh:
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(path.read_text())
            if data.get("suite") == suite and data.get("schema_version") == SCHEMA_VERSION:
                return data
    return {
        "schema_version": SCHEMA_VERSION,
        "suite": suite,
        "environment": None,
        "invocations": [],
        "benchmarks": {},
    }


def _atomic_write(path: Path, text: str | bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if isinstance(text, bytes):
        tmp.write_bytes(text)
    else:
        tmp.write_text(text)
    os.replace(tmp, path)


def write_results(
    out: Path, results: dict[str, Any], order: Iterable[str] = (), plot: bool = True
) -> dict[str, Path]:
    """Write ``results.json``, ``results.md`` and (with matplotlib) ``throughput.png``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    order = list(order)
    bench = results["benchmarks"]
    ranked = sorted(bench, key=lambda k: (order.index(k) if k in order else len(order), k))
    results["benchmarks"] = {k: bench[k] for k in ranked}
    paths = {"json": out / "results.json", "markdown": out / "results.md"}
    _atomic_write(paths["json"], json.dumps(_jsonable(results), indent=1) + "\n")
    _atomic_write(paths["markdown"], markdown(results))
    if plot:
        png = plot_throughput(results, out / "throughput.png")
        if png:
            paths["plot"] = png
    return paths


# --------------------------------------------------------------------------- Markdown


def _ok(entry: dict[str, Any] | None) -> bool:
    return bool(entry) and entry.get("status") == "ok"  # type: ignore[union-attr]


def _engine_ms(results: dict[str, Any], engine: str) -> float | None:
    """Headline time of an engine: GPU compute median, CPU build + compute, peers' total median."""
    e = results.get("gpu" if engine == "gpu_memcpy" else engine)
    if e is None or e.get("status") != "ok":
        return None
    if engine == "gpu_memcpy":
        return float(e["with_memcpy_ms"]["median"])
    if engine == "gpu":
        return float(e["compute_ms"]["median"])
    if engine == "cpu":
        return float(e["total_ms"])
    return float(e["total_ms"]["median"])


def _ratio(x: float | None) -> str:
    if x is None:
        return DASH
    return f"{x:.2f}x" if x < 10 else f"{x:,.0f}x"


def _count(n: int | None) -> str:
    return DASH if n is None else f"{n:,}"


def _cell_status(entry: dict[str, Any] | None) -> str:
    if not entry:
        return DASH
    return "error" if entry.get("status") == "error" else DASH


def target_allowance(gpu_name: str | None) -> float:
    """Issue 2's target over the H200 reference: 1x on an H200 (or anything else), 1.3x on an H100."""
    return H100_ALLOWANCE if gpu_name and "H100" in gpu_name else 1.0


def _versus_reference(ratio: float | None, allowance: float) -> str:
    if ratio is None:
        return DASH
    return f"{_ratio(ratio)} ({'met' if ratio <= allowance else 'SLOWER'})"


def _engine_rows(records: list[dict[str, Any]], allowance: float = 1.0) -> tuple[list[str], list[list[str]]]:
    header = [
        "graph",
        "vertices",
        "directed edges",
        "weights",
        "GPU compute ms (min\u2013max, n)",
        "GPU call ms",
        "ref H200 ms",
        "compute / ref",
        "stretch ms",
        "GPU w/ memcpy ms",
        "GPU B/edge",
        "GPU Gedges/s",
        "CPU backend ms",
        "SciPy ms",
        "NetworkX ms",
        "igraph ms",
        "SciPy / GPU",
        "CPU / SciPy",
        "totals agree",
    ]
    rows = []
    for rec in records:
        g = rec.get("graph", {})
        res = rec.get("results", {})
        gpu = res.get("gpu")
        ratios = rec.get("ratios", {})
        ref = rec.get("reference")
        if _ok(gpu):
            c = gpu["compute_ms"]
            gpu_cell = f"{fmt_ms(c['median'])} ({fmt_ms(c['min'])}{DASH}{fmt_ms(c['max'])}, {c['n']})"
            call = fmt_ms(gpu["call_ms"]["median"])
            bpe = f"{gpu['bytes_per_edge']:.1f}"
            gteps = f"{gpu['directed_edges_per_s'] / 1e9:.2f}"
        else:
            gpu_cell = call = bpe = gteps = _cell_status(gpu)
        agree = rec.get("checks", {}).get("total_weight_agrees")
        rows.append(
            [
                rec["name"],
                _count(g.get("num_vertices")),
                _count(g.get("directed_edges")),
                str(g.get("weight_dtype", DASH)) + (" ties" if g.get("weights") == "ties" else ""),
                gpu_cell,
                call,
                fmt_ms(ref["ms"]) if ref else DASH,
                _versus_reference(ratios.get("gpu_over_reference"), allowance),
                fmt_ms(rec["stretch_ms"]) if rec.get("stretch_ms") else DASH,
                fmt_ms(_engine_ms(res, "gpu_memcpy")) if _ok(gpu) else _cell_status(gpu),
                bpe,
                gteps,
                *[
                    fmt_ms(_engine_ms(res, e)) if _ok(res.get(e)) else _cell_status(res.get(e))
                    for e in ("cpu", "scipy", "networkx", "igraph")
                ],
                _ratio(ratios.get("scipy_over_gpu")),
                _ratio(ratios.get("cpu_over_scipy")),
                {True: "yes", False: "**NO**", None: DASH}[agree],
            ]
        )
    # Drop the columns no row has a value in (e.g. every GPU column on a CPU-only run).
    keep = [i for i in range(len(header)) if i < 4 or any(r[i] != DASH for r in rows)]
    return [header[i] for i in keep], [[r[i] for i in keep] for r in rows]


def _service_rows(records: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = [
        "benchmark",
        "backend",
        "edges",
        "upload JSON MB/s",
        "upload npz MB/s",
        "compute p50 ms",
        "e2e p50 / p99 ms (http.client)",
        "overhead p50 / p99 ms (http.client)",
        "e2e p50 / p99 ms (httpx)",
        "overhead p50 / p99 ms (httpx)",
        "e2e p50 / p99 ms (Client.forest, one request)",
        "result JSON MB/s",
        "result npz MB/s (http.client)",
        "result npz MB/s (httpx)",
        "one-shot npz ms",
        "one-shot JSON ms",
    ]
    rows = []

    def mbs(entry: dict[str, Any] | None) -> str:
        return f"{entry['mb_per_s']:.1f}" if entry and entry.get("mb_per_s") is not None else DASH

    for rec in records:
        res = rec.get("results", {})
        if rec.get("status") == "skipped" or not res:
            rows.append([rec["name"], rec.get("status", "?"), *[DASH] * (len(header) - 2)])
            continue
        lat = res.get("latency", {})
        lean = res.get("latency_stdlib", {})
        dl = res.get("download", {})
        one = res.get("one_shot", {})
        rows.append(
            [
                rec["name"],
                str(lat.get("backend") or rec.get("backend_requested")),
                _count(rec.get("graph", {}).get("num_edges")),
                mbs(res.get("upload_json")),
                mbs(res.get("upload_npz")),
                fmt_ms(lat["compute_ms"]["p50"]) if _ok(lat) else DASH,
                _p50_p99(lean, "e2e_ms"),
                _p50_p99(lean, "overhead_ms"),
                _p50_p99(lat, "e2e_ms"),
                _p50_p99(lat, "overhead_ms"),
                _p50_p99(res.get("latency_forest", {}), "e2e_ms"),
                mbs(dl.get("json")) if _ok(dl) else DASH,
                mbs(dl.get("binary_stdlib")) if _ok(dl) else DASH,
                mbs(dl.get("binary")) if _ok(dl) else DASH,
                fmt_ms(one["npz"]["ms"]["median"]) if _ok(one) and "npz" in one else DASH,
                fmt_ms(one["json"]["ms"]["median"]) if _ok(one) and "json" in one else DASH,
            ]
        )
    return header, rows


def _p50_p99(latency: dict[str, Any], key: str) -> str:
    if not _ok(latency):
        return DASH
    return f"{fmt_ms(latency[key]['p50'])} / {fmt_ms(latency[key]['p99'])}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    right = {i for i in range(1, len(header)) if any(c[:1].isdigit() for r in rows for c in r[i : i + 1])}
    lines = ["| " + " | ".join(header) + " |"]
    lines.append("| " + " | ".join("---:" if i in right else "---" for i in range(len(header))) + " |")
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    env = results.get("environment") or {}
    gpu = env.get("gpu", {})
    gpu_line = (
        f"{gpu.get('name')} (driver {gpu.get('driver') or gpu.get('driver_version')}, "
        f"CUDA runtime {gpu.get('runtime_version')}, CuPy {gpu.get('cupy')})"
        if gpu.get("available")
        else f"none ({gpu.get('reason', 'not available')})"
    )
    commit = (env.get("git") or {}).get("commit") or "unknown"
    commits = sorted({r.get("commit") for r in results["benchmarks"].values() if r.get("commit")})
    lines = [
        f"# MST benchmarks: {results['suite']} suite",
        "",
        f"- date: {env.get('date')}",
        f"- GPU: {gpu_line}",
        f"- CPU: {env.get('cpu')} x {env.get('cpu_count')}, host {env.get('host')}",
        f"- commit: {commit[:12]}" + (" (dirty tree)" if (env.get("git") or {}).get("dirty") else ""),
    ]
    if len(commits) > 1:
        lines.append(f"- benchmarks measured at several commits: {', '.join(c[:12] for c in commits)}")
    engine = [r for r in results["benchmarks"].values() if r.get("type") == "engine"]
    service = [r for r in results["benchmarks"].values() if r.get("type") == "service"]
    if engine:
        lines += [
            "",
            "## Engine",
            "",
            "GPU compute: the forest's `compute_ms` (the engine's CUDA events around its kernels) on a "
            "resident graph after warm-up; GPU call: CUDA events around the whole "
            "`Graph.minimum_spanning_forest()` call (result copied to the host); "
            "w/ memcpy: Graph construction from host arrays + compute. CPU backend: build + compute. "
            "Peers: graph/CSR construction + MST. Gedges/s counts directed (CSR) edges, as the paper does. "
            "Reference: ECL-MST v1.0 on an H200 (issue 2); compute / ref says whether the target is met "
            "(<= 1x on an H200, <= 1.3x on an H100).",
            "",
            _table(
                *_engine_rows(engine, target_allowance(gpu.get("name") if gpu.get("available") else None))
            ),
        ]
    if service:
        lines += [
            "",
            "## Service",
            "",
            "e2e: `POST /v1/graphs/{id}/mst?wait=` + binary result fetch on a resident graph, one "
            "keep-alive connection of the standard library's http.client, or of httpx; "
            "overhead: e2e - the job's compute_ms.",
            "",
            _table(*_service_rows(service)),
        ]
    for record in (r for r in results["benchmarks"].values() if r.get("type") == "load"):
        from .load import table as load_table

        checks = record.get("checks", {})
        lines += [
            "",
            f"## Load ({record.get('backend')} worker)",
            "",
            "Concurrent clients (one keep-alive http.client connection each) mixing status polls, small "
            "jobs, large result downloads and small uploads (then deleted) for a fixed time, while one "
            "more client keeps the worker busy with jobs on a large graph (`big_job`). "
            f"Checks: no errors {checks.get('no_errors')}, no 5xx {checks.get('no_5xx')}, status p99 "
            f"{checks.get('status_p99_ms_max')} ms (target <= 10), API RSS growth "
            f"{checks.get('rss_growth_mb')} MB.",
            "",
            load_table(record),
        ]
    for record in (r for r in results["benchmarks"].values() if r.get("type") == "points"):
        from .points import table as points_table

        lines += [
            "",
            "## Point sets (EMST and HDBSCAN*)",
            "",
            "EMST: `gpu_core.euclidean_mst` with the points on the device and the tree left there "
            "(the CPU backend: host to host); from/to host: NumPy points in, NumPy tree out. "
            "HDBSCAN*: `gpu_core.hdbscan` from host points to host labels. Medians after a warm-up; "
            "MFeatures/s = n*d / seconds. Peers: one run each on the same points and parameters, "
            "labels compared (adjusted Rand index, same noise points).",
            "",
            points_table(record),
        ]
    for record in (r for r in results["benchmarks"].values() if r.get("type") == "jobs"):
        from .jobs import table as jobs_table

        checks = record.get("checks", {})
        spec = record.get("spec", {})
        lines += [
            "",
            f"## Many small jobs ({record.get('backend')} worker)",
            "",
            f"jobs (the headline): each client loops `POST /v1/graphs/{{id}}/mst?wait=30` on its own "
            f"resident graph ({spec.get('graphs')} graphs of {spec.get('graph')}, one seed each) + the "
            "binary result, so no job can be answered by another's computation; coalesced: every client "
            "on one graph, where identical jobs waiting back to back are answered by one computation "
            "(a shortcut for a hot graph, labelled); one-shot: `POST /v1/mst` of graphs of "
            f"{spec.get('oneshot_edges')} edges. Clients in {spec.get('client_processes')} processes, one "
            "keep-alive http.client connection each; every forest checked against the CPU backend's. "
            f"Server settings: {record.get('settings') or 'defaults'}. Targets (64 clients, H200): "
            f">= 1500 jobs/s with p99 <= 50 ms on 64 distinct graphs (met: {checks.get('jobs_target_met')}), "
            "one-shot >= 2000 "
            f"req/s (met: {checks.get('oneshot_target_met')}); all forests equal: "
            f"{checks.get('all_checked_equal')}.",
            "",
            jobs_table(record),
        ]
    problems = [r for r in results["benchmarks"].values() if r.get("status") != "ok"]
    skipped: dict[tuple[str, str], list[str]] = {}
    for r in engine:
        for eng, e in r.get("results", {}).items():
            if e.get("status") == "skipped":
                skipped.setdefault((eng, str(e.get("reason"))), []).append(r["name"])
    notes = [
        f"- {eng} skipped ({reason}): " + ("every graph" if len(names) == len(engine) else ", ".join(names))
        for (eng, reason), names in skipped.items()
    ]
    if problems or notes:
        lines += ["", "## Errors and skips", ""]
        lines += [
            f"- **{r['name']}**: {r.get('status')}: {r.get('error') or r.get('reason')}" for r in problems
        ]
        lines += notes
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- plot


def plot_throughput(results: dict[str, Any], path: Path) -> Path | None:
    """Grouped bars: directed edges/s per graph and engine (log scale). None without matplotlib."""
    try:
        matplotlib = importlib.import_module("matplotlib")  # optional (the bench extra)
        matplotlib.use("Agg")
        plt = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        return None
    records = [r for r in results["benchmarks"].values() if r.get("type") == "engine" and r.get("graph")]
    engines = ["gpu", "gpu_memcpy", "cpu", "scipy", "igraph", "networkx"]
    series: dict[str, list[float]] = {e: [] for e in engines}
    names = []
    for rec in records:
        names.append(rec["name"])
        directed = rec["graph"]["directed_edges"]
        for e in engines:
            ms = _engine_ms(rec.get("results", {}), e)
            series[e].append(directed / (ms / 1e3) if ms else 0.0)
    engines = [e for e in engines if any(series[e])]
    if not names or not engines:
        return None
    fig_h = max(3.0, 0.32 * len(names) * len(engines) / 2 + 1.5)
    fig, ax = plt.subplots(figsize=(9, fig_h))
    height = 0.8 / len(engines)
    for j, e in enumerate(engines):
        ys = [i + (j - (len(engines) - 1) / 2) * height for i in range(len(names))]
        ax.barh(ys, series[e], height=height, label=ENGINE_LABELS[e])
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("throughput, directed edges per second (higher is better)")
    env = results.get("environment") or {}
    gpu = env.get("gpu", {})
    title = f"MST throughput, {results['suite']} suite"
    if gpu.get("available"):
        title += f" ({gpu.get('name')})"
    ax.set_title(title)
    ax.grid(axis="x", which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
    return path
