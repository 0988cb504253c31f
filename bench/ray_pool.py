"""``python -m bench.ray_pool``: what the Ray worker pool costs per request, against the local pool.

Starts ``python -m service`` twice on the same backend, once with ``MST_WORKER_POOL=local`` (worker
processes and pipes) and once with ``MST_WORKER_POOL=ray`` (Ray actors of a local Ray cluster the
server starts), and measures, one client, one request at a time:

* the start-up: from the process's start to every worker ready;
* an MST job on a small resident graph: ``POST /v1/graphs/{id}/mst?wait=`` (submit and finished
  record), then ``GET /v1/jobs/{id}/result`` (binary);
* a one-shot ``POST /v1/mst`` of the same graph (upload, compute, answer);
* the transport alone, without HTTP: a ``ping`` request (the worker computes its 4-edge probe
  forest) through the supervisor's handle, in one process, pipe against actor call.

Every forest's total weight is checked against the engine's. Prints a Markdown table (median and
p90 in milliseconds); ``--json`` also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .server import npz_body, started_server

OCTET = "application/octet-stream"


def _graph(n: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    rng = np.random.default_rng(0)
    return rng.integers(0, n, m), rng.integers(0, n, m), rng.integers(0, 1000, m), n


def _quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered), 3),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
        "n": len(ordered),
    }


def measure(pool: str, backend: str, repeats: int, edges: int, log: Path | None) -> dict[str, Any]:
    import httpx

    import gpu_core

    src, dst, weight, n = _graph(max(edges // 5, 2), edges)
    expected = gpu_core.minimum_spanning_forest(src, dst, weight, num_vertices=n, backend="cpu").total_weight
    body = npz_body((src, dst, weight, n))  # type: ignore[arg-type]
    env = {"MST_WORKER_POOL": pool, "MST_LOG_LEVEL": "warning"}
    if pool == "ray":
        env["MST_RAY_WORKERS"] = "1"
    started = time.perf_counter()
    with started_server(backend, log, 300.0, env) as (base, _), httpx.Client(base_url=base, timeout=60) as c:
        while not all(w["state"] == "ready" for w in c.get("/readyz").json()["workers"]):
            time.sleep(0.01)
        startup_s = time.perf_counter() - started
        graph = c.post("/v1/graphs", content=body, headers={"content-type": OCTET}).json()["id"]
        job_ms: list[float] = []
        result_ms: list[float] = []
        oneshot_ms: list[float] = []
        for i in range(repeats + 5):  # the first five warm up
            t0 = time.perf_counter()
            job = c.post(f"/v1/graphs/{graph}/mst", params={"wait": 30}).json()
            t1 = time.perf_counter()
            result = c.get(f"/v1/jobs/{job['id']}/result", headers={"accept": OCTET})
            t2 = time.perf_counter()
            answer = c.post("/v1/mst", content=body, headers={"content-type": OCTET}).json()
            t3 = time.perf_counter()
            if job["result"]["total_weight"] != expected or answer["total_weight"] != expected:
                got = (job["result"]["total_weight"], answer["total_weight"])
                raise AssertionError(f"{pool}: wrong total weight {got}, expected {expected}")
            if result.status_code != 200:
                raise AssertionError(f"{pool}: result {result.status_code}: {result.text[:200]}")
            if i >= 5:
                job_ms.append((t1 - t0) * 1e3)
                result_ms.append((t2 - t0) * 1e3)
                oneshot_ms.append((t3 - t2) * 1e3)
    return {
        "pool": pool,
        "backend": backend,
        "edges": edges,
        "startup_s": round(startup_s, 2),
        "job": _quantiles(job_ms),
        "job_and_result": _quantiles(result_ms),
        "oneshot": _quantiles(oneshot_ms),
    }


def measure_transport(pool: Literal["local", "ray"], repeats: int) -> dict[str, Any]:
    """``repeats`` PING requests, one at a time, through a supervisor of one worker of ``pool``."""
    import asyncio
    import tempfile

    from service.runtime.supervisor.supervisor import Supervisor
    from service.runtime.worker import protocol as worker
    from service.settings import Settings

    async def run(data_dir: str) -> list[float]:
        from service.runtime.links.fleet import Fleet
        from service.runtime.links.link import WorkerLink

        extra: dict[str, Any] = {"ray_workers": 1} if pool == "ray" else {}
        settings = Settings(backend="cpu", data_dir=Path(data_dir), worker_pool=pool, **extra)
        supervisor = Supervisor(settings)
        supervisor.begin()
        await supervisor.start()
        links: list[WorkerLink] | None = None
        if pool == "ray":
            from service.runtime.links.ray_link import RayLink

            links = [RayLink(s, supervisor.board, 300) for s in supervisor.slots]  # type: ignore[arg-type]
        fleet = Fleet(settings, supervisor.board, supervisor.run_dir, 0, supervisor.workers, links)
        fleet.open()
        try:
            (link,) = fleet.links
            samples = []
            for i in range(repeats + 20):
                started = time.perf_counter()
                await link.call(worker.PING)
                if i >= 20:
                    samples.append((time.perf_counter() - started) * 1e3)
            return samples
        finally:
            await fleet.close()
            await supervisor.stop()

    with tempfile.TemporaryDirectory(prefix="mst-bench-") as data_dir:
        (Path(data_dir) / "spool" / "tmp").mkdir(parents=True)
        return {"pool": pool, "ping": _quantiles(asyncio.run(run(data_dir)))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ray_pool", description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="cpu", help="MST_BACKEND of both servers (default cpu)")
    p.add_argument("--repeats", type=int, default=200, help="requests of each kind (default 200)")
    p.add_argument("--edges", type=int, default=5000, help="edges of the graph (default 5000)")
    p.add_argument("--json", type=Path, help="also write the numbers here")
    p.add_argument("--log-dir", type=Path, help="keep the servers' logs here")
    args = p.parse_args(argv)
    rows = []
    for pool in ("local", "ray"):
        log = args.log_dir / f"server-{pool}.log" if args.log_dir else None
        rows.append(measure(pool, args.backend, args.repeats, args.edges, log))
    transport = [measure_transport("local", args.repeats), measure_transport("ray", args.repeats)]
    print(f"| pool | start-up (s) | job, median / p90 (ms) | job + result | one-shot ({args.edges} edges) |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        kinds = ("job", "job_and_result", "oneshot")
        cells = [f"{r[k]['median_ms']:.2f} / {r[k]['p90_ms']:.2f}" for k in kinds]
        print(f"| {r['pool']} | {r['startup_s']:.1f} | " + " | ".join(cells) + " |")
    print("\n| pool | ping through the handle, no HTTP, median / p90 (ms) |\n| --- | --- |")
    for t in transport:
        print(f"| {t['pool']} | {t['ping']['median_ms']:.3f} / {t['ping']['p90_ms']:.3f} |")
    if args.json:
        args.json.write_text(json.dumps({"http": rows, "transport": transport}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
