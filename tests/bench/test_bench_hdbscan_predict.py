"""``python -m bench.hdbscan_predict --smoke`` runs on a CPU, against the hdbscan library too."""

from __future__ import annotations

import json
from pathlib import Path

from bench import hdbscan_predict


def test_smoke_run_times_all_three_parts(tmp_path: Path) -> None:
    out = tmp_path / "predict.json"
    record = hdbscan_predict.main(["--smoke", "--out", str(out)])
    assert record["backend"] == "cpu"
    assert record["predict"]["ms"] > 0 and record["predict"]["labels"] >= 2
    assert record["predict_vs_library"]["library_ms"] > 0 and record["predict_vs_library"]["speedup"] > 0
    assert record["membership"]["speedup_per_point"] > 0
    assert json.loads(out.read_text())["predict"]["queries"] == 500
