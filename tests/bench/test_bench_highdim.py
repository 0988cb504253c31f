"""``python -m bench.highdim --cpu`` runs every part on a CPU: the floor, HDBSCAN*, peers, crossover."""

from __future__ import annotations

import json
from pathlib import Path

from bench import highdim


def test_cpu_run_measures_the_floor_the_peers_and_the_crossover(tmp_path: Path) -> None:
    out = tmp_path / "highdim.json"
    record = highdim.main(["--cpu", "--out", str(out)])
    assert record["backend"] == "cpu"
    part = record["floor_and_hdbscan"]
    assert part["floor_ms"] > 0 and part["hdbscan_ms"] > 0 and part["gemm_ms"] > 0
    assert part["ratio"] == part["hdbscan_ms"] / part["floor_ms"] and part["clusters"] >= 2
    assert part["tree_timings_ms"]["rounds"] >= 1
    peers = record["peers"]
    assert peers["ours_ms"] > 0
    assert peers["hdbscan"]["adjusted_rand"] > 0.9  # the library agrees (it is installed with the tests)
    rows = record["crossover"]["rows"]
    assert [r["dims"] for r in rows] == [8, 24] and all(r["brute_k10_ms"] > 0 for r in rows)
    assert json.loads(out.read_text())["floor_and_hdbscan"]["dims"] == 64


def test_the_data_are_embeddings_on_the_sphere() -> None:
    points = highdim.embeddings(1000, 32)
    assert points.shape == (1000, 32) and points.dtype.name == "float32"
    norms = sorted(float(x) for x in (points.astype(float) ** 2).sum(axis=1) ** 0.5)
    assert 0.8 < norms[len(norms) // 2] < 1.2
