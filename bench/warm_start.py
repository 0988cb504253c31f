"""``python -m bench.warm_start``: a worker's start, its warm-up's parts beside its tasks and after them.

    python -m bench.warm_start [--backend gpu|cpu] [--repeats 5] [--out FILE]

(default out: bench/results/restart/<backend>-warm-start.json)

Each run is a fresh interpreter that starts a worker as the service does
(``service.runtime.worker.startup.start``: the engine's imports, the device, the warm-up of its
tasks and kernels, the probe graph), with ``beside`` on (the quick sweep's parts on a thread of
their own while the tasks run, the worker's default) or off (the parts after the tasks), the two
alternating, ``--repeats`` runs each; a first run, not counted, makes sure the kernel cache holds
a warm-up manifest (a full sweep where there is none). Printed: the medians of ``ready_ms`` (the
interpreter's start to the ready info: beside, the parts go on after it), ``total_ms`` (to the
last part loaded) and each step of ``startup_ms``, and each run's warm-up report (``mode`` must be ``quick``,
``compiled`` 0, ``modules`` the same both ways: what the quick sweep loads, it loads either way).
On the CPU backend there is no sweep (``mode`` cpu): both ways are the same.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from .server import REPO_ROOT

SCRIPT = r"""
import json, sys, tempfile, time
started = time.perf_counter()
from service.runtime.worker.protocol import WorkerConfig
from service.runtime.worker.startup import start
from service.runtime.worker.state import Worker

worker = Worker(WorkerConfig(0, sys.argv[1], None, tempfile.mkdtemp(), 10**8, 0.5))
info = start(worker, beside=sys.argv[2] == "beside")
ready_ms = (time.perf_counter() - started) * 1e3
worker.warmed.wait(1200)  # beside: the kernels' parts go on after ready
total_ms = (time.perf_counter() - started) * 1e3
warm_up = {**worker.warm_up, "at_ready": info["warm_up"]}
print(json.dumps({"startup_ms": info["startup_ms"], "warm_up": warm_up,
                  "ready_ms": round(ready_ms, 3), "total_ms": round(total_ms, 3)}))
"""


def _run(backend: str, way: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, backend, way],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the worker's start failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.warm_start", description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="gpu", choices=("gpu", "cpu"))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", type=Path, help="the JSON record (bench/results/restart/BACKEND-warm-start.json)")
    args = p.parse_args(argv)
    first = _run(args.backend, "after")
    print(f"first start (makes sure there is a manifest, not counted): {first['warm_up']}", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {"beside": [], "after": []}
    for i in range(args.repeats):
        for way in ("beside", "after") if i % 2 == 0 else ("after", "beside"):
            run = _run(args.backend, way)
            runs[way].append(run)
            print(f"{way} {i}: total {run['total_ms']} ms, {run['startup_ms']}, {run['warm_up']}", flush=True)
    summary: dict[str, Any] = {}
    for way, done in runs.items():
        keys = done[0]["startup_ms"]
        steps = {k: statistics.median(r["startup_ms"].get(k, 0.0) for r in done) for k in keys}
        total = statistics.median(r["total_ms"] for r in done)
        ready = statistics.median(r["ready_ms"] for r in done)
        summary[way] = {
            "ready_ms": round(ready, 1), "total_ms": round(total, 1),
            "startup_ms": {k: round(v, 1) for k, v in steps.items()},
        }  # fmt: skip
        modes = sorted({str(r["warm_up"].get("mode")) for r in done})
        compiled = sorted({r["warm_up"].get("compiled") for r in done}, key=str)
        modules = sorted({r["warm_up"].get("modules") for r in done}, key=str)
        print(
            f"\n{way}: median ready {ready:.0f} ms, warm {total:.0f} ms (interpreter to ready info, to the "
            f"last part loaded); steps (ms) "
            f"{summary[way]['startup_ms']}; modes {modes}, compiled {compiled}, modules {modules}"
        )
    out = args.out or REPO_ROOT / "bench" / "results" / "restart" / f"{args.backend}-warm-start.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {"argv": sys.argv[1:], "first": first, "runs": runs, "median": summary}
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\nwritten: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
