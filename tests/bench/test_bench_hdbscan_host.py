"""``python -m bench.hdbscan_host`` runs on a CPU, caches its tree and compares both paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import hdbscan_host

pytest.importorskip("numba")


def test_host_benchmark_runs_and_the_paths_agree(tmp_path: Path) -> None:
    out = tmp_path / "host.json"
    argv = ["--n", "3000", "--repeats", "2", "--numpy", "--no-one-time", "--cache", str(tmp_path)]
    record = hdbscan_host.main([*argv, "--out", str(out)])
    assert record["identical"] is True and record["clusters"] >= 2
    assert json.loads(out.read_text())["compiled"]["host_ms"] == record["compiled"]["host_ms"] > 0
    assert {"linkage_ms", "selection_ms"} <= record["numpy"].keys()
    assert len(list(tmp_path.glob("hdbscan-host-tree-*.npz"))) == 1  # the tree, cached
    again = hdbscan_host.main(["--n", "3000", "--repeats", "1", "--no-one-time", "--cache", str(tmp_path)])
    assert again["clusters"] == record["clusters"]
