"""``python -m bench.predict_http --smoke`` runs against a live CPU service."""

from __future__ import annotations

import json
from pathlib import Path

from bench import predict_http


def test_smoke_run_measures_small_and_large_batches_and_concurrent_clients(tmp_path: Path) -> None:
    out = tmp_path / "predict_http.json"
    record = predict_http.main(["--smoke", "--out", str(out)])
    assert record["backend"] == "cpu" and record["num_clusters"] >= 1
    for name in ("small", "small_json", "large"):
        entry = record[name]
        assert len(entry["p50_ms_per_repeat"]) == 2 and 0 < entry["p50_ms"] <= entry["p99_ms"]
        assert entry["points_per_s"] > 0
        assert {"lookup", "receive", "worker", "send", "w-predict", "reply", "encode"} <= set(
            entry["server_timing_ms"]
        )
    assert set(record["large_concurrent"]) == {"1", "2"}  # --smoke's concurrencies
    for clients, entry in record["large_concurrent"].items():
        assert entry["clients"] == int(clients) and len(entry["points_per_s_per_repeat"]) == 2
        assert entry["points_per_s"] > 0 and entry["server_timing_ms"]["w-predict"] > 0
    best = max(record["large_concurrent"].values(), key=lambda e: e["points_per_s"])
    assert record["targets"]["large_best_concurrency"] == best["clients"]
    assert json.loads(out.read_text())["large"]["points_per_request"] == 1000
