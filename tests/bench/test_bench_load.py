"""Smoke test of the load benchmark (``python -m bench --suite quick --only load``), reduced.

Not a timing assertion: every route was exercised at every client count, nothing failed
(no transport error, no 5xx, no unexpected status), the API's memory was sampled, and the
JSON and the Markdown table were written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.server import service_present

pytestmark = pytest.mark.skipif(not service_present(), reason="the service package is not importable")


def test_quick_load_run(tmp_path: Path) -> None:
    argv = ["--suite", "quick", "--only", "load", "--out", str(tmp_path), "--no-plot", "--fresh"]
    rc = main([*argv, "--load-clients", "1,4", "--load-duration", "1.5"])
    results = json.loads((tmp_path / "results.json").read_text())
    record = results["benchmarks"]["load"]
    assert rc == 0 and record["status"] == "ok", record.get("error")
    assert record["type"] == "load" and [lv["clients"] for lv in record["levels"]] == [1, 4]
    for level in record["levels"]:
        assert level["errors"] == 0 and level["server_errors"] == 0, level["error_samples"]
        routes = level["routes"]
        assert {"status", "small_job", "big_result", "upload", "delete", "big_job"} <= set(routes), routes
        for stats in routes.values():
            assert stats["n"] >= 1 and 0 < stats["p50_ms"] <= stats["p99_ms"] <= stats["max_ms"]
        assert level["rss_mb"]["start"] and level["rss_mb"]["max"] >= level["rss_mb"]["start"]
    assert record["checks"]["no_errors"] and record["checks"]["no_5xx"]
    assert "## Load" in (tmp_path / "results.md").read_text()
