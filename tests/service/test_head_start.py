"""Start-up (issue 22): worker 0 is spawned before the API is built, and ``/readyz`` waits for its
warm-up.

Documented behaviour (service/runtime/pool/head_start.py, service/__main__.py):

* ``python -m service`` spawns worker 0 (and the GPU probe where the plan needs one) as soon as it
  has read its settings, builds the app meanwhile, and the pool adopts that process: it is the one
  that becomes ready, no second one is started;
* ``/readyz`` is 503 until that worker has warmed up (its tasks and kernels), then 200, and the
  worker reports the backend ``MST_BACKEND`` asks for;
* what the API process imports before it spawns worker 0 (the main module, the settings, the head
  start) and a worker's entry point import nothing heavy (no web framework, no NumPy, no engine).

A worker is held in its warm-up by a test-only hook (``gate_hook/sitecustomize.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from .conftest import SHARED_ENV
from .live import REPO, LiveServer

GATE_HOOK = str(Path(__file__).resolve().parent / "gate_hook")

HEAVY = ("fastapi", "starlette", "uvicorn", "numpy", "gpu_core", "cupy", "numba")


def _imported(*modules: str) -> list[str]:
    code = f"import json, sys; import {', '.join(modules)}; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    imported: list[str] = json.loads(done.stdout)
    return imported


def test_worker_0_is_spawned_before_anything_heavy_is_imported() -> None:
    """What the API process imports before it spawns worker 0 (its settings, the head start), and
    a spawned worker before its entry point runs: no web framework, no NumPy, no engine."""
    before_spawn = _imported("service.__main__", "service.settings", "service.runtime.supervisor.supervisor")
    assert [m for m in before_spawn if m.split(".")[0] in HEAVY] == []
    entry = _imported("service.runtime.worker.entry")
    assert [m for m in entry if m.split(".")[0] in (*HEAVY, "pydantic")] == []


def test_readyz_waits_for_the_warm_up_of_worker_0_started_before_the_api(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    env = {
        **SHARED_ENV,
        "MST_BACKEND": "cpu",
        "MST_LOG_LEVEL": "info",
        "MST_TEST_WARM_UP_GATE": str(gate),
        "MST_WARM_UP": "all",  # the default, whose warm-up the gate holds
        "PYTHONPATH": os.pathsep.join(p for p in (GATE_HOOK, os.environ.get("PYTHONPATH")) if p),
    }
    server = LiveServer(tmp_path / "data", env, tmp_path / "server.log").start(wait=False)
    try:
        deadline = time.monotonic() + 60
        while not (waiting := sorted(tmp_path.glob("gate.*.waiting"))):
            assert time.monotonic() < deadline, f"no worker reached its warm-up:\n{server.log()}"
            assert server.proc is not None and server.proc.poll() is None, server.log()
            time.sleep(0.01)
        warming_pid = int(waiting[0].name.split(".")[1])
        while True:  # the API comes up while the worker waits in its warm-up
            try:
                if server.client.get("/healthz").status_code == 200:
                    break
            except Exception:
                pass
            assert time.monotonic() < deadline, f"the API did not come up:\n{server.log()}"
            time.sleep(0.01)
        for _ in range(20):  # not ready while the worker warms up
            response = server.client.get("/readyz")
            assert response.status_code == 503, response.text
            [worker] = response.json()["workers"]
            assert worker["state"] == "starting" and worker["pid"] == warming_pid, worker
            time.sleep(0.02)
        gate.touch()
        body = server.wait_ready()
        [worker] = body["workers"]
        # the process spawned before the API was built is the one that became ready: adopted, once
        assert worker["pid"] == warming_pid, worker
        assert worker["restarts"] == 0 and [p.name for p in waiting] == [waiting[0].name], (worker, waiting)
        assert (worker["backend"], worker["device"], worker["warm_up"]) == ("cpu", "cpu", {"mode": "cpu"})
        steps = worker["startup_ms"]
        assert {"process", "modules", "imports", "warm_up_tasks", "warm_up", "probe"} <= steps.keys(), steps
        assert server.log().count("worker 0 started") == 1, server.log()
    finally:
        server.stop()
