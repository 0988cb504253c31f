"""The point-set benchmark's quick suite runs on a CPU and writes its records."""

from __future__ import annotations

import json
from pathlib import Path

from bench import points


def test_quick_points_suite(tmp_path: Path, monkeypatch) -> None:
    small = {
        "sizes": [800],
        "dims": [2],
        "min_samples": [5],
        "peer_max": 800,
        "repeats": 1,
        "peers": ("sklearn",),
    }
    monkeypatch.setitem(points.SUITES, "quick", small)
    out = tmp_path / "points.json"
    assert points.main(["--suite", "quick", "--backend", "cpu", "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert {r["task"] for r in records} == {"emst", "hdbscan"}
    for r in records:
        assert r["mfeatures_per_s"] > 0 and r["backend"] == "cpu" and "rounds_ms" in r["split_ms"]
    for r in (r for r in records if r["task"] == "hdbscan"):
        peer = r["peers"]["sklearn"]
        assert peer["status"] == "ok" and peer["seconds"] > 0 and peer["speedup"] > 0
        assert 0.5 < peer["ari"] <= 1.0
    table = points.table({"records": records})
    assert table.count("| uniform |") == 2 and "sklearn" in table  # an EMST row and a peer row


def test_points_part_of_python_m_bench(tmp_path: Path, monkeypatch) -> None:
    from bench.__main__ import main

    small = {"sizes": [600], "dims": [3], "min_samples": [2], "peer_max": 0, "repeats": 1, "peers": ()}
    monkeypatch.setitem(points.SUITES, "quick", small)
    assert main(["--suite", "quick", "--only", "points", "--out", str(tmp_path), "--no-plot"]) == 0
    record = json.loads((tmp_path / "results.json").read_text())["benchmarks"]["points"]
    assert record["type"] == "points" and record["status"] == "ok"
    got = [(r["task"], r["points"]) for r in record["records"]]
    assert got == [("emst", "uniform"), ("hdbscan", "uniform"), ("emst", "blobs"), ("hdbscan", "blobs")]
    md = (tmp_path / "results.md").read_text()
    assert "## Point sets (EMST and HDBSCAN*)" in md and "| blobs | 6e+02 | 3 |" in md


def test_point_index_benchmark(tmp_path: Path) -> None:
    from bench import point_index

    out = tmp_path / "index.json"
    args = ["--n", "1500", "--backend", "cpu", "--min-samples", "5,16", "--repeats", "1", "--out", str(out)]
    assert point_index.main(args) == 0
    rec = json.loads(out.read_text())
    assert rec["backend"] == "cpu" and rec["min_samples"] == [5, 16] and rec["index_bytes"] > 0
    assert rec["index_build_s"] > 0 and all(rec["reused_s"][k] > 0 for k in ("5", "16"))
    assert rec["saved_s"] == rec["fresh_total_s"] - rec["reused_total_s"]
