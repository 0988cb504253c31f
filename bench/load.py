"""Load benchmark: many concurrent clients against one ``python -m service`` on loopback.

Each level runs ``clients`` clients for ``duration_s`` seconds, each a thread with one keep-alive
``http.client`` connection (the leanest client: httpx would add about 0.5 ms of its own per
request), spread over up to ``processes`` client processes (one Python process's lock would
otherwise be the bottleneck at 64 or 256 clients, and its waits would count as the server's),
drawing requests from a fixed mix:

* ``status``: ``GET /v1/jobs/{id}`` of a finished job (a status poll);
* ``small_job``: ``POST /v1/graphs/{small}/mst?wait=30`` on a small resident graph;
* ``big_result``: ``GET /v1/jobs/{id}/result`` (binary) of a job with a large forest;
* ``upload`` + ``delete``: a small npz upload, then its deletion (so memory may stay flat).

Meanwhile one more thread keeps the worker busy with jobs on a large graph (``big_job``), so
the status polls are measured while the device computes. Reported per level: p50/p99 per
route, errors (transport errors and unexpected statuses), 5xx answers, and the API process's
resident memory (VmRSS, sampled every 0.25 s) at the start, the end and its maximum. Server
settings come from the environment (``MST_*``), e.g. ``MST_DISPATCH_DEPTH=1``.

Targets (issue 9): 0 errors, 0 5xx, ``status`` p99 <= 10 ms while the device is busy, RSS flat.
The client threads share the host with the server: on a small machine they measure both.

One module past 500 lines on purpose: the load's client processes, the server's sampling and the
judgement of one run share its timeline.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import io
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .clients import run_client_processes
from .server import started_server
from .timing import percentile

REPO_ROOT = Path(__file__).resolve().parent.parent
NPZ = "application/octet-stream"
#: the request mix: route -> share of a client's requests
MIX: dict[str, float] = {"status": 0.55, "small_job": 0.2, "big_result": 0.1, "upload": 0.15}
STATUS_P99_TARGET_MS = 10.0


@dataclass(frozen=True)
class LoadSpec:
    """The load benchmark of a suite."""

    name: str
    clients: tuple[int, ...]
    duration_s: float
    #: edges of the graph that keeps the worker busy, and of the one whose result is downloaded
    busy_edges: int
    result_vertices: int
    small_edges: int = 1_000
    #: most client processes (each runs clients / processes threads)
    processes: int = 12
    #: the client processes' GIL switch interval (Python's default, 5 ms: with 20 client threads in
    #: a process, a thread whose answer has arrived may wait for the lock; the server's own figure
    #: is reported beside the clients')
    switch_interval_s: float = 0.005


QUICK_LOAD = LoadSpec(
    "load", clients=(1, 8), duration_s=2.0, busy_edges=300_000, result_vertices=50_000, processes=2
)
FULL_LOAD = LoadSpec(
    "load", clients=(1, 8, 64, 256), duration_s=20.0, busy_edges=30_000_000, result_vertices=1_000_000
)


def _graph(seed: int, n: int, m: int) -> bytes:
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m).astype(np.int32)
    dst = rng.integers(0, n, m).astype(np.int32)
    weight = rng.integers(0, 1 << 20, m).astype(np.int32)
    buf = io.BytesIO()
    np.savez(buf, src=src, dst=dst, weight=weight, num_vertices=np.int64(n))
    return buf.getvalue()


def _path_graph(n: int) -> bytes:
    """A path of ``n`` vertices: its forest has n - 1 edges (a large result)."""
    src = np.arange(n - 1, dtype=np.int32)
    buf = io.BytesIO()
    np.savez(buf, src=src, dst=src + 1, weight=np.ones(n - 1, np.int32), num_vertices=np.int64(n))
    return buf.getvalue()


class Conn:
    """One keep-alive connection; ``call`` returns (status, body), reconnecting once if it was closed."""

    def __init__(self, port: int, timeout: float = 120.0) -> None:
        self.port, self.timeout = port, timeout
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        #: the last answer's Server-Timing header
        self.server_timing = ""

    def call(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        for attempt in (0, 1):
            try:
                self.conn.request(method, path, body=body, headers=headers or {})
                response = self.conn.getresponse()
                self.server_timing = response.getheader("server-timing", "")
                return response.status, response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, body: bytes | None = None, ok: tuple[int, ...] = (200,)) -> Any:
        headers = {"content-type": NPZ} if body is not None else None
        status, data = self.call(method, path, body, headers)
        if status not in ok:
            raise RuntimeError(f"{method} {path} answered {status}: {data[:300]!r}")
        return json.loads(data)

    def close(self) -> None:
        self.conn.close()


@contextlib.contextmanager
def _server(backend: str, log_path: Path | None, ready_timeout_s: float = 300.0) -> Iterator[tuple[int, int]]:
    """Start ``python -m service`` with room for the busy graph; yield (port, pid of the API process)."""
    limits = {"MST_MAX_EDGES": str(1 << 30), "MST_MAX_UPLOAD_BYTES": str(4 << 30), "MST_LOG_LEVEL": "warning"}
    with started_server(backend, log_path, ready_timeout_s, limits) as (base, proc):
        yield int(base.rsplit(":", 1)[1]), proc.pid


def _rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class Recorder:
    """Latencies and outcomes of one level, from many threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ms: dict[str, list[float]] = {}
        self.errors: list[str] = []
        self.server_errors = 0
        #: the Server-Timing of the slowest uploads (where their time went on the server)
        self.slow_uploads: list[tuple[float, str]] = []

    def add(self, route: str, ms: float, status: int | None, ok: tuple[int, ...], detail: str = "") -> None:
        with self.lock:
            self.ms.setdefault(route, []).append(ms)
            if status is None or status not in ok:
                if len(self.errors) < 20:
                    self.errors.append(f"{route}: {status} {detail[:200]}")
                else:
                    self.errors.append("")
            if status is not None and status >= 500:
                self.server_errors += 1

    def merge(self, part: dict[str, Any]) -> None:
        """Add what a client process recorded (:meth:`export`)."""
        with self.lock:
            for route, ms in part["ms"].items():
                self.ms.setdefault(route, []).extend(ms)
            self.errors.extend(part["errors"])
            self.server_errors += part["server_errors"]
            self.slow_uploads = sorted([*self.slow_uploads, *map(tuple, part["slow_uploads"])])[-5:]

    def slow_upload(self, ms: float, server_timing: str) -> None:
        with self.lock:
            self.slow_uploads = sorted([*self.slow_uploads, (ms, server_timing)])[-5:]

    def export(self) -> dict[str, Any]:
        return {
            "ms": self.ms,
            "errors": self.errors,
            "server_errors": self.server_errors,
            "slow_uploads": self.slow_uploads,
        }

    def summary(self) -> dict[str, Any]:
        routes = {
            route: {
                "n": len(xs),
                "p50_ms": round(percentile(xs, 50), 3),
                "p99_ms": round(percentile(xs, 99), 3),
                "max_ms": round(max(xs), 3),
            }
            for route, xs in sorted(self.ms.items())
        }
        return {
            "routes": routes,
            "errors": len(self.errors),
            "error_samples": [e for e in self.errors if e][:10],
            "server_errors": self.server_errors,
            "slowest_uploads": [
                {"ms": round(ms, 1), "server_timing": st} for ms, st in self.slow_uploads[::-1]
            ],
        }


