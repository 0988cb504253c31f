"""Scaling benchmark: jobs per second against the number of API processes and workers per GPU (issue 44).

For each shape ``APIxPER`` (``MST_API_WORKERS=API``, ``MST_WORKERS_PER_GPU=PER``; on the CPU
backend ``PER`` is ``MST_CPU_WORKERS``) a fresh ``python -m service`` is started, the graphs are
uploaded (RMAT 2^scale, one seed each, placed by the service over its workers), and the jobs
suite's distinct-graph headline runs ``--runs`` times: ``--clients`` keep-alive clients in several
processes, client ``c`` looping ``POST /v1/graphs/{id}/mst?wait=30`` then the binary result on
its **own** graph, every forest checked against the CPU backend's (:func:`bench.jobs.run_level`).
Reported per run: jobs/s, p50/p99, errors, wrong forests, the server's CPU milliseconds per job by
process role, and the answers' ``Server-Timing`` means, and on the GPU backend each GPU's kernel
activity during the run (``gpu_activity``: ``nvidia-smi dmon``); per shape the median run. Once per
record, the disk's write bandwidth where the services' data dirs live (``disk_write``,
``--disk-probe-mb``): :mod:`bench.host_probes`.

``--predict``: also, per shape, ``--predict-clients`` clients looping ``predict`` of
``--predict-points`` new 2-D points (npz in, npz out) against one model fitted on
``--predict-n`` points.

``--server-cpus 0-15 --gpus 0`` makes a one-GPU, 16-core service on a larger host: the service
and its children run on those CPUs only, the clients on the others (as clients on other hosts
would; without ``--server-cpus`` both share every CPU).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from .clients import run_client_processes
from .host_probes import GpuActivity, disk_write
from .jobs import _rmat_graph, run_level, server_cpu_s
from .load import Conn
from .server import started_server
from .timing import percentile


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """``"1x1,4x2"`` -> [(1, 1), (4, 2)]: (API processes, workers per GPU or CPU workers)."""
    shapes = []
    for part in text.split(","):
        api, _, per = part.strip().partition("x")
        shapes.append((int(api), int(per or 1)))
    return shapes


def parse_cpus(text: str) -> set[int]:
    """``"0-3,8"`` -> {0, 1, 2, 3, 8} (a taskset-style CPU list)."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _settings(
    backend: str, api: int, per: int, gpus: str | None, mps: str | None = None, result_dir: str | None = None
) -> dict[str, str]:
    env = {
        "MST_API_WORKERS": str(api),
        "MST_LOG_LEVEL": "warning",
        "MST_MAX_QUEUED_JOBS": "100000",
        "MST_MAX_UPLOAD_BYTES": str(1 << 34),
        "MST_STANDBY_WORKER": "off",
        "MST_WARM_UP": os.environ.get("MST_WARM_UP", "none"),
    }
    if backend == "cpu":
        env["MST_CPU_WORKERS"] = str(per)
    else:
        env["MST_WORKERS_PER_GPU"] = str(per)
        if gpus:
            env["MST_GPUS"] = gpus
        if mps:
            env["MST_MPS"] = mps
    if result_dir:
        env["MST_RESULT_DIR"] = result_dir
    return env


def _upload(port: int, graphs: list[tuple[bytes, Any, int]]) -> list[tuple[str, Any]]:
    conn = Conn(port, timeout=600)
    try:
        resident = []
        for body, expected, _ in graphs:
            graph_id = conn.json("POST", "/v1/graphs", body, (201,))["id"]
            conn.json("POST", f"/v1/graphs/{graph_id}/mst?wait=300")  # its first job: kernels loaded
            resident.append((graph_id, expected))
        return resident
    finally:
        conn.close()


def _predict_process(
    port: int, url: str, threads: int, duration_s: float, body: bytes, barrier: Any, out: Any
) -> None:
    """One client process: ``threads`` keep-alive connections looping a prediction (npz in and out)."""
    headers = {"content-type": "application/octet-stream", "accept": "application/octet-stream"}
    times: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    conns = [Conn(port, timeout=120) for _ in range(threads)]
    barrier.wait()
    stop = time.monotonic() + duration_s

    def client(conn: Conn) -> None:
        mine: list[float] = []
        while time.monotonic() < stop:
            started = time.perf_counter()
            try:
                status, answer = conn.call("POST", url, body, headers)
            except Exception as exc:
                with lock:
                    errors.append(repr(exc)[:200])
                continue
            if status != 200:
                with lock:
                    errors.append(f"{status}: {answer[:200]!r}")
                continue
            mine.append((time.perf_counter() - started) * 1e3)
        with lock:
            times.extend(mine)

    workers = [threading.Thread(target=client, args=(conn,)) for conn in conns]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for conn in conns:
        conn.close()
    out.put({"ms": times, "errors": len(errors), "samples": errors[:3]})


