"""bench/server.py: a benchmark's server is measured once it is ready and its standby workers are
warm (a standby warms its kernels on the worker's GPU and cores for seconds after ready)."""

from __future__ import annotations

from pathlib import Path

import httpx

from bench.server import started_server


def test_a_started_server_has_its_standby_warm(tmp_path: Path) -> None:
    env = {"MST_STANDBY_WORKER": "on", "MST_CPU_WORKERS": "1"}
    with started_server("cpu", tmp_path / "server.log", 120.0, env) as (base, _):
        workers = httpx.get(f"{base}/readyz", timeout=10).json()["workers"]
    assert workers and all((w["standby"] or {}).get("state") == "warm" for w in workers), workers