def _timed(rec: Recorder, route: str, ok: tuple[int, ...], fn: Callable[[], tuple[int, bytes]]) -> bytes:
    t0 = time.perf_counter()
    try:
        status, body = fn()
    except Exception as exc:
        rec.add(route, (time.perf_counter() - t0) * 1e3, None, ok, f"{type(exc).__name__}: {exc}")
        return b""
    rec.add(route, (time.perf_counter() - t0) * 1e3, status, ok, body[:200].decode(errors="replace"))
    return body if status in ok else b""  # counted as an error; the caller must not read it as an answer


def _client(port: int, ids: dict[str, str], upload: bytes, stop: float, seed: int, rec: Recorder) -> None:
    rng = np.random.default_rng(seed)
    conn = Conn(port)
    routes, shares = list(MIX), list(MIX.values())
    try:
        while time.monotonic() < stop:
            route = routes[int(rng.choice(len(routes), p=shares))]
            if route == "status":
                _timed(rec, route, (200,), lambda: conn.call("GET", f"/v1/jobs/{ids['status_job']}"))
            elif route == "small_job":
                path = f"/v1/graphs/{ids['small']}/mst?wait=30"
                _timed(rec, route, (200,), functools.partial(conn.call, "POST", path))
            elif route == "big_result":
                path = f"/v1/jobs/{ids['result_job']}/result"
                _timed(rec, route, (200,), functools.partial(conn.call, "GET", path, headers={"accept": NPZ}))
            else:
                t0 = time.perf_counter()
                body = _timed(
                    rec,
                    "upload",
                    (201,),
                    lambda: conn.call("POST", "/v1/graphs", upload, {"content-type": NPZ}),
                )
                rec.slow_upload((time.perf_counter() - t0) * 1e3, conn.server_timing)
                if body:
                    graph_id = json.loads(body)["id"]
                    _timed(
                        rec,
                        "delete",
                        (204,),
                        functools.partial(conn.call, "DELETE", f"/v1/graphs/{graph_id}"),
                    )
    finally:
        conn.close()


