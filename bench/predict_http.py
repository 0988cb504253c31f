"""Predictions over HTTP against a resident HDBSCAN* model (issue 24's HTTP target).

    python -m bench.predict_http [--backend auto|gpu|cpu] [--fit-n 1e6] [--dims 3] [--small 1000]
        [--large 1e5] [--requests 200] [--repeats 5] [--membership] [--smoke] [--out FILE.json]

A live ``python -m service`` holds a point set of ``--fit-n`` points (Gaussian blobs,
as :mod:`bench.hdbscan_predict` draws them) and a model fitted on it (``min_cluster_size`` 50,
``min_samples`` 5); one keep-alive client then sends:

* ``small``: ``--requests`` predictions of ``--small`` new points each, one after another, as an
  npz body answered as an npz (``Accept: application/octet-stream``), and again as JSON in and
  out (``small_json``); each repeat's p50 and p99 latency, the figures the median over
  ``--repeats`` repeats. Target: p50 <= 5 ms for 1,000 points.
* ``large``: ``--repeats`` predictions of ``--large`` points each (npz in and out); the median
  time of one and the points predicted per second it makes. Target: >= 10^7 points/s in
  batches of 10^5.

Latencies are the client's (request sent to answer read), warm: a few requests go first.
``--smoke``: tiny sizes on the CPU backend. Results as JSON (``--out``).
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

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


def _latencies(send: Any, count: int) -> list[float]:
    out = []
    for _ in range(count):
        started = time.perf_counter()
        send()
        out.append((time.perf_counter() - started) * 1e3)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.predict_http", description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("auto", "gpu", "cpu"), default="auto")
    parser.add_argument("--fit-n", type=float, default=1e6)
    parser.add_argument("--dims", type=int, default=3)
    parser.add_argument("--small", type=float, default=1000)
    parser.add_argument("--large", type=float, default=1e5)
    parser.add_argument("--requests", type=int, default=200, help="timed small requests per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--membership", action="store_true", help="ask for membership vectors too")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU backend")
    parser.add_argument("--log", type=Path, default=None, help="the server's log file")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.smoke:
        args.backend, args.fit_n, args.small, args.large = "cpu", 2000, 100, 1000
        args.requests, args.repeats = 5, 2
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

        def sender(body: bytes, kind: str, accept: str) -> Any:
            headers = {"content-type": kind, "accept": accept}

            def send() -> None:
                response = client.post(url, content=body, headers=headers, params=params)
                response.raise_for_status()
                _ = response.content

            return send

        small_json = json.dumps({"points": small.tolist()}).encode()
        for name, send, count in (
            ("small", sender(npz_body(small), NPZ, NPZ), args.requests),
            ("small_json", sender(small_json, "application/json", "application/json"), args.requests),
            ("large", sender(npz_body(large), NPZ, NPZ), 1),
        ):
            _latencies(send, WARM_UP_REQUESTS if name != "large" else 1)
            p50s, p99s, medians = [], [], []
            for _ in range(args.repeats):
                times = _latencies(send, count)
                p50s.append(percentile(times, 50))
                p99s.append(percentile(times, 99))
                medians.append(statistics.median(times))
            batch = small_n if name.startswith("small") else large_n
            entry = {
                "points_per_request": batch,
                "p50_ms": statistics.median(p50s),
                "p99_ms": statistics.median(p99s),
                "p50_ms_per_repeat": p50s,
                "p99_ms_per_repeat": p99s,
                "requests_per_repeat": count,
            }
            entry["points_per_s"] = batch / (statistics.median(medians) / 1e3)
            record[name] = entry
    record["targets"] = {
        "small_p50_ms_at_most": 5.0,
        "large_points_per_s_at_least": 1e7,
        "small_p50_met": record["small"]["p50_ms"] <= 5.0,
        "large_throughput_met": record["large"]["points_per_s"] >= 1e7,
    }
    text = json.dumps(record, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return record


if __name__ == "__main__":
    main()
