"""Jobs benchmark: many small jobs at once against one ``python -m service`` (issues 12 and 25).

Four parts, on one server:

* ``jobs`` (the headline): at each client count, every client loops
  ``POST /v1/graphs/{id}/mst?wait=30`` on its **own** resident graph (RMAT 2^16 in the full suite,
  one seed per client: ``graphs`` of them, client ``c`` on graph ``c % graphs``) and then
  ``GET /v1/jobs/{id}/result`` (binary npz). No two clients share a graph while ``clients <=
  graphs``, so no job can be answered by another's computation: this is what a service with many
  users' graphs sees. Every forest is checked against the expected arrays (computed once with the
  CPU backend, an engine independent of the worker's GPU kernels). A job's latency is both
  requests together.
* ``one-request``: the headline's loop with each job and its result in ONE request: ``POST
  .../mst?wait=30`` with ``Accept: application/octet-stream``, answered with the npz once the job
  succeeded (what the bundled client's ``forest()`` does). Distinct graphs as above, at
  ``one_request_clients``; reported beside the headline, labelled (a protocol, not a shortcut: any
  client may ask so).
* ``coalesced``: the same loop with every client on ONE graph. Identical jobs waiting back to back
  are answered by one computation (``MST_COALESCE_JOBS``), so this measures that shortcut for a
  hot graph; it is reported beside the headline, labelled, never as it.
* ``oneshot``: clients loop ``POST /v1/mst`` with small graphs (10^4 edges in the full suite, a
  few distinct ones), binary answer, each forest checked likewise.

The clients are several processes (``spawn``), each with threads of one keep-alive
``http.client`` connection, so the client side is not the bottleneck (one Python process tops out
near a thousand small requests a second). Reported per level: jobs (or requests) per second,
p50/p99/max latency, errors, and forests that differ from the expected ones (``mismatches``).

Targets (on one H200): >= 1,500 jobs/s at 64 clients on 64 distinct graphs with p99 <= 50 ms
(issue 25); one-shot >= 2,000 requests/s at 64 clients (issue 12).

The server's settings come from the environment (``MST_*``), so the same benchmark measures a
switch, e.g. ``MST_DISPATCH_DEPTH=1`` (one job at a time per worker, the old dispatch).

Past 500 lines: the four parts (distinct graphs in two requests or one, coalesced, one-shot) share
the clients, the checks and the Server-Timing means.
"""

from __future__ import annotations

import io
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from service.timing import parse_header

from .clients import run_client_processes
from .load import NPZ, Conn
from .server import started_server
from .timing import percentile

JOBS_PER_S_TARGET = 1500.0
JOBS_P99_TARGET_MS = 50.0
ONESHOT_PER_S_TARGET = 2000.0


@dataclass(frozen=True)
class JobsSpec:
    """The jobs benchmark of a suite."""

    name: str
    clients: tuple[int, ...]
    duration_s: float
    #: the resident graphs: RMAT 2^scale, 8 edges per vertex, int weights, one seed each
    rmat_scale: int
    oneshot_edges: int
    oneshot_clients: int
    #: most client processes (each runs clients / processes threads)
    processes: int
    oneshot_graphs: int = 16
    #: distinct resident graphs of the ``jobs`` part (client ``c`` on graph ``c % graphs``); at most
    #: the largest client count is uploaded
    graphs: int = 64
    #: client counts of the ``coalesced`` part (every client on one graph)
    coalesced_clients: tuple[int, ...] = (64,)
    #: client counts of the ``one-request`` part (distinct graphs, a job and its result in one request)
    one_request_clients: tuple[int, ...] = (64,)
    #: which parts run: ``jobs`` (distinct graphs), ``one-request`` (the same, one request a job),
    #: ``coalesced`` (one graph), ``oneshot``
    parts: tuple[str, ...] = ("jobs", "one-request", "coalesced", "oneshot")


