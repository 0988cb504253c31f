"""Service-level benchmark: the REST API of ``python -m service``, driven over loopback with httpx.

The server is started as a subprocess on a free loopback port with a fresh
data directory and stopped afterwards (:mod:`bench.server`). Measured on one graph:

* upload throughput of ``POST /v1/graphs``, JSON and binary (``.npz``), in MB/s and edges/s;
* end-to-end latency of ``POST /v1/graphs/{id}/mst?wait=S`` plus the binary
  result fetch (``GET /v1/jobs/{id}/result``, ``Accept: application/octet-stream``)
  on the resident graph, p50/p99 over N requests, against each job's
  ``compute_ms`` (overhead = end-to-end - compute_ms);
* result download throughput, JSON vs binary;

the latency and the downloads with two clients, one keep-alive connection
each: httpx (the bundled client's library) and the standard library's
``http.client``. httpx spends about 0.5 ms of its own per request and 1 ms
per MB read on the H200 host, so the http.client figures are the ones that
measure the service.
* the latency of a job and its result in one request, as the bundled client
  gets them (``Client.forest()``: ``Accept: application/octet-stream`` on the
  submission, answered with the ``.npz``, read into arrays by the client);
* the one-shot ``POST /v1/mst`` (upload + compute + result in one call).
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import json
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .generators import DEFAULT_CACHE, Edges, GraphSpec, load_or_make
from .server import JSON, NPZ, Body, json_body, npz_body, read_npz, running_server, service_present
from .timing import percentile, summarize


@dataclass(frozen=True)
class ServiceSpec:
    """A service-level benchmark: one graph, uploaded and computed over HTTP."""

    name: str
    graph: GraphSpec
    #: MST requests on the resident graph for the latency percentiles
    requests: int
    #: uploads per format (and result downloads, one-shot calls)
    uploads: int
    #: JSON bodies are ~10x larger than npz; above this many edges only npz is measured
    json_max_edges: int = 5_000_000


@dataclass
class ServiceOptions:
    #: MST_BACKEND of the server: auto, gpu or cpu
    backend: str = "auto"
    #: override the spec's request / upload counts
    requests: int | None = None
    uploads: int | None = None
    ready_timeout_s: float = 240.0
    wait_s: float = 120.0
    log_dir: Path | None = None
    cache_dir: Path | None = DEFAULT_CACHE


def _ident(record: dict[str, Any], *keys: str) -> str:
    for key in (*keys, "id"):
        if key in record:
            return str(record[key])
    raise KeyError(f"no id field ({', '.join((*keys, 'id'))}) in {sorted(record)}")


def _check(r: Any, *ok: int) -> Any:
    if r.status_code not in ok:
        raise RuntimeError(
            f"{r.request.method} {r.request.url.path} answered {r.status_code}: {r.text[:500]}"
        )
    return r


def _mb_per_s(nbytes: int, ms: float | None) -> float | None:
    return nbytes / 1e6 / (ms / 1e3) if ms and ms > 0 else None


# --------------------------------------------------------------------------- measurements


def _body(body: bytes, content_type: str, accept: str | None = None) -> dict[str, Any]:
    """Request arguments for a large body: sent in pieces with a Content-Length (see
    ``service.client.body_pieces``: httpx copies a single ``bytes`` body after every partial
    send, which would measure the client instead of the service)."""
    from service.client import binary_headers, body_pieces

    headers = binary_headers(body, accept)
    headers["content-type"] = content_type
    return {"content": body_pieces(body), "headers": headers}


def _upload(client: Any, body: bytes, fmt: str) -> tuple[float, str]:
    if fmt == "json":
        kwargs: dict[str, Any] = _body(body, "application/json")
    else:
        kwargs = {**_body(body, NPZ), "params": {"format": "npz"}}
    t0 = time.perf_counter()
    r = _check(client.post("/v1/graphs", **kwargs), 200, 201)
    ms = (time.perf_counter() - t0) * 1e3
    return ms, _ident(r.json(), "graph_id")


class StdlibClient:
    """One keep-alive connection of the standard library's ``http.client`` (the leanest common client)."""

    def __init__(self, base: str, timeout: float) -> None:
        from service.client import receive_buffer

        url = urlsplit(base)
        self.conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=timeout)
        self._receive_buffer = receive_buffer

    def request(
        self, method: str, path: str, headers: dict[str, str] | None = None, *, into_buffer: bool = False
    ) -> tuple[int, Body]:
        """(status, body); ``into_buffer``: the body lands in ``service.client.receive_buffer``."""
        try:
            self.conn.request(method, path, headers=headers or {})
            response = self.conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            if method != "GET":
                raise
            # the server closed the idle keep-alive connection (uvicorn: after 5 s): reconnect once
            self.conn.close()
            self.conn.request(method, path, headers=headers or {})
            response = self.conn.getresponse()
        size = response.getheader("content-length")
        if not into_buffer or size is None or response.status >= 400:
            body: Body = response.read()
        else:  # into memory that is not faulted in page by page, as the bundled client does
            body = self._receive_buffer(int(size))
            if response.readinto(body) != len(body):
                raise RuntimeError(f"{method} {path}: the body was cut short")
        if response.status >= 400:
            raise RuntimeError(f"{method} {path} answered {response.status}: {body[:500]!r}")
        return response.status, body

    def close(self) -> None:
        self.conn.close()


