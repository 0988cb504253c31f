"""Schemathesis against a real CPU server: every default check, over the app's OpenAPI document.

The run is bounded (``MST_SCHEMATHESIS_EXAMPLES`` cases per operation, 50 by default, with a fixed
seed) so it stays within half a minute or so on a 2-core CI machine (100 took 66 s). The longer QA
run of the benchmark hosts raises the count and draws a fresh seed::

    MST_SCHEMATHESIS_EXAMPLES=2000 MST_SCHEMATHESIS_SEED=random python -m pytest -s \\
        tests/service/test_schemathesis.py

The server runs with an API key, as the document's ``bearerAuth`` security scheme says requests
need one: schemathesis sends it (``--header``) and its auth checks (ST401: a request without the
key, or with a wrong one, must be refused) have something to check. An open server (no keys, the
default) cannot pass those checks by design; every other behaviour is the same either way.

Besides schemathesis' own verdict (exit status 0: no check failed), the server's metrics must count
no 5xx answer, its log no traceback, and a normal upload and MST job must still work afterwards.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ServerFactory
from .live import REPO, LiveServer

CONFIG = Path(__file__).with_name("schemathesis.toml")
OPENAPI = REPO / "openapi" / "openapi.json"
#: a sample of the request counter; its labels hold route templates, braces included
_REQUESTS = re.compile(r'^mst_http_requests_total\{.*\bstatus="(\d+)".*\} ([0-9.e+]+)$', re.M)


def answers_by_status(server: LiveServer) -> dict[int, int]:
    """The server's own count of answered requests, by status code (from /metrics)."""
    counts: dict[int, int] = {}
    for status, value in _REQUESTS.findall(server.client.get("/metrics").text):
        counts[int(status)] = counts.get(int(status), 0) + int(float(value))
    return counts


def still_serves(server: LiveServer) -> None:
    """A normal upload and MST job still work (the triangle 0-1-2 plus the heavy edge 0-2)."""
    graph = server.upload_npz([0, 1, 0], [1, 2, 2], [1, 2, 5])
    job = server.submit(graph["id"], wait=30).json()
    assert job["status"] == "succeeded", job
    assert job["result"]["total_weight"] == 3 and job["result"]["num_components"] == 1


KEY = "schemathesis-" + "0123456789abcdef" * 2  # a test key (the service wants 16+ characters)
EXAMPLES = os.environ.get("MST_SCHEMATHESIS_EXAMPLES", "50")


@pytest.mark.slow
@pytest.mark.timeout(300 + 3 * int(EXAMPLES))  # the longer QA runs take their time
def test_schemathesis_finds_nothing(server_factory: ServerFactory, tmp_path: Path) -> None:
    examples = EXAMPLES
    seed = os.environ.get("MST_SCHEMATHESIS_SEED", "20261122")
    server = server_factory(MST_MAX_WAIT_S="2", MST_API_KEYS=KEY)
    server.client.headers["Authorization"] = f"Bearer {KEY}"
    assert server.client.get("/v1/graphs", headers={"Authorization": ""}).status_code == 401
    before = answers_by_status(server)
    command = [
        sys.executable, "-m", "schemathesis.cli",
        "--config-file", str(CONFIG),
        "run", str(OPENAPI),
        "--url", server.url,
        "--header", f"Authorization: Bearer {KEY}",
        "--max-examples", examples,
        "--workers", "1",
        "--no-color",
        "--request-timeout", "30",
    ]  # fmt: skip
    if seed != "random":
        command += ["--seed", seed]
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    after = answers_by_status(server)
    answered = {s: after.get(s, 0) - before.get(s, 0) for s in after}
    requests = sum(answered.values())
    server_errors = {s: n for s, n in answered.items() if s >= 500 and n}
    summary = f"{requests} requests, by status {dict(sorted(answered.items()))}"
    print(f"\nschemathesis: {summary}\n{run.stdout[-1500:]}")
    output = f"{run.stdout[-20000:]}\n{run.stderr[-5000:]}"
    assert run.returncode == 0, f"schemathesis failed ({summary}):\n{output}"
    assert requests > 200, summary  # it really ran
    assert not server_errors, summary
    assert "Traceback" not in server.log(), server.log()[-5000:]
    still_serves(server)
