"""The point-set benchmark's quick suite runs on a CPU and writes its records."""

from __future__ import annotations

import json
from pathlib import Path

from bench import points


def test_quick_points_suite(tmp_path: Path, monkeypatch) -> None:
    small = {"sizes": [800], "dims": [2], "min_samples": [5], "peer_max": 800}
    monkeypatch.setitem(points.SUITES, "quick", small)
    out = tmp_path / "points.json"
    assert points.main(["--suite", "quick", "--backend", "cpu", "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert {r["task"] for r in records} == {"emst", "hdbscan"}
    for r in records:
        assert r["mfeatures_per_s"] > 0 and r["backend"] == "cpu" and "rounds_ms" in r["split_ms"]
    assert all("sklearn" in r["peers"] for r in records if r["task"] == "hdbscan")
