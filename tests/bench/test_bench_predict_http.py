"""``python -m bench.predict_http --smoke`` runs against a live CPU service."""

from __future__ import annotations

import json
from pathlib import Path

from bench import predict_http


def test_smoke_run_measures_small_and_large_batches(tmp_path: Path) -> None:
    out = tmp_path / "predict_http.json"
    record = predict_http.main(["--smoke", "--out", str(out)])
    assert record["backend"] == "cpu" and record["num_clusters"] >= 1
    for name in ("small", "small_json", "large"):
        entry = record[name]
        assert len(entry["p50_ms_per_repeat"]) == 2 and 0 < entry["p50_ms"] <= entry["p99_ms"]
        assert entry["points_per_s"] > 0
    assert json.loads(out.read_text())["large"]["points_per_request"] == 1000