def _busy(port: int, graph_id: str, stop: threading.Event, rec: Recorder) -> None:
    """Keep the worker computing the large graph's forest, one job after the other."""
    conn = Conn(port, timeout=600)
    try:
        while not stop.is_set():
            _timed(rec, "big_job", (200,), lambda: conn.call("POST", f"/v1/graphs/{graph_id}/mst?wait=300"))
    finally:
        conn.close()


def _client_process(
    port: int,
    ids: dict[str, str],
    upload: bytes,
    threads: int,
    duration_s: float,
    first_seed: int,
    switch_interval_s: float,
    barrier: Any,
    out: Any,
) -> None:
    """One client process: ``threads`` clients, started together with the other processes."""
    sys.setswitchinterval(switch_interval_s)
    rec = Recorder()
    barrier.wait()
    stop = time.monotonic() + duration_s
    workers = [
        threading.Thread(target=_client, args=(port, ids, upload, stop, first_seed + i, rec), daemon=True)
        for i in range(threads)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(duration_s + 300)
    out.put(rec.export())


#: the status poll's route label in the service's request-duration histogram
STATUS_ROUTE = ("GET", "/v1/jobs/{job_id}")


def _server_histogram(port: int, route: tuple[str, str]) -> dict[float, float]:
    """Cumulative bucket counts (upper bound in seconds -> count) of ``route`` in the service's
    ``mst_http_request_duration_seconds`` (time until the response starts), from ``/metrics``;
    empty where it cannot be read."""
    method, path = route
    try:
        conn = Conn(port, timeout=10)
        status, body = conn.call("GET", "/metrics")
        conn.close()
    except OSError:
        return {}
    if status != 200:
        return {}
    buckets: dict[float, float] = {}
    want = f'method="{method}",route="{path}"'
    for line in body.decode().splitlines():
        if line.startswith("mst_http_request_duration_seconds_bucket{") and want in line:
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets[float("inf") if le == "+Inf" else float(le)] = float(line.rsplit(" ", 1)[1])
    return buckets


def _histogram_quantiles(before: dict[float, float], after: dict[float, float]) -> tuple[float, float] | None:
    """p50 and p99 (ms) of the requests observed between two scrapes, as the upper bound of the
    bucket each falls in (the histogram's resolution: 0.5, 1, 2, 5, 10, 25, ... ms)."""
    if not after:
        return None
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1]
    if total <= 0:
        return None

    def upper(q: float) -> float:
        return next(b for b, c in zip(bounds, counts, strict=True) if c >= q * total) * 1e3

    return upper(0.5), upper(0.99)


def run_level(
    port: int,
    pid: int,
    ids: dict[str, str],
    upload: bytes,
    clients: int,
    duration_s: float,
    processes: int = 1,
    switch_interval_s: float = 0.005,
) -> dict[str, Any]:
    rec = Recorder()
    before = _server_histogram(port, STATUS_ROUTE)
    rss: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            value = _rss_bytes(pid)
            if value is not None:
                rss.append(value)
            done.wait(0.25)

    sampler = threading.Thread(target=sample, daemon=True)
    busy = threading.Thread(target=_busy, args=(port, ids["busy"], done, rec), daemon=True)
    sampler.start()
    busy.start()
    parts, elapsed, procs = run_client_processes(
        _client_process,
        clients,
        processes,
        duration_s,
        lambda share, first: (
            port,
            ids,
            upload,
            share,
            duration_s,
            1000 * clients + first,
            switch_interval_s,
        ),
    )
    for part in parts:
        rec.merge(part)
    done.set()
    busy.join(600)
    sampler.join(5)
    out = rec.summary()
    status_server = _histogram_quantiles(before, _server_histogram(port, STATUS_ROUTE))
    if status_server and "status" in out["routes"]:
        out["routes"]["status"]["server_p50_ms"], out["routes"]["status"]["server_p99_ms"] = status_server
    requests = sum(r["n"] for r in out["routes"].values())
    mb = 1 << 20
    out.update(
        clients=clients,
        client_processes=procs,
        duration_s=round(elapsed, 2),
        requests_per_s=round(requests / elapsed, 1),
        rss_mb={
            "start": round(rss[0] / mb, 1) if rss else None,
            "end": round(rss[-1] / mb, 1) if rss else None,
            "max": round(max(rss) / mb, 1) if rss else None,
        },
    )
    return out


