"""``python -m bench.hdbscan_device --cpu`` runs the device path's driver with NumPy and agrees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import hdbscan_device

pytest.importorskip("numba")


def test_device_benchmark_runs_on_the_cpu_and_agrees(tmp_path: Path) -> None:
    out = tmp_path / "device.json"
    argv = ["--sizes", "3000", "--dims", "2", "--kinds", "uniform,blobs", "--repeats", "1", "--cpu"]
    records = hdbscan_device.main([*argv, "--out", str(out)])
    assert len(records) == 2 and all(r["identical"] is True for r in records)
    assert all(r["selected_clusters"] >= 2 and r["labels_from_dendrogram_ms"] > 0 for r in records)
    # with NumPy no kernels run: the selection by heavy paths is timed on the device only
    assert set(records[0]["parts"]) == {"condense_ms", "stabilities_ms", "host_selection_ms", "labels_ms"}
    assert json.loads(out.read_text())[0]["clusters"] == records[0]["clusters"]