QUICK_JOBS = JobsSpec(
    "jobs",
    clients=(1, 8),
    duration_s=2.0,
    rmat_scale=10,
    oneshot_edges=2_000,
    oneshot_clients=8,
    processes=2,
    graphs=8,
    coalesced_clients=(8,),
)
FULL_JOBS = JobsSpec(
    "jobs",
    clients=(1, 8, 64),
    duration_s=10.0,
    rmat_scale=16,
    oneshot_edges=10_000,
    oneshot_clients=64,
    processes=12,
    graphs=64,
    coalesced_clients=(64, 256),
)


def _npz(src: Any, dst: Any, weight: Any, n: int) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, src=src, dst=dst, weight=weight, num_vertices=np.int64(n))
    return buf.getvalue()


def _expected(src: Any, dst: Any, weight: Any, n: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The forest's edge ids and weights from the CPU backend (the oracle of every answer)."""
    import gpu_core

    forest = gpu_core.Graph(src, dst, weight, n, backend="cpu").minimum_spanning_forest()
    return np.asarray(forest.edge_ids), np.asarray(forest.weights)


def _rmat_graph(
    scale: int, seed: int = 0
) -> tuple[bytes, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]], int]:
    from .generators import rmat

    edges = rmat(scale, 8, weights="int", seed=seed)
    src, dst, weight, n = edges
    return _npz(src, dst, weight, n), _expected(src, dst, weight, n), edges.num_edges


def _small_graphs(
    count: int, m: int
) -> list[tuple[bytes, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]]:
    out = []
    for seed in range(count):
        rng = np.random.default_rng(100 + seed)
        n = max(m // 4, 2)
        src = rng.integers(0, n, m).astype(np.int32)
        dst = rng.integers(0, n, m).astype(np.int32)
        weight = rng.integers(0, 1 << 20, m).astype(np.int32)
        out.append((_npz(src, dst, weight, n), _expected(src, dst, weight, n)))
    return out


class _Checker:
    """Whether an npz answer holds the expected forest (an answer seen correct before: one compare)."""

    def __init__(self, expected: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]) -> None:
        self.edge_ids, self.weights = expected
        #: answers already checked (compared byte for byte: no hashing of a large body per call)
        self.good: list[bytes] = []

    def __call__(self, body: bytes) -> bool:
        if any(body == good for good in self.good):
            return True
        try:
            with np.load(io.BytesIO(body), allow_pickle=False) as npz:
                ok = np.array_equal(npz["edge_ids"], self.edge_ids) and np.array_equal(
                    npz["weights"], self.weights
                )
        except Exception:
            return False
        if ok and len(self.good) < 4:
            self.good.append(body)
        return ok


class _Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ms: list[float] = []
        self.errors = 0
        self.mismatches = 0
        self.samples: list[str] = []
        #: the answers' Server-Timing parts: [sum of ms, count] by part (``result-`` for the result's)
        self.timing: dict[str, list[float]] = {}

    def answered(self, t0: float, check: _Checker, body: bytes, *timings: tuple[str, str]) -> None:
        """A request (or a job's two) answered: its latency since ``t0`` (the check not counted),
        whether ``body`` holds the right forest, and its answers' ``Server-Timing`` headers, each
        (header, prefix)."""
        ms = (time.perf_counter() - t0) * 1e3
        good = check(body)
        with self.lock:
            self.ms.append(ms)
            self.mismatches += not good
            for header, prefix in timings:
                self.server_timing(header, prefix)

    def server_timing(self, header: str, prefix: str = "") -> None:
        """Add an answer's ``Server-Timing`` parts (called under :attr:`lock`)."""
        for name, ms in parse_header(header).items():
            entry = self.timing.setdefault(prefix + name, [0.0, 0])
            entry[0] += ms
            entry[1] += 1

    def error(self, what: str) -> None:
        with self.lock:
            self.errors += 1
            if len(self.samples) < 5:
                self.samples.append(what[:300])