def _finished_job(client: Any, job: dict[str, Any], wait_s: float) -> dict[str, Any]:
    """Poll a job the ``?wait=`` did not see finish."""
    job_id = _ident(job, "job_id")
    deadline = time.monotonic() + wait_s
    while job.get("status") in ("queued", "running"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still {job.get('status')} after {wait_s} s")
        time.sleep(0.005)
        job = _check(client.get(f"/v1/jobs/{job_id}"), 200).json()
    if job.get("status") != "succeeded":
        raise RuntimeError(f"job {job_id} ended {job.get('status')}: {job.get('error')}")
    return job


def _mst_request(client: Any, graph_id: str, wait_s: float) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    r = _check(client.post(f"/v1/graphs/{graph_id}/mst", params={"wait": wait_s}), 200, 202)
    job = _finished_job(client, r.json(), wait_s)
    return job, (time.perf_counter() - t0) * 1e3


def _fetch(client: Any, job_id: str, binary: bool) -> tuple[Body, float]:
    headers = {"accept": NPZ if binary else "application/json"}
    from service.client import read_response  # large reads, as the bundled client does

    t0 = time.perf_counter()
    r, content = read_response(client, "GET", f"/v1/jobs/{job_id}/result", headers=headers)
    _check(r, 200)
    return content, (time.perf_counter() - t0) * 1e3


def _expected(edges: Edges) -> dict[str, Any] | None:
    """Reference total weight (SciPy) for graphs small enough to check quickly."""
    if edges.num_edges > 5_000_000 or not edges.stats.get("simple"):
        return None
    from scipy.sparse import coo_array
    from scipy.sparse.csgraph import minimum_spanning_tree

    src, dst, weight, n = edges
    tree = minimum_spanning_tree(coo_array((weight, (src, dst)), shape=(n, n)).tocsr())
    return {"total_weight": float(tree.sum()), "forest_edges": int(tree.nnz)}


#: the parts of the record that time a job and its result, each with its forest's check
LATENCY_PARTS = ("latency", "latency_stdlib", "latency_forest")


def forest_latency(
    base: str, graph_id: str, requests: int, opts: ServiceOptions, expected: dict[str, Any] | None
) -> dict[str, Any]:
    """A job and its result as the bundled client gets them: ``Client.forest()``, one request
    (``POST .../mst?wait=`` with ``Accept: application/octet-stream``, answered with the ``.npz``),
    the arrays read by the client; end to end per call, against each forest's ``compute_ms``."""
    from service.client import Client

    with Client(base, timeout=max(600.0, opts.wait_s + 60)) as bundled:
        for _ in range(2):  # as the two-request parts: the first may load the graph onto the device
            bundled.forest(graph_id, wait=opts.wait_s)
        e2e, compute, overhead = [], [], []
        forest = None
        for _ in range(requests):
            t0 = time.perf_counter()
            forest = bundled.forest(graph_id, wait=opts.wait_s)
            total = (time.perf_counter() - t0) * 1e3
            e2e.append(total)
            compute.append(forest.compute_ms)
            overhead.append(total - forest.compute_ms)
    assert forest is not None
    got = {"total_weight": forest.total_weight, "forest_edges": int(forest.edge_ids.shape[0])}
    return {
        "requests": requests,
        "e2e_ms": _with_p99(e2e),
        "compute_ms": _with_p99(compute),
        "overhead_ms": _with_p99(overhead),
        "backend": None,
        "check": _forest_check(got, expected),
    }


def _forest_check(got: dict[str, Any], expected: dict[str, Any] | None) -> dict[str, Any]:
    """A latency part's forest (``got``: its total weight and edge count) against SciPy's."""
    check: dict[str, Any] = {"got": got, "expected": expected}
    if expected is not None:
        check["total_weight_agrees"] = float(got["total_weight"]) == expected["total_weight"]
        check["forest_edges_agree"] = got["forest_edges"] == expected["forest_edges"]
    return check


def _guarded(part: str, fn: Callable[[], dict[str, Any]], log: Callable[[str], None]) -> dict[str, Any]:
    try:
        out = fn()
        out.setdefault("status", "ok")
        return out
    except Exception as exc:
        log(f"  {part}: ERROR {type(exc).__name__}: {exc}")
        return {
            "status": "error",
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=6),
        }