def run_load_benchmark(
    spec: LoadSpec, backend: str, log_dir: Path | None, log: Callable[[str], None]
) -> dict[str, Any]:
    """Set the graphs up, run every level, and judge the targets."""
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
    log(f"[{spec.name}] graphs: busy {spec.busy_edges} edges, result of {spec.result_vertices} vertices")
    busy_body = _graph(1, max(spec.busy_edges // 4, 2), spec.busy_edges)
    result_body = _path_graph(spec.result_vertices)
    small_body = _graph(2, max(spec.small_edges // 4, 2), spec.small_edges)
    with _server(backend, None if log_dir is None else log_dir / f"{spec.name}.log") as (port, pid):
        conn = Conn(port, timeout=600)
        ids = {
            "busy": conn.json("POST", "/v1/graphs", busy_body, (201,))["id"],
            "small": conn.json("POST", "/v1/graphs", small_body, (201,))["id"],
        }
        result_graph = conn.json("POST", "/v1/graphs", result_body, (201,))["id"]
        ids["result_job"] = conn.json("POST", f"/v1/graphs/{result_graph}/mst?wait=300")["id"]
        ids["status_job"] = conn.json("POST", f"/v1/graphs/{ids['small']}/mst?wait=30")["id"]
        busy_job = conn.json("POST", f"/v1/graphs/{ids['busy']}/mst?wait=300")
        conn.close()
        backend_used = "unknown"
        with contextlib.suppress(Exception):
            probe = Conn(port)
            backend_used = probe.json("GET", "/readyz")["workers"][0]["backend"]
            probe.close()
        levels = []
        for clients in spec.clients:
            level = run_level(
                port, pid, ids, small_body, clients, spec.duration_s, spec.processes, spec.switch_interval_s
            )
            levels.append(level)
            status = level["routes"].get("status", {})
            log(
                f"[{spec.name}] {clients:>3} clients: {level['requests_per_s']} req/s, status p99 "
                f"{status.get('p99_ms')} ms (server: <= {status.get('server_p99_ms')} ms), "
                f"errors {level['errors']}, 5xx {level['server_errors']}, "
                f"RSS {level['rss_mb']}"
            )
    rss_values = [lv["rss_mb"][k] for lv in levels for k in ("start", "end") if lv["rss_mb"][k] is not None]
    checks = {
        "no_errors": all(lv["errors"] == 0 for lv in levels),
        "no_5xx": all(lv["server_errors"] == 0 for lv in levels),
        "status_p99_ms_max": max(
            (lv["routes"].get("status", {}).get("p99_ms", 0.0) for lv in levels), default=None
        ),
        "rss_growth_mb": round(rss_values[-1] - rss_values[0], 1) if rss_values else None,
    }
    checks["status_p99_within_target"] = (checks["status_p99_ms_max"] or 0.0) <= STATUS_P99_TARGET_MS
    record = {
        "name": spec.name,
        "type": "load",
        "status": "ok" if checks["no_errors"] and checks["no_5xx"] else "error",
        "backend": backend_used,
        # the server's settings from the environment (MST_API_PROCESSES, ...), as bench/jobs.py records
        "settings": {k: v for k, v in os.environ.items() if k.startswith("MST_")},
        "busy_job_compute_ms": (busy_job.get("result") or {}).get("compute_ms"),
        "mix": MIX,
        "spec": {
            "clients": list(spec.clients),
            "duration_s": spec.duration_s,
            "busy_edges": spec.busy_edges,
            "result_vertices": spec.result_vertices,
            "small_edges": spec.small_edges,
            "client_processes": spec.processes,
        },
        "levels": levels,
        "checks": checks,
    }
    if record["status"] == "error":
        record["error"] = (
            "errors or 5xx answers under load: "
            + "; ".join(s for lv in levels for s in lv["error_samples"])[:1000]
        )
    log(table(record))
    return record


def table(record: dict[str, Any]) -> str:
    """A short Markdown table of a load record: one row per level."""
    routes = ["status", "small_job", "big_result", "upload", "delete", "big_job"]
    head = (
        "| clients | req/s | "
        + " | ".join(f"{r} p50/p99 ms" for r in routes)
        + " | errors | 5xx | RSS MB start/end/max |"
    )
    rows = [head, "|" + " --- |" * (len(routes) + 5)]
    for lv in record.get("levels", []):
        cells = []
        for route in routes:
            r = lv["routes"].get(route)
            cells.append("-" if r is None else f"{r['p50_ms']:.2f} / {r['p99_ms']:.2f}")
            if route == "status" and r is not None and r.get("server_p99_ms") is not None:
                cells[-1] += f" (server <= {r['server_p50_ms']:g} / {r['server_p99_ms']:g})"
        rss = lv["rss_mb"]
        rows.append(
            f"| {lv['clients']} | {lv['requests_per_s']} | "
            + " | ".join(cells)
            + f" | {lv['errors']} | {lv['server_errors']} | {rss['start']} / {rss['end']} / {rss['max']} |"
        )
    return "\n".join(rows)


def _main() -> None:  # pragma: no cover - python -m bench.load for a quick look
    spec = QUICK_LOAD if "--full" not in sys.argv else FULL_LOAD
    record = run_load_benchmark(spec, "auto", None, print)
    print(json.dumps(record["checks"]))


if __name__ == "__main__":  # pragma: no cover
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    _main()