def _job_loop(
    conn: Conn, graph_id: str, check: _Checker, stop: float, tally: _Tally, one_request: bool = False
) -> None:
    submit = f"/v1/graphs/{graph_id}/mst?wait=30"
    accept = {"accept": NPZ}
    while time.monotonic() < stop:
        t0 = time.perf_counter()
        if one_request:
            _one_request_job(conn, submit, check, t0, tally)
            continue
        try:
            status, body = conn.call("POST", submit)
            if status != 200:
                tally.error(f"submit {status}: {body[:200]!r}")
                continue
            job = json.loads(body)
            if job.get("status") != "succeeded":
                tally.error(f"job {job.get('id')} {job.get('status')}: {job.get('error')}")
                continue
            submitted = conn.server_timing
            status, body = conn.call("GET", f"/v1/jobs/{job['id']}/result", headers=accept)
        except Exception as exc:
            tally.error(f"{type(exc).__name__}: {exc}")
            continue
        if status != 200:
            tally.error(f"result {status}: {body[:200]!r}")
            continue
        tally.answered(t0, check, body, (submitted, ""), (conn.server_timing, "result-"))


def _one_request_job(conn: Conn, submit: str, check: _Checker, t0: float, tally: _Tally) -> None:
    """One job and its result in one request (``Accept: application/octet-stream`` on the submission)."""
    try:
        status, body = conn.call("POST", submit, headers={"accept": NPZ})
    except Exception as exc:
        tally.error(f"{type(exc).__name__}: {exc}")
        return
    if status != 200 or body[:1] == b"{":  # a job's JSON: not finished, or not succeeded
        tally.error(f"submit {status}: {body[:200]!r}")
        return
    tally.answered(t0, check, body, (conn.server_timing, ""))


def _oneshot_loop(
    conn: Conn, graphs: list[tuple[bytes, _Checker]], stop: float, tally: _Tally, seed: int
) -> None:
    headers = {"content-type": NPZ, "accept": NPZ}
    i = seed
    while time.monotonic() < stop:
        body, check = graphs[i % len(graphs)]
        i += 1
        t0 = time.perf_counter()
        try:
            status, answer = conn.call("POST", "/v1/mst", body, headers)
        except Exception as exc:
            tally.error(f"{type(exc).__name__}: {exc}")
            continue
        if status != 200:
            tally.error(f"one-shot {status}: {answer[:200]!r}")
            continue
        tally.answered(t0, check, answer)


def _client_process(
    port: int, mode: str, threads: int, duration_s: float, work: Any, first: int, barrier: Any, out: Any
) -> None:
    """One client process: ``threads`` connections, started together with the other processes."""
    tally = _Tally()
    conns = [Conn(port) for _ in range(threads)]
    jobs = mode in ("jobs", "one-request")
    if jobs:  # work: (graph id, expected forest) of each of this process's clients
        checkers = [_Checker(expected) for _, expected in work]
    else:
        graphs = [[(body, _Checker(exp)) for body, exp in work] for _ in range(threads)]
    barrier.wait()
    stop = time.monotonic() + duration_s
    workers = []
    for t in range(threads):
        if jobs:
            target: Callable[..., None] = _job_loop
            args: tuple[Any, ...] = (conns[t], work[t][0], checkers[t], stop, tally, mode == "one-request")
        else:
            target, args = _oneshot_loop, (conns[t], graphs[t], stop, tally, first + t)
        workers.append(threading.Thread(target=target, args=args, daemon=True))
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for c in conns:
        c.close()
    out.put(
        {
            "ms": tally.ms,
            "errors": tally.errors,
            "mismatches": tally.mismatches,
            "samples": tally.samples,
            "timing": tally.timing,
        }
    )


