"""Smoke test of bench/writer_gil.py: a row per switch interval, files written at each."""

from __future__ import annotations

from bench.writer_gil import main


def test_a_row_per_interval_with_files_written() -> None:
    rows = main(["--seconds", "0.3", "--intervals", "5,0.2"])
    assert [r["switch_interval_ms"] for r in rows] == [5.0, 0.2]
    assert all(r["files"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"] for r in rows)
