"""``python -m bench --suite quick|full``: run the benchmarks, write JSON, Markdown and a plot.

Results are written after every benchmark, so an interrupted run keeps what it
measured; a later run into the same ``--out`` merges (re-measured benchmarks
replace their old records) unless ``--fresh``. In the full suite every
benchmark runs in its own subprocess (``--isolate``), so a crash, a poisoned
CUDA context or an out-of-memory kill costs only that benchmark.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .engine import ENGINES, EngineOptions, merge_records, run_engine_benchmark
from .generators import DEFAULT_CACHE
from .jobs import JobsSpec, run_jobs_benchmark
from .load import LoadSpec, run_load_benchmark
from .points import PointsSpec, run_points_benchmark
from .report import environment, load_results, write_results
from .service import ServiceOptions, ServiceSpec, run_service_benchmark
from .suites import SUITES, Item, benchmark_names, select

HERE = Path(__file__).resolve().parent

#: per-suite defaults; every one can be overridden on the command line
DEFAULTS: dict[str, dict[str, Any]] = {
    "quick": {
        "repeats": 5,
        "warmup": 1,
        "memcpy_repeats": 3,
        "peer_repeats": 3,
        "budget": 10.0,
        "isolate": False,
        "service_backend": "cpu",
        "timeout": 600.0,
    },
    "full": {
        "repeats": 11,
        "warmup": 3,
        "memcpy_repeats": 5,
        "peer_repeats": 3,
        "budget": 60.0,
        "isolate": True,
        "service_backend": "auto",
        "timeout": 1800.0,
    },
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmarks of the MST engine (gpu_core) and service against SciPy, NetworkX and igraph.",
    )
    p.add_argument(
        "--suite", choices=sorted(SUITES), default="quick", help="quick: CPU, small graphs; full: GPU host"
    )
    p.add_argument("--out", type=Path, help="output folder (default bench/results/SUITE)")
    p.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help="benchmark names or globs, e.g. rmat-16 'grid-*' 'service-*'",
    )
    p.add_argument("--list", action="store_true", help="list the suite's benchmark names and exit")
    p.add_argument("--repeats", type=int, help="timed GPU runs per graph (median and spread reported)")
    p.add_argument("--warmup", type=int, help="untimed GPU runs on the resident graph first")
    p.add_argument("--memcpy-repeats", type=int, help="runs of Graph construction + compute ('with memcpy')")
    p.add_argument("--peer-repeats", type=int, help="runs of the CPU backend and of each peer")
    p.add_argument("--budget", type=float, help="seconds after which a repeated measurement stops early")
    p.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help=f"comma-separated subset of {','.join(ENGINES)} (default all)",
    )
    p.add_argument("--networkx-max-edges", type=int, default=600_000)
    p.add_argument("--igraph-max-edges", type=int, default=10_000_000)
    p.add_argument(
        "--cpu-max-edges", type=int, default=None, help="skip the CPU backend above this many edges"
    )
    p.add_argument(
        "--service-backend", choices=("auto", "gpu", "cpu"), help="MST_BACKEND of the benchmarked server"
    )
    p.add_argument("--requests", type=int, help="MST requests per service benchmark (latency percentiles)")
    p.add_argument("--uploads", type=int, help="uploads / downloads / one-shot calls per service benchmark")
    p.add_argument("--load-clients", help="load benchmark: comma-separated client counts (e.g. 1,8,64,256)")
    p.add_argument("--load-duration", type=float, help="load benchmark: seconds per client count")
    p.add_argument(
        "--load-switch-interval",
        type=float,
        help="load benchmark: the client processes' GIL switch interval in seconds (default 0.005)",
    )
    p.add_argument(
        "--jobs-parts",
        choices=("all", "jobs", "one-request", "coalesced", "oneshot"),
        help="jobs benchmark: run only its distinct-graph levels (jobs), the same with a job and its "
        "result in one request (one-request), its one-graph levels (coalesced) or its one-shot level "
        "(default all)",
    )
    p.add_argument("--jobs-rmat-scale", type=int, help="jobs benchmark: RMAT scale of its resident graphs")
    p.add_argument("--jobs-graphs", type=int, help="jobs benchmark: distinct resident graphs")
    p.add_argument("--oneshot-clients", type=int, help="jobs benchmark: clients of the one-shot level")
    p.add_argument("--oneshot-edges", type=int, help="jobs benchmark: edges of each one-shot graph")
    p.add_argument("--client-processes", type=int, help="load and jobs benchmarks: most client processes")
    p.add_argument(
        "--cache", type=Path, default=DEFAULT_CACHE, help="graph cache folder (default bench/cache)"
    )
    p.add_argument("--no-cache", action="store_true", help="generate graphs in memory only")
    iso = p.add_mutually_exclusive_group()
    iso.add_argument(
        "--isolate", dest="isolate", action="store_true", default=None, help="one subprocess per benchmark"
    )
    iso.add_argument(
        "--no-isolate", dest="isolate", action="store_false", help="run everything in this process"
    )
    p.add_argument("--timeout", type=float, help="seconds one isolated benchmark may take")
    p.add_argument("--fresh", action="store_true", help="start a new results.json instead of merging into it")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument("--child-record", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for key, value in DEFAULTS[args.suite].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    unknown = set(args.engines.split(",")) - set(ENGINES)
    if unknown:
        p.error(f"--engines: unknown {', '.join(sorted(unknown))}; choose from {', '.join(ENGINES)}")
    if args.out is None:
        args.out = HERE / "results" / args.suite
    return args


def log(message: str) -> None:
    print(message, flush=True)


def engine_options(args: argparse.Namespace) -> EngineOptions:
    return EngineOptions(
        repeats=args.repeats,
        warmup=args.warmup,
        memcpy_repeats=args.memcpy_repeats,
        peer_repeats=args.peer_repeats,
        budget_s=args.budget,
        engines=tuple(args.engines.split(",")),
        networkx_max_edges=args.networkx_max_edges,
        igraph_max_edges=args.igraph_max_edges,
        cpu_max_edges=args.cpu_max_edges,
        cache_dir=None if args.no_cache else args.cache,
    )


def service_options(args: argparse.Namespace) -> ServiceOptions:
    return ServiceOptions(
        backend=args.service_backend,
        requests=args.requests,
        uploads=args.uploads,
        log_dir=args.out / "logs",
        cache_dir=None if args.no_cache else args.cache,
    )


def load_spec(item: LoadSpec | JobsSpec, args: argparse.Namespace) -> Any:
    clients = item.clients if not args.load_clients else tuple(int(c) for c in args.load_clients.split(","))
    duration = item.duration_s if args.load_duration is None else args.load_duration
    spec = dataclasses.replace(item, clients=clients, duration_s=duration)
    if isinstance(spec, LoadSpec) and args.load_switch_interval is not None:
        spec = dataclasses.replace(spec, switch_interval_s=args.load_switch_interval)
    if args.client_processes is not None:
        spec = dataclasses.replace(spec, processes=args.client_processes)
    if isinstance(spec, JobsSpec):
        if args.jobs_parts not in (None, "all"):
            spec = dataclasses.replace(spec, parts=(args.jobs_parts,))
        if args.jobs_rmat_scale is not None:
            spec = dataclasses.replace(spec, rmat_scale=args.jobs_rmat_scale)
        if args.jobs_graphs is not None:
            spec = dataclasses.replace(spec, graphs=args.jobs_graphs)
        if args.oneshot_clients is not None:
            spec = dataclasses.replace(spec, oneshot_clients=args.oneshot_clients)
        if args.oneshot_edges is not None:
            spec = dataclasses.replace(spec, oneshot_edges=args.oneshot_edges)
    return spec


def _kind(item: Item) -> str:
    if isinstance(item, PointsSpec):
        return "points"
    if isinstance(item, JobsSpec):
        return "jobs"
    return "load" if isinstance(item, LoadSpec) else "service" if isinstance(item, ServiceSpec) else "engine"


def run_one(item: Item, args: argparse.Namespace) -> dict[str, Any]:
    if isinstance(item, PointsSpec):
        return run_points_benchmark(item, "auto", log)
    if isinstance(item, JobsSpec):
        return run_jobs_benchmark(load_spec(item, args), args.service_backend, args.out / "logs", log)
    if isinstance(item, LoadSpec):
        return run_load_benchmark(load_spec(item, args), args.service_backend, args.out / "logs", log)
    if isinstance(item, ServiceSpec):
        return run_service_benchmark(item, service_options(args), log)
    return run_engine_benchmark(item, engine_options(args), log)


def _child_argv(args: argparse.Namespace, name: str, record: Path) -> list[str]:
    argv = [sys.executable, "-m", "bench", "--suite", args.suite, "--only", name, "--no-isolate"]
    argv += ["--out", str(args.out), "--child-record", str(record), "--engines", args.engines]
    for flag, value in (
        ("--repeats", args.repeats),
        ("--warmup", args.warmup),
        ("--memcpy-repeats", args.memcpy_repeats),
        ("--peer-repeats", args.peer_repeats),
        ("--budget", args.budget),
        ("--networkx-max-edges", args.networkx_max_edges),
        ("--igraph-max-edges", args.igraph_max_edges),
        ("--cpu-max-edges", args.cpu_max_edges),
        ("--service-backend", args.service_backend),
        ("--requests", args.requests),
        ("--uploads", args.uploads),
        ("--load-clients", args.load_clients),
        ("--load-duration", args.load_duration),
        ("--load-switch-interval", args.load_switch_interval),
        ("--jobs-parts", args.jobs_parts),
        ("--jobs-rmat-scale", args.jobs_rmat_scale),
        ("--jobs-graphs", args.jobs_graphs),
        ("--oneshot-clients", args.oneshot_clients),
        ("--oneshot-edges", args.oneshot_edges),
        ("--client-processes", args.client_processes),
        ("--cache", args.cache),
    ):
        if value is not None:
            argv += [flag, str(value)]
    if args.no_cache:
        argv.append("--no-cache")
    return argv


def run_isolated(item: Item, args: argparse.Namespace) -> dict[str, Any]:
    """Run one benchmark in a subprocess; a crash or a timeout becomes an error record."""
    with tempfile.TemporaryDirectory(prefix="mst-bench-") as tmp:
        record_path = Path(tmp) / "record.json"
        proc = subprocess.Popen(_child_argv(args, item.name, record_path), cwd=HERE.parent)
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)  # the child cleans up (stops its server) on SIGTERM
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            return {
                "name": item.name,
                "status": "error",
                "error": f"timed out after {args.timeout:.0f} s (--timeout)",
            }
        if record_path.exists():
            record: dict[str, Any] = json.loads(record_path.read_text())
            return record
        return {
            "name": item.name,
            "type": _kind(item),
            "status": "error",
            "error": f"the benchmark process died with exit code {rc} (signal {-rc})"
            if rc < 0
            else f"the benchmark process exited with code {rc} without a record; see its output above",
        }


def _child(args: argparse.Namespace) -> int:
    from .report import _atomic_write, _jsonable

    # SIGTERM becomes SystemExit so that `finally` blocks run (the server subprocess is stopped).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    (item,) = select(args.suite, args.only)
    record = run_one(item, args)
    _atomic_write(args.child_record, json.dumps(_jsonable(record)))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        print("\n".join(benchmark_names(args.suite)))
        return 0
    try:
        items = select(args.suite, args.only)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.child_record:
        return _child(args)

    start = time.perf_counter()
    results = load_results(args.out, args.suite, fresh=args.fresh)
    env = environment(include_gpu=True)
    results["environment"] = env
    invocation = {
        "date": env["date"],
        "commit": env["git"]["commit"],
        "argv": sys.argv[1:] if argv is None else argv,
        "benchmarks": [i.name for i in items],
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    results["invocations"].append(invocation)
    order = benchmark_names(args.suite)
    gpu = env["gpu"]
    log(
        f"bench: {args.suite} suite, {len(items)} benchmark(s), out {args.out}; GPU: "
        + (f"{gpu.get('name')}" if gpu.get("available") else f"none ({gpu.get('reason')})")
    )
    errors = 0
    for item in items:
        t0 = time.perf_counter()
        try:
            record = run_isolated(item, args) if args.isolate else run_one(item, args)
        except KeyboardInterrupt:
            log("interrupted; results so far are written")
            break
        except Exception as exc:  # a bug in the harness itself: keep going with the others
            record = {"name": item.name, "status": "error", "error": f"{type(exc).__name__}: {exc}"}
        record.setdefault("type", _kind(item))
        record["seconds"] = round(time.perf_counter() - t0, 2)
        record["measured_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        record["commit"] = env["git"]["commit"]
        results["benchmarks"][item.name] = merge_records(results["benchmarks"].get(item.name), record)
        errors += record.get("status") == "error"
        log(f"[{item.name}] {record.get('status')} in {record['seconds']} s")
        write_results(args.out, results, order, plot=False)
    paths = write_results(args.out, results, order, plot=not args.no_plot)
    print()
    print(paths["markdown"].read_text())
    log(f"bench: done in {time.perf_counter() - start:.1f} s; " + ", ".join(str(p) for p in paths.values()))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