def measure_service(
    base: str, edges: Edges, spec: ServiceSpec, opts: ServiceOptions, log: Callable[[str], None]
) -> dict[str, Any]:
    import httpx

    uploads = opts.uploads or spec.uploads
    requests = opts.requests or spec.requests
    out: dict[str, Any] = {}
    m = edges.num_edges
    with httpx.Client(base_url=base, timeout=httpx.Timeout(max(600.0, opts.wait_s + 60))) as client:
        # ---- uploads
        bodies: dict[str, Callable[[], bytes]] = {"npz": lambda: npz_body(edges)}
        if m <= spec.json_max_edges:
            bodies = {"json": lambda: json_body(edges), **bodies}
        else:
            out["upload_json"] = {"status": "skipped", "reason": f"more than {spec.json_max_edges:,} edges"}
        graph_id: str | None = None
        for fmt, make_body in bodies.items():

            def upload(fmt: str = fmt, make_body: Callable[[], bytes] = make_body) -> dict[str, Any]:
                nonlocal graph_id
                t0 = time.perf_counter()
                body = make_body()
                encode_ms = (time.perf_counter() - t0) * 1e3
                times = []
                for i in range(uploads):
                    ms, gid = _upload(client, body, fmt)
                    times.append(ms)
                    if graph_id is None and i == uploads - 1:
                        graph_id = gid  # keep one resident graph for the MST requests
                    else:
                        _check(client.delete(f"/v1/graphs/{gid}"), 200, 202, 204)
                s = summarize(times)
                return {
                    "ms": s,
                    "bytes": len(body),
                    "client_encode_ms": encode_ms,
                    "mb_per_s": _mb_per_s(len(body), s["median"]),
                    "edges_per_s": m / (s["median"] / 1e3),
                }

            out[f"upload_{fmt}"] = _guarded(f"upload {fmt}", upload, log)
            r = out[f"upload_{fmt}"]
            if r["status"] == "ok":
                log(
                    f"  upload {fmt}: {r['bytes'] / 1e6:.1f} MB in {r['ms']['median']:.1f} ms "
                    f"= {r['mb_per_s']:.1f} MB/s"
                )
        if graph_id is None:
            raise RuntimeError("no upload succeeded; nothing to compute on")

        # ---- end-to-end latency on the resident graph
        expected = _expected(edges)

        def latency(mst: Callable[[], dict[str, Any]], fetch: Callable[[str], Body]) -> dict[str, Any]:
            for _ in range(2):  # first request may load the graph onto the device
                job = mst()
            e2e, submit, fetch_times, compute, overhead = [], [], [], [], []
            job = {}
            last_content: Body = b""
            for _ in range(requests):
                t0 = time.perf_counter()
                job = mst()
                t1 = time.perf_counter()
                content = fetch(_ident(job, "job_id"))
                t2 = time.perf_counter()
                total = (t2 - t0) * 1e3
                c = float(job["result"]["compute_ms"])
                e2e.append(total)
                submit.append((t1 - t0) * 1e3)
                fetch_times.append((t2 - t1) * 1e3)
                compute.append(c)
                overhead.append(total - c)
                last_content = content
            result = read_npz(last_content)
            summary = job["result"]
            got = {
                "total_weight": summary.get("total_weight"),
                "forest_edges": int(result["edge_ids"].shape[0]),
            }
            check = _forest_check(got, expected)
            if summary.get("num_edges") is not None:
                check["num_edges_matches_result"] = int(summary["num_edges"]) == got["forest_edges"]
            return {
                "requests": requests,
                "e2e_ms": _with_p99(e2e),
                "submit_ms": _with_p99(submit),
                "fetch_binary_ms": _with_p99(fetch_times),
                "compute_ms": _with_p99(compute),
                "overhead_ms": _with_p99(overhead),
                "result_bytes_binary": len(last_content),
                "backend": None,
                "job_id": _ident(job, "job_id"),
                "check": check,
            }

        def stdlib_mst() -> dict[str, Any]:
            _, body = lean.request("POST", f"/v1/graphs/{graph_id}/mst?wait={opts.wait_s}")
            return _finished_job(client, json.loads(bytes(body)), opts.wait_s)

        def stdlib_fetch(job_id: str) -> Body:
            return lean.request("GET", f"/v1/jobs/{job_id}/result", {"accept": NPZ}, into_buffer=True)[1]

        def httpx_mst() -> dict[str, Any]:
            return _mst_request(client, graph_id, opts.wait_s)[0]

        def httpx_fetch(job_id: str) -> Body:
            return _fetch(client, job_id, binary=True)[0]

        lean = StdlibClient(base, timeout=max(600.0, opts.wait_s + 60))
        clients = {"latency": (httpx_mst, httpx_fetch), "latency_stdlib": (stdlib_mst, stdlib_fetch)}
        for key, (mst, fetch) in clients.items():
            out[key] = _guarded(key, functools.partial(latency, mst, fetch), log)
        out["latency_forest"] = _guarded(
            "latency_forest", functools.partial(forest_latency, base, graph_id, requests, opts, expected), log
        )
        lat = out["latency"]
        with contextlib.suppress(Exception):  # where the graph lives, as the service reports it
            residency = client.get(f"/v1/graphs/{graph_id}").json().get("residency")
            out["residency"] = residency
            for key in LATENCY_PARTS:
                if out[key]["status"] == "ok" and isinstance(residency, dict):
                    out[key]["backend"] = residency.get("backend")
        for key in LATENCY_PARTS:
            if out[key]["status"] == "ok":
                r = out[key]
                log(
                    f"  {key}: e2e p50 {r['e2e_ms']['median']:.2f} ms, p99 {r['e2e_ms']['p99']:.2f} ms; "
                    f"compute p50 {r['compute_ms']['median']:.2f} ms; "
                    f"overhead p50 {r['overhead_ms']['median']:.2f} ms, p99 {r['overhead_ms']['p99']:.2f} ms"
                )

        # ---- result downloads, JSON vs binary
        def downloads() -> dict[str, Any]:
            job_id = lat["job_id"]
            res: dict[str, Any] = {}
            path = f"/v1/jobs/{job_id}/result"
            fetchers: dict[str, Callable[[], Body]] = {
                "json": lambda: _fetch(client, job_id, False)[0],
                "binary": lambda: _fetch(client, job_id, True)[0],
                "json_stdlib": lambda: lean.request("GET", path, {"accept": JSON}, into_buffer=True)[1],
                "binary_stdlib": lambda: lean.request("GET", path, {"accept": NPZ}, into_buffer=True)[1],
            }
            for kind, fetch in fetchers.items():
                times, size = [], 0
                for _ in range(max(uploads, 3)):
                    t0 = time.perf_counter()
                    size = len(fetch())
                    times.append((time.perf_counter() - t0) * 1e3)
                s = summarize(times)
                res[kind] = {"ms": s, "bytes": size, "mb_per_s": _mb_per_s(size, s["median"])}
            return res

        if lat["status"] == "ok":
            out["download"] = _guarded("download", downloads, log)

        # ---- one-shot
        def one_shot() -> dict[str, Any]:
            res: dict[str, Any] = {}
            for fmt, make_body in bodies.items():
                body = make_body()
                times = []
                ctype = ""
                for _ in range(uploads):
                    if fmt == "json":
                        kwargs: dict[str, Any] = _body(body, "application/json")
                    else:
                        kwargs = {**_body(body, NPZ, accept=NPZ), "params": {"format": "npz"}}
                    t0 = time.perf_counter()
                    r = _check(client.post("/v1/mst", **kwargs), 200)
                    _ = r.content
                    times.append((time.perf_counter() - t0) * 1e3)
                    ctype = r.headers.get("content-type", "")
                s = summarize(times)
                res[fmt] = {
                    "ms": s,
                    "request_bytes": len(body),
                    "response_content_type": ctype,
                    "directed_edges_per_s": 2 * m / (s["median"] / 1e3),
                }
            return res

        out["one_shot"] = _guarded("one-shot", one_shot, log)
        lean.close()
        with contextlib.suppress(Exception):
            client.delete(f"/v1/graphs/{graph_id}")
    return out