def run_level(
    port: int, mode: str, clients: int, processes: int, duration_s: float, work: Any
) -> dict[str, Any]:
    """``clients`` connections in ``min(processes, clients)`` processes for ``duration_s`` seconds.

    ``mode="jobs"``: ``work`` lists (graph id, expected forest); client ``c`` loops on
    ``work[c % len(work)]``, and each process gets only its clients' entries."""

    def args_of(share: int, first: int) -> tuple[Any, ...]:
        mine = [work[(first + t) % len(work)] for t in range(share)] if mode != "oneshot" else work
        return (port, mode, share, duration_s, mine, first)

    parts, elapsed, procs = run_client_processes(_client_process, clients, processes, duration_s, args_of)
    ms = [x for p in parts for x in p["ms"]]
    done = len(ms)
    timing: dict[str, list[float]] = {}
    for p in parts:
        for name, (total, count) in p.get("timing", {}).items():
            entry = timing.setdefault(name, [0.0, 0])
            entry[0] += total
            entry[1] += count
    return {
        "clients": clients,
        "client_processes": procs,
        "duration_s": round(elapsed, 2),
        "completed": done,
        "per_s": round(done / elapsed, 1),
        "p50_ms": round(percentile(ms, 50), 3) if ms else None,
        "p99_ms": round(percentile(ms, 99), 3) if ms else None,
        "max_ms": round(max(ms), 3) if ms else None,
        "errors": sum(p["errors"] for p in parts),
        "mismatches": sum(p["mismatches"] for p in parts),
        "error_samples": [s for p in parts for s in p["samples"]][:5],
        #: mean ms of each Server-Timing part of the answers (jobs: submit's parts, then result-*)
        "server_timing_ms": {name: round(total / n, 3) for name, (total, n) in timing.items() if n},
    }


def server_cpu_s(runtime_pid: int, worker_pids: set[int]) -> dict[str, float]:
    """CPU seconds (user + system) the server's processes have used so far, by role: ``runtime``
    (the API process started), ``worker`` (the worker processes) and ``other`` (its other children,
    together: a standby worker, the GPU probe); empty where /proc cannot tell (not Linux)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def stat(pid: int) -> list[str] | None:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None

    def seconds(fields: list[str]) -> float:
        return (int(fields[11]) + int(fields[12])) / tick

    own = stat(runtime_pid)
    if own is None:
        return {}
    out = {"runtime": seconds(own), "worker": 0.0, "other": 0.0}
    for entry in os.listdir("/proc"):
        fields = stat(int(entry)) if entry.isdigit() else None
        if fields is not None and int(fields[1]) == runtime_pid:
            out["worker" if int(entry) in worker_pids else "other"] += seconds(fields)
    return out


def _batch_members(port: int) -> tuple[float, float]:
    """(count, sum) of the server's ``mst_oneshot_batch_members`` histogram; zeros without it."""
    conn = Conn(port, timeout=60)
    try:
        _, body = conn.call("GET", "/metrics")
    finally:
        conn.close()
    values = {"count": 0.0, "sum": 0.0}
    for line in body.decode(errors="replace").splitlines():
        for key in values:
            if line.startswith(f"mst_oneshot_batch_members_{key} "):
                values[key] = float(line.split()[1])
    return values["count"], values["sum"]