def _predict_level(
    port: int, url: str, clients: int, processes: int, body: bytes, seconds: float
) -> dict[str, Any]:
    """``clients`` connections in ``processes`` client processes looping ``url``'s prediction."""
    parts, elapsed, procs = run_client_processes(
        _predict_process, clients, processes, seconds, lambda share, _: (port, url, share, seconds, body)
    )
    times = [x for p in parts for x in p["ms"]]
    return {
        "clients": clients,
        "client_processes": procs,
        "per_s": round(len(times) / elapsed, 1),
        "p50_ms": round(percentile(times, 50), 3) if times else None,
        "p99_ms": round(percentile(times, 99), 3) if times else None,
        "errors": sum(p["errors"] for p in parts),
        "error_samples": [x for p in parts for x in p["samples"]][:3],
    }


def _predict(port: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    rng = np.random.default_rng(7)
    centers = rng.random((20, 2)) * 100
    labels = rng.integers(0, 20, int(args.predict_n))
    points = centers[labels] + rng.normal(0, 0.5, (int(args.predict_n), 2))
    buf = io.BytesIO()
    np.savez(buf, points=points)
    conn = Conn(port, timeout=600)
    try:
        points_id = conn.json("POST", "/v1/points", buf.getvalue(), (201,))["id"]
        # the baseline model (bench.predict_http's): min_samples 5, so 8 neighbours a query
        params = json.dumps({"min_cluster_size": 50, "min_samples": 5}).encode()
        status, data = conn.call(
            "POST", f"/v1/points/{points_id}/models", params, {"content-type": "application/json"}
        )
        if status != 201:
            raise RuntimeError(f"the model's fit answered {status}: {data[:300]!r}")
        model = json.loads(data)
    finally:
        conn.close()
    queries = io.BytesIO()
    np.savez(
        queries,
        points=centers[rng.integers(0, 20, args.predict_points)]
        + rng.normal(0, 0.5, (args.predict_points, 2)),
    )
    body = queries.getvalue()
    url = f"/v1/points/{points_id}/models/{model['id']}/predict"
    _predict_level(port, url, 4, 1, body, 1.0)  # warm: the model's first predictions
    one = _predict_level(port, url, 1, 1, body, args.duration)
    return [one] + [
        _predict_level(port, url, args.predict_clients, args.client_processes, body, args.duration)
        for _ in range(args.runs)
    ]


def run_shape(
    backend: str, api: int, per: int, graphs: list[Any], args: argparse.Namespace, log_dir: Path
) -> dict[str, Any]:
    results = None
    if args.result_dir == "memory":  # a fresh folder on the host's memory file system, removed after
        results = tempfile.mkdtemp(prefix="mst-bench-results-", dir="/dev/shm")
    elif args.result_dir:
        results = args.result_dir
    try:
        return _run_shape(
            backend,
            api,
            per,
            graphs,
            args,
            log_dir,
            _settings(backend, api, per, args.gpus, args.mps, results),
        )
    finally:
        if args.result_dir == "memory" and results:
            shutil.rmtree(results, ignore_errors=True)


def _run_shape(
    backend: str,
    api: int,
    per: int,
    graphs: list[Any],
    args: argparse.Namespace,
    log_dir: Path,
    env: dict[str, str],
) -> dict[str, Any]:
    shape: dict[str, Any] = {
        "api_processes": api,
        "workers_per_gpu" if backend != "cpu" else "cpu_workers": per,
    }
    log = log_dir / f"server-{api}x{per}.log"
    with started_server(backend, log, 900.0, env, cpus=args.server_cpus) as (base, proc):
        port = int(base.rsplit(":", 1)[1])
        conn = Conn(port, timeout=60)
        ready = conn.json("GET", "/readyz")
        conn.close()
        worker_pids = {int(w["pid"]) for w in ready["workers"] if w.get("pid")}
        shape["worker_cpus"] = sorted({len(os.sched_getaffinity(pid)) for pid in worker_pids})
        shape["workers"] = len(ready["workers"])
        shape["device"] = ready["workers"][0].get("device")
        shape["mps"] = any(w.get("mps") for w in ready["workers"])  # the workers under CUDA MPS
        resident = _upload(port, graphs)
        runs = []
        for _ in range(args.runs if graphs else 0):
            before = server_cpu_s(proc.pid, worker_pids)
            with GpuActivity(args.gpus, enabled=backend == "gpu") as gpus:
                level = run_level(port, "jobs", args.clients, args.client_processes, args.duration, resident)
                ended = time.time()  # the load ran for its duration_s up to here (then clients exit)
            after = server_cpu_s(proc.pid, worker_pids)
            if backend == "gpu":
                level["gpu_activity"] = gpus.summary((ended - level["duration_s"], ended))
            done = max(level["completed"], 1)
            # One API process: it is the process started (``runtime``). Several: the process
            # started is the supervisor and the API processes are among its other children.
            roles = {"runtime": "supervisor", "other": "api"} if api > 1 else {"runtime": "api"}
            level["cpu_ms_per_job"] = {
                roles.get(k, k): round((after[k] - before.get(k, 0.0)) / done * 1e3, 3) for k in after
            }
            runs.append(level)
        shape["runs"] = runs
        if runs:
            ordered = sorted(runs, key=lambda r: r["per_s"])
            median = ordered[len(ordered) // 2]
            shape["median_per_s"] = median["per_s"]
            shape["median_p99_ms"] = median["p99_ms"]
            shape["errors"] = sum(r["errors"] for r in runs)
            shape["mismatches"] = sum(r["mismatches"] for r in runs)
        if args.predict:
            one, *loaded = _predict(port, args)
            shape["predict_one_client"] = one
            shape["predict"] = loaded
            ordered_p = sorted(loaded, key=lambda r: r["per_s"])
            shape["predict_median_per_s"] = ordered_p[len(ordered_p) // 2]["per_s"]
            shape["predict_median_p99_ms"] = ordered_p[len(ordered_p) // 2]["p99_ms"]
            shape["predict_one_client_p50_ms"] = one["p50_ms"]
    return shape


def clients_cpus(server_cpus: set[int] | None) -> set[int]:
    """The CPUs the clients may use: those the service does not (empty: every CPU, shared)."""
    if not server_cpus:
        return set()
    return set(os.sched_getaffinity(0)) - server_cpus


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="gpu", choices=("gpu", "cpu"))
    p.add_argument("--shapes", default="1x1,2x1,4x1,4x2", help="APIxPER, comma-separated")
    p.add_argument("--gpus", default=None, help="MST_GPUS (default: every visible GPU)")
    p.add_argument("--server-cpus", type=parse_cpus, default=None, help="CPUs of the service, e.g. 0-15")
    p.add_argument("--scale", type=int, default=16, help="RMAT scale of the graphs")
    p.add_argument("--graphs", type=int, default=64, help="0: no jobs (with --predict: predictions only)")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--client-processes", type=int, default=8)
    p.add_argument("--duration", type=float, default=5.0, help="seconds per run")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--predict", action="store_true", help="also predictions against a resident model")
    p.add_argument("--predict-n", type=float, default=1e6)
    p.add_argument("--predict-points", type=int, default=1000)
    p.add_argument("--predict-clients", type=int, default=64)
    p.add_argument("--label", default="", help="a note kept in the record (e.g. 'MPS on')")
    p.add_argument(
        "--mps", choices=("auto", "on", "off"), default=None, help="MST_MPS (default: the service's)"
    )
    p.add_argument(
        "--result-dir",
        default=None,
        help="MST_RESULT_DIR of every shape; 'memory': a fresh folder in /dev/shm for each (default: the "
        "data dir's spool, on the disk)",
    )
    p.add_argument(
        "--disk-probe-mb",
        type=int,
        default=1024,
        help="MiB written (4 files at once, fdatasynced) where the services' data dirs live, before the "
        "shapes: the disk's bandwidth in the record (0: no probe)",
    )
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    client_cpus = clients_cpus(args.server_cpus)
    if client_cpus:  # the clients (this process's children) keep off the service's CPUs
        os.sched_setaffinity(0, client_cpus)
    with ProcessPoolExecutor(max(1, min(args.graphs, os.cpu_count() or 1))) as pool:  # ~2 s a 2^16 graph
        graphs = list(pool.map(_rmat_graph, [args.scale] * args.graphs, range(args.graphs)))
    record: dict[str, Any] = {
        "benchmark": "scaling",
        "host": platform.node(),
        "cpus": len(os.sched_getaffinity(0)),
        "server_cpus": len(args.server_cpus) if args.server_cpus else "shared with the clients",
        "client_cpus": len(client_cpus) if client_cpus else "every CPU",
        "backend": args.backend,
        "label": args.label,
        "mps": args.mps or "the service's default (auto)",
        "result_dir": args.result_dir or "the data dir's spool",
        "graph": f"rmat-{args.scale} ({graphs[0][2]} edges), {args.graphs} graphs, one per client"
        if graphs
        else None,
        "clients": args.clients,
        "duration_s": args.duration,
        "disk_write": disk_write(Path(tempfile.gettempdir()), args.disk_probe_mb)
        if args.disk_probe_mb
        else None,
        "shapes": [],
    }
    for api, per in parse_shapes(args.shapes):
        try:
            shape = run_shape(args.backend, api, per, graphs, args, args.out.parent)
        except Exception as exc:  # the next shape still runs; this one says why it did not
            shape = {"api_processes": api, "per": per, "error": repr(exc)[:500]}
        record["shapes"].append(shape)
        print(
            json.dumps(
                {k: v for k, v in shape.items() if k not in ("runs", "predict", "predict_one_client")}
            ),
            flush=True,
        )
        args.out.write_text(json.dumps(record, indent=1))
    return record


if __name__ == "__main__":
    main()