def _with_p99(xs: list[float]) -> dict[str, Any]:
    s = summarize(xs)
    if xs:
        s["p50"] = s["median"]
        s["p99"] = percentile(xs, 99)
    return s


def run_service_benchmark(
    spec: ServiceSpec, opts: ServiceOptions, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Start the server, measure, stop it; always returns a record (errors inside)."""
    record: dict[str, Any] = {
        "name": spec.name,
        "type": "service",
        "status": "ok",
        "graph_name": spec.graph.name,
    }
    if not service_present():
        record.update(
            status="skipped",
            reason="the service package is not there yet ('python -m service' has no __main__)",
        )
        log(f"[service] {spec.name}: skipped, {record['reason']}")
        return record
    try:
        edges, source = load_or_make(spec.graph, opts.cache_dir)
        record["graph"] = {
            "num_vertices": edges.num_vertices,
            "num_edges": edges.num_edges,
            "directed_edges": edges.directed_edges,
            "weight_dtype": str(edges.weight.dtype),
            "obtained": source,
        }
        log_path = (opts.log_dir / f"{spec.name}-server.log") if opts.log_dir else None
        if log_path:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            record["server_log"] = str(log_path)
        log(f"[service] {spec.name}: starting 'python -m service' (MST_BACKEND={opts.backend})")
        t0 = time.perf_counter()
        with running_server(opts.backend, log_path, opts.ready_timeout_s) as base:
            record["startup_s"] = round(time.perf_counter() - t0, 3)
            record["backend_requested"] = opts.backend
            record["results"] = measure_service(base, edges, spec, opts, log)
    except Exception as exc:
        record.update(
            status="error", error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(limit=8)
        )
        log(f"[service] {spec.name}: ERROR {record['error']}")
        return record
    errors = [k for k, v in record["results"].items() if isinstance(v, dict) and v.get("status") == "error"]
    checks = {part: record["results"].get(part, {}).get("check", {}) for part in LATENCY_PARTS}
    wrong = {
        part: check
        for part, check in checks.items()
        if check.get("total_weight_agrees") is False or check.get("num_edges_matches_result") is False
    }
    if errors:
        record.update(status="error", error=f"failed: {', '.join(errors)}")
    elif wrong:
        record.update(status="error", error=f"the service's forest does not match: {wrong}")
    return record