def _cpu_ms_per(level: dict[str, Any], before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The server's CPU milliseconds per completed job (or request) of a level, by role (see
    :func:`server_cpu_s`): a measure of the service's own work that a busy host's clients and
    neighbours do not blur as they blur the rates."""
    done = max(level["completed"], 1)
    return {role: round((after[role] - before.get(role, 0.0)) / done * 1e3, 3) for role in after}


def run_jobs_benchmark(
    spec: JobsSpec, backend: str, log_dir: Path | None, log: Callable[[str], None]
) -> dict[str, Any]:
    """Upload the graphs, run the distinct-graph levels, the coalesced levels and the one-shot
    level, judge the targets (on the distinct-graph level of 64 clients)."""
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
    jobs_part, coalesced_part = "jobs" in spec.parts, "coalesced" in spec.parts
    oneshot_part, one_request_part = "oneshot" in spec.parts, "one-request" in spec.parts
    count = 0
    if jobs_part:
        count = min(spec.graphs, max(spec.clients, default=1))
    if one_request_part:
        count = max(count, min(spec.graphs, max(spec.one_request_clients, default=1)))
    if coalesced_part:
        count = max(count, 1)
    what = [f"{count} RMAT 2^{spec.rmat_scale} graphs (one seed each)"] if count else []
    what += [f"{spec.oneshot_graphs} one-shot graphs of {spec.oneshot_edges} edges"] if oneshot_part else []
    log(f"[{spec.name}] making {' and '.join(what)}")
    graphs = [_rmat_graph(spec.rmat_scale, seed) for seed in range(count)]
    num_edges = graphs[0][2] if graphs else 0
    smalls = _small_graphs(spec.oneshot_graphs, spec.oneshot_edges) if oneshot_part else []
    limits = {"MST_LOG_LEVEL": "warning", "MST_MAX_QUEUED_JOBS": "100000"}
    settings = {k: v for k, v in os.environ.items() if k.startswith("MST_")}
    log_path = None if log_dir is None else log_dir / f"{spec.name}.log"
    levels: list[dict[str, Any]] = []
    coalesced: list[dict[str, Any]] = []
    one_request: list[dict[str, Any]] = []
    oneshot: dict[str, Any] | None = None
    first: dict[str, Any] = {}
    with started_server(backend, log_path, 300.0, limits) as (base, proc):
        port = int(base.rsplit(":", 1)[1])
        conn = Conn(port, timeout=600)
        ready = conn.json("GET", "/readyz")
        backend_used = ready["workers"][0]["backend"]
        worker_pids = {int(w["pid"]) for w in ready["workers"] if w.get("pid")}
        resident: list[tuple[str, Any]] = []
        for body, expected, _ in graphs:
            graph_id = conn.json("POST", "/v1/graphs", body, (201,))["id"]
            job = conn.json("POST", f"/v1/graphs/{graph_id}/mst?wait=300")
            first = first or job
            resident.append((graph_id, expected))
        del graphs
        conn.close()

        def distinct_level(mode: str, clients: int, label: str) -> dict[str, Any]:
            """A level of ``clients`` on their own graphs, with the server's CPU per job."""
            cpu_before = server_cpu_s(proc.pid, worker_pids)
            level = run_level(port, mode, clients, spec.processes, spec.duration_s, resident)
            level["cpu_ms_per_job"] = _cpu_ms_per(level, cpu_before, server_cpu_s(proc.pid, worker_pids))
            level["graphs"] = min(clients, len(resident))
            log(
                f"[{spec.name}] {label}{clients:>3} clients on {level['graphs']} graphs: {level['per_s']} "
                f"jobs/s, p50 {level['p50_ms']} ms, p99 {level['p99_ms']} ms, errors {level['errors']}, "
                f"mismatches {level['mismatches']}, server CPU ms per job {level['cpu_ms_per_job']}, "
                f"Server-Timing means (ms) {level['server_timing_ms']}"
            )
            return level

        levels += [distinct_level("jobs", c, "") for c in (spec.clients if jobs_part else ())]
        one_request += [
            distinct_level("one-request", c, "one request a job: ")
            for c in (spec.one_request_clients if one_request_part else ())
        ]
        for clients in spec.coalesced_clients if coalesced_part else ():
            level = run_level(port, "jobs", clients, spec.processes, spec.duration_s, resident[:1])
            level["graphs"] = 1
            coalesced.append(level)
            log(
                f"[{spec.name}] coalesced: {clients:>3} clients on one graph: {level['per_s']} jobs/s, "
                f"p50 {level['p50_ms']} ms, p99 {level['p99_ms']} ms, errors {level['errors']}, "
                f"mismatches {level['mismatches']}"
            )
        if oneshot_part:
            before, cpu_before = _batch_members(port), server_cpu_s(proc.pid, worker_pids)
            oneshot = run_level(
                port, "oneshot", spec.oneshot_clients, spec.processes, spec.duration_s, smalls
            )
            after, cpu_after = _batch_members(port), server_cpu_s(proc.pid, worker_pids)
            runs = after[0] - before[0]
            oneshot["batch_members_mean"] = round((after[1] - before[1]) / runs, 1) if runs else None
            oneshot["cpu_ms_per_request"] = _cpu_ms_per(oneshot, cpu_before, cpu_after)
            log(
                f"[{spec.name}] one-shot, {spec.oneshot_clients} clients: {oneshot['per_s']} req/s, "
                f"p50 {oneshot['p50_ms']} ms, p99 {oneshot['p99_ms']} ms, errors {oneshot['errors']}, "
                f"mismatches {oneshot['mismatches']}, one-shots per engine run (mean over one-shots) "
                f"{oneshot['batch_members_mean']}, server CPU ms per request {oneshot['cpu_ms_per_request']}"
            )
    at64 = next((lv for lv in levels if lv["clients"] == 64 and lv["graphs"] == 64), None)
    measured = [*levels, *one_request, *coalesced, *([oneshot] if oneshot is not None else [])]
    checks: dict[str, Any] = {
        "all_checked_equal": all(lv["mismatches"] == 0 for lv in measured),
        "no_errors": all(lv["errors"] == 0 for lv in measured),
        "jobs_per_s_64": None if at64 is None else at64["per_s"],
        "jobs_p99_ms_64": None if at64 is None else at64["p99_ms"],
        "oneshot_per_s": None if oneshot is None else oneshot["per_s"],
    }
    if at64 is not None:
        checks["jobs_target_met"] = (
            at64["per_s"] >= JOBS_PER_S_TARGET and (at64["p99_ms"] or 1e9) <= JOBS_P99_TARGET_MS
        )
    if oneshot is not None:
        checks["oneshot_target_met"] = spec.oneshot_clients == 64 and oneshot["per_s"] >= ONESHOT_PER_S_TARGET
    ok = checks["all_checked_equal"] and checks["no_errors"]
    record = {
        "name": spec.name,
        "type": "jobs",
        "status": "ok" if ok else "error",
        "backend": backend_used,
        "settings": settings,
        "job_compute_ms": (first.get("result") or {}).get("compute_ms"),
        "spec": {
            "clients": list(spec.clients),
            "coalesced_clients": list(spec.coalesced_clients),
            "one_request_clients": list(spec.one_request_clients),
            "duration_s": spec.duration_s,
            "parts": list(spec.parts),
            "graph": f"rmat-{spec.rmat_scale} ({num_edges} edges)" if count else None,
            "graphs": count,
            "oneshot_edges": spec.oneshot_edges,
            "oneshot_clients": spec.oneshot_clients,
            "client_processes": spec.processes,
        },
        "levels": levels,
        "one_request": one_request,
        "coalesced": coalesced,
        "oneshot": oneshot,
        "checks": checks,
    }
    if not ok:
        record["error"] = (
            "errors or wrong forests: " + "; ".join(s for lv in measured for s in lv["error_samples"])[:1000]
        )
    log(table(record))
    return record


def table(record: dict[str, Any]) -> str:
    """A Markdown table of a jobs record: the distinct-graph levels (the headline), then the coalesced
    ones (every client on one graph), the one-shot level last."""
    rows = [
        "| part | clients | graphs | per s | p50 ms | p99 ms | max ms | completed | errors | wrong forests |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    parts = [("jobs, distinct graphs", lv) for lv in record.get("levels", [])]
    parts += [("jobs, distinct graphs, one request each", lv) for lv in record.get("one_request", [])]
    parts += [("jobs, coalesced (one graph)", lv) for lv in record.get("coalesced", [])]
    if record.get("oneshot"):
        parts.append(("one-shot", record["oneshot"]))
    for part, lv in parts:
        rows.append(
            f"| {part} | {lv['clients']} | {lv.get('graphs', '-')} | {lv['per_s']} | {lv['p50_ms']} "
            f"| {lv['p99_ms']} | {lv['max_ms']} | {lv['completed']} | {lv['errors']} | {lv['mismatches']} |"
        )
    return "\n".join(rows)
