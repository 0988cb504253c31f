"""Smoke test of the scaling benchmark (bench/scaling.py) against real CPU services: each shape
starts its own service with that many API processes and workers, every forest is checked, and the
server's CPU time per job is told by process role (not a timing assertion)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.scaling import clients_cpus, main, parse_cpus, parse_shapes


def test_parse_shapes() -> None:
    assert parse_shapes("1x1, 4x2,8") == [(1, 1), (4, 2), (8, 1)]
    with pytest.raises(ValueError):
        parse_shapes("twox1")


def test_clients_keep_off_the_service_cpus_or_share_them_all() -> None:
    import os

    mine = set(os.sched_getaffinity(0))
    assert clients_cpus(None) == set()
    assert clients_cpus(mine) == set()  # the service on every CPU: the clients share them
    if len(mine) > 1:
        first = min(mine)
        assert clients_cpus({first}) == mine - {first}


def test_parse_cpus() -> None:
    assert parse_cpus("0-3,8") == {0, 1, 2, 3, 8}
    assert parse_cpus("5") == {5}


def test_scaling_benchmark_runs_each_shape(tmp_path: Path) -> None:
    out = tmp_path / "scaling.json"
    record = main(
        [
            "--backend", "cpu", "--shapes", "1x1,2x2", "--scale", "8", "--graphs", "4",
            "--clients", "4", "--client-processes", "2", "--duration", "0.7", "--runs", "2",
            "--server-cpus", "0",
            "--predict", "--predict-n", "2000", "--predict-points", "50", "--predict-clients", "2",
            "--out", str(out),
        ]
    )  # fmt: skip
    assert json.loads(out.read_text()) == record
    assert record["server_cpus"] == 1
    shapes = record["shapes"]
    assert [(s["api_processes"], s.get("cpu_workers")) for s in shapes] == [(1, 1), (2, 2)], shapes
    for shape in shapes:
        assert "error" not in shape, shape["error"]
        assert shape["workers"] == shape["cpu_workers"]
        assert shape["worker_cpus"] == [1]  # --server-cpus reached the service's children
        assert len(shape["runs"]) == 2
        assert shape["errors"] == 0 and shape["mismatches"] == 0
        assert shape["median_per_s"] > 0
        assert shape["predict_median_per_s"] > 0 and shape["predict_one_client_p50_ms"] > 0
        assert len(shape["predict"]) == 2 and all(p["errors"] == 0 for p in shape["predict"])
        for run in shape["runs"]:
            assert run["completed"] > 0
            roles = {"supervisor", "api", "worker"} if shape["api_processes"] > 1 else {"api", "worker"}
            assert roles <= set(run["cpu_ms_per_job"]), run["cpu_ms_per_job"]
            assert run["cpu_ms_per_job"]["worker"] > 0 and run["cpu_ms_per_job"]["api"] > 0


def test_predictions_only(tmp_path: Path) -> None:
    record = main(
        [
            "--backend", "cpu", "--shapes", "2x1", "--graphs", "0", "--duration", "0.5", "--runs", "1",
            "--predict", "--predict-n", "1000", "--predict-points", "20", "--predict-clients", "2",
            "--out", str(tmp_path / "p.json"),
        ]
    )  # fmt: skip
    (shape,) = record["shapes"]
    assert "error" not in shape, shape["error"]
    assert shape["runs"] == [] and "median_per_s" not in shape
    assert shape["predict_median_per_s"] > 0


def test_the_record_carries_the_disk_probe(tmp_path: Path) -> None:
    record = main(
        [
            "--backend", "cpu", "--shapes", "1x1", "--scale", "8", "--graphs", "2", "--clients", "2",
            "--client-processes", "1", "--duration", "0.3", "--runs", "1", "--disk-probe-mb", "8",
            "--out", str(tmp_path / "s.json"),
        ]
    )  # fmt: skip
    disk = record["disk_write"]
    assert disk["bytes"] == 8 << 20 and disk["mb_per_s"] > 0 and disk["writers"] == 4
    assert "gpu_activity" not in record["shapes"][0]["runs"][0]  # the CPU backend: no GPU sampled


def test_results_in_a_folder_of_their_own(tmp_path: Path) -> None:
    results = tmp_path / "results"
    record = main(
        [
            "--backend", "cpu", "--shapes", "1x1", "--scale", "8", "--graphs", "2", "--clients", "2",
            "--client-processes", "1", "--duration", "0.5", "--runs", "1", "--disk-probe-mb", "0",
            "--result-dir", str(results), "--out", str(tmp_path / "r.json"),
        ]
    )  # fmt: skip
    (shape,) = record["shapes"]
    assert "error" not in shape, shape["error"]
    assert shape["errors"] == 0 and shape["mismatches"] == 0 and shape["mps"] is False
    assert record["result_dir"] == str(results)
    assert (
        len(list(results.glob("*.npz"))) >= shape["runs"][0]["completed"] > 0
    )  # the jobs' results went there
