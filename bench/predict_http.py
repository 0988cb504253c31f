"""Predictions over HTTP against a resident HDBSCAN* model (issue 24's HTTP target).

    python -m bench.predict_http [--backend auto|gpu|cpu] [--fit-n 1e6] [--dims 3] [--small 1000]
        [--large 1e5] [--requests 200] [--repeats 5] [--concurrency 1,2,4] [--large-requests 8]
        [--membership] [--smoke] [--out FILE.json]

A live ``python -m service`` holds a point set of ``--fit-n`` points (Gaussian blobs,
as :mod:`bench.hdbscan_predict` draws them) and a model fitted on it (``min_cluster_size`` 50,
``min_samples`` 5); then:

* ``small``: one keep-alive client sends ``--requests`` predictions of ``--small`` new points
  each, one after another, as an npz body answered as an npz (``Accept: application/octet-stream``),
  and again as JSON in and out (``small_json``); each repeat's p50 and p99 latency, the figures
  the median over ``--repeats`` repeats. Target: p50 <= 5 ms for 1,000 points.
* ``large``: one client sends ``--repeats`` predictions of ``--large`` points each (npz in and
  out), one after another: the median time of one and the points per second it makes.
* ``large_concurrent``: for each of ``--concurrency`` (``c``), ``c`` threads with a keep-alive
  connection each send ``--large-requests`` predictions of ``--large`` points each at once;
  points/s = all the points predicted / the wall time from the first request to the last answer,
  the median over ``--repeats``. Target: >= 10^7 points/s in batches of 10^5, at the best
  concurrency (``targets`` names it).

Every entry also has ``server_timing_ms``: the mean of each part of the answers' ``Server-Timing``
(``lookup``, ``receive``, ``worker`` and inside it ``send``, ``w-read``, ``w-predict``, ``reply``,
then ``encode``), and ``outside_ms``: the mean client latency less the route's parts (HTTP,
middleware, the body's way in and out), for a single client. Latencies are the client's
(request sent to answer read), warm: a few requests go first. ``--smoke``: tiny sizes on the CPU
backend. Results as JSON (``--out``).
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from service.timing import parse_header

from .hdbscan_predict import blobs
from .server import started_server

MODEL = {"min_cluster_size": 50, "min_samples": 5}
NPZ = "application/octet-stream"
#: requests sent before any is timed (the first arrow/npz reads, the connection, the caches)
WARM_UP_REQUESTS = 5


def npz_body(points: np.ndarray[Any, Any]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, points=points)
    return buffer.getvalue()


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


#: the route's own parts in ``Server-Timing`` (the others are parts of ``worker``)
ROUTE_PARTS = ("lookup", "receive", "worker", "encode")


class Timings:
    """The ``Server-Timing`` parts of the answers of one measurement, for their means."""

    def __init__(self) -> None:
        self.samples: list[dict[str, float]] = []
        self._lock = threading.Lock()

    def add(self, header: str) -> None:
        with self._lock:
            self.samples.append(parse_header(header))

    def means(self) -> dict[str, float]:
        names = dict.fromkeys(name for sample in self.samples for name in sample)
        return {name: statistics.fmean(s.get(name, 0.0) for s in self.samples) for name in names}


def _latencies(send: Any, count: int) -> list[float]:
    out = []
    for _ in range(count):
        started = time.perf_counter()
        send()
        out.append((time.perf_counter() - started) * 1e3)
    return out


def concurrent_rate(send_on: Any, clients: list[Any], requests: int, batch: int) -> float:
    """Points per second of ``len(clients)`` threads, each sending ``requests`` predictions of
    ``batch`` points on its own client at once (all start together): all points / the wall time."""
    barrier = threading.Barrier(len(clients) + 1)
    errors: list[BaseException] = []

    def run(client: Any) -> None:
        barrier.wait()
        try:
            for _ in range(requests):
                send_on(client)
        except BaseException as exc:  # reported in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    if errors:
        raise errors[0]
    return len(clients) * requests * batch / wall


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.predict_http", description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("auto", "gpu", "cpu"), default="auto")
    parser.add_argument("--fit-n", type=float, default=1e6)
    parser.add_argument("--dims", type=int, default=3)
    parser.add_argument("--small", type=float, default=1000)
    parser.add_argument("--large", type=float, default=1e5)
    parser.add_argument("--requests", type=int, default=200, help="timed small requests per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--concurrency", default="1,2,4", help="clients sending large batches at once, comma-separated"
    )
    parser.add_argument("--large-requests", type=int, default=8, help="large requests per client and repeat")
    parser.add_argument("--membership", action="store_true", help="ask for membership vectors too")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU backend")
    parser.add_argument("--log", type=Path, default=None, help="the server's log file")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.smoke:
        args.backend, args.fit_n, args.small, args.large = "cpu", 2000, 100, 1000
        args.requests, args.repeats, args.large_requests, args.concurrency = 5, 2, 2, "1,2"
    import httpx

    fit_n, small_n, large_n = int(args.fit_n), int(args.small), int(args.large)
    points = blobs(fit_n, args.dims, 0)
    small = blobs(small_n, args.dims, 1)
    large = blobs(large_n, args.dims, 2)
    env = {"MST_MAX_UPLOAD_BYTES": str(1 << 34), "MST_MAX_JSON_BYTES": str(1 << 30)}
    record: dict[str, Any] = {
        "benchmark": "predict_http",
        "host": platform.node(),
        "fit_n": fit_n,
        "dims": args.dims,
        "model": MODEL,
        "membership": args.membership,
        "repeats": args.repeats,
    }
    concurrency = [int(c) for c in str(args.concurrency).split(",")]
    with (
        started_server(args.backend, args.log, 600.0, env) as (base, _),
        httpx.Client(base_url=base, timeout=600.0) as client,
    ):
        ready = client.get("/readyz").json()
        record["backend"] = ready["workers"][0].get("backend")
        record["device"] = ready["workers"][0].get("device")
        created = client.post("/v1/points", content=npz_body(points), headers={"content-type": NPZ})
        created.raise_for_status()
        points_id = created.json()["id"]
        started = time.perf_counter()
        fitted = client.post(f"/v1/points/{points_id}/models", json=MODEL)
        fitted.raise_for_status()
        record["fit_ms"] = (time.perf_counter() - started) * 1e3
        record["num_clusters"] = fitted.json()["num_clusters"]
        url = f"/v1/points/{points_id}/models/{fitted.json()['id']}/predict"
        params = {"membership": "true"} if args.membership else {}

        def sender(body: bytes, kind: str, accept: str, timings: Timings) -> Any:
            headers = {"content-type": kind, "accept": accept}

            def send_on(on: Any) -> None:
                response = on.post(url, content=body, headers=headers, params=params)
                response.raise_for_status()
                _ = response.content
                timings.add(response.headers.get("server-timing", ""))

            return send_on

        small_json = json.dumps({"points": small.tolist()}).encode()
        large_npz = npz_body(large)
        for name, body, kind, count in (
            ("small", npz_body(small), NPZ, args.requests),
            ("small_json", small_json, "application/json", args.requests),
            ("large", large_npz, NPZ, 1),
        ):
            warm = sender(body, kind, kind, Timings())
            _latencies(lambda send=warm: send(client), WARM_UP_REQUESTS if name != "large" else 1)
            timings = Timings()
            send_on = sender(body, kind, kind, timings)
            p50s, p99s, medians, all_times = [], [], [], []
            for _ in range(args.repeats):
                times = _latencies(lambda send=send_on: send(client), count)
                all_times += times
                p50s.append(percentile(times, 50))
                p99s.append(percentile(times, 99))
                medians.append(statistics.median(times))
            batch = small_n if name.startswith("small") else large_n
            means = timings.means()
            entry = {
                "points_per_request": batch,
                "p50_ms": statistics.median(p50s),
                "p99_ms": statistics.median(p99s),
                "p50_ms_per_repeat": p50s,
                "p99_ms_per_repeat": p99s,
                "requests_per_repeat": count,
                "server_timing_ms": means,
                "outside_ms": statistics.fmean(all_times) - sum(means.get(p, 0.0) for p in ROUTE_PARTS),
            }
            entry["points_per_s"] = batch / (statistics.median(medians) / 1e3)
            record[name] = entry
        record["large_concurrent"] = {}
        for clients_n in concurrency:
            timings = Timings()
            send_on = sender(large_npz, NPZ, NPZ, timings)
            clients = [httpx.Client(base_url=base, timeout=600.0) for _ in range(clients_n)]
            try:
                for c in clients:  # each connection opened and warm
                    send_on(c)
                timings.samples.clear()
                each = args.large_requests
                rates = [concurrent_rate(send_on, clients, each, large_n) for _ in range(args.repeats)]
            finally:
                for c in clients:
                    c.close()
            record["large_concurrent"][str(clients_n)] = {
                "clients": clients_n,
                "requests_per_client": args.large_requests,
                "points_per_request": large_n,
                "points_per_s": statistics.median(rates),
                "points_per_s_per_repeat": rates,
                "server_timing_ms": timings.means(),
            }
    best = max(record["large_concurrent"].values(), key=lambda e: e["points_per_s"])
    record["targets"] = {
        "small_p50_ms_at_most": 5.0,
        "large_points_per_s_at_least": 1e7,
        "small_p50_met": record["small"]["p50_ms"] <= 5.0,
        "large_best_concurrency": best["clients"],
        "large_best_points_per_s": best["points_per_s"],
        "large_throughput_met": best["points_per_s"] >= 1e7,
    }
    text = json.dumps(record, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return record


if __name__ == "__main__":
    main()
