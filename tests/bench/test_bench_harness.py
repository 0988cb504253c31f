"""The engine benchmark's parts, the GPU path included (on a stand-in for CuPy), and the report."""

from __future__ import annotations

import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpu_core
from bench import engine, report
from bench.engine import EngineOptions, measure_scipy, peer_edges, run_engine_benchmark, totals_agree
from bench.generators import Edges, GraphSpec
from bench.suites import benchmark_names, select
from bench.timing import percentile, repeat, summarize


def test_summarize_and_percentile() -> None:
    s = summarize([3.0, 1.0, 2.0, 10.0])
    assert s["n"] == 4 and s["median"] == 2.5 and s["min"] == 1.0 and s["max"] == 10.0
    assert s["runs"] == [3.0, 1.0, 2.0, 10.0]
    assert percentile([1, 2, 3, 4, 5], 50) == 3 and percentile([1, 2], 100) == 2
    assert summarize([]) == {"n": 0}


def test_repeat_stops_on_budget() -> None:
    def nap() -> int:
        time.sleep(0.02)
        return 7

    times, result = repeat(nap, repeats=100, budget_s=0.05, min_runs=2)
    assert result == 7 and 2 <= len(times) < 10


def test_select() -> None:
    assert [i.name for i in select("full", ["rmat-16"])] == ["rmat-16"]
    assert {i.name for i in select("full", ["rmat-16*"])} == {
        "rmat-16",
        "rmat-16-float",
        "rmat-16-ties",
        "rmat-16-raw",
    }
    assert len(select("quick", None)) == len(benchmark_names("quick"))
    with pytest.raises(ValueError, match="matches no benchmark"):
        select("quick", ["nope"])


def test_full_suite_covers_the_issue_2_table() -> None:
    refs = {i.name: i.reference for i in select("full", None) if isinstance(i, GraphSpec) and i.reference}
    assert sorted(refs) == sorted(["grid-1024", "delaunay-20", "rmat-16", "rmat-22", "random-23", "kron-21"])


def test_totals_agree() -> None:
    assert totals_agree(10, 10.0, is_float=False)
    assert not totals_agree(10, 11.0, is_float=False)
    assert totals_agree(1.0, 1.0 + 1e-12, is_float=True)
    assert not totals_agree(1.0, 1.0001, is_float=True)


def test_peers_on_a_multigraph_with_zero_and_negative_weights() -> None:
    # parallel edges (0-1 twice, 1-2 reversed), a self-loop, weights <= 0 (SciPy drops zeros)
    src = np.array([0, 1, 2, 2, 3, 0, 3], dtype=np.int32)
    dst = np.array([1, 0, 1, 2, 0, 3, 1], dtype=np.int32)
    weight = np.array([5, -2, 0, 7, 3, -1, 4], dtype=np.int64)
    edges = Edges(src, dst, weight, 5, {"simple": False})
    pe = peer_edges(edges)
    assert pe.changed and pe.src.size == 4  # 0-1 (min -2), 1-2, 0-3 (min -1), 1-3
    assert dict(zip(zip(pe.src.tolist(), pe.dst.tolist(), strict=True), pe.weight.tolist(), strict=True)) == {
        (0, 1): -2,
        (1, 2): 0,
        (0, 3): -1,
        (1, 3): 4,
    }
    got = measure_scipy(pe, edges.directed_edges, EngineOptions(peer_repeats=1), print)
    want = gpu_core.minimum_spanning_forest(src, dst, weight, num_vertices=5, backend="cpu")
    assert got["total_weight"] == want.total_weight == -3
    assert got["num_components"] == want.num_components == 2


# --------------------------------------------------------------------------- GPU path, faked


class _FakeEvent:
    def __init__(self) -> None:
        self.t = 0.0

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass


def _fake_cupy() -> types.ModuleType:
    cp = types.ModuleType("cupy")
    cp.__version__ = "0.0-fake"  # type: ignore[attr-defined]

    class Pool:
        def used_bytes(self) -> int:
            return 1000

        def total_bytes(self) -> int:
            return 4096

        def free_all_blocks(self) -> None:
            pass

    pool = Pool()
    runtime = types.SimpleNamespace(
        memGetInfo=lambda: (70 * 2**30, 80 * 2**30),
        getDeviceCount=lambda: 1,
        getDeviceProperties=lambda i: {
            "name": b"Fake H100",
            "major": 9,
            "minor": 0,
            "totalGlobalMem": 80 * 2**30,
            "multiProcessorCount": 132,
        },
        driverGetVersion=lambda: 13000,
        runtimeGetVersion=lambda: 12080,
    )
    cp.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        Event=_FakeEvent,
        Device=lambda *a: types.SimpleNamespace(synchronize=lambda: None),
        get_elapsed_time=lambda a, b: (b.t - a.t) * 1e3,
        runtime=runtime,
    )
    cp.get_default_memory_pool = lambda: pool  # type: ignore[attr-defined]
    return cp


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """CuPy replaced by a stand-in and ``backend="gpu"`` served by the CPU backend."""
    cpu_graph = gpu_core.Graph

    def graph(src: Any, dst: Any, weight: Any, n: Any = None, *, backend: str = "auto") -> Any:
        return cpu_graph(src, dst, weight, n, backend="cpu")

    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    monkeypatch.setattr(gpu_core, "Graph", graph)
    monkeypatch.setattr(gpu_core, "gpu_available", lambda: True)
    monkeypatch.setattr(gpu_core, "warm_up", lambda backend="auto": "gpu")


def test_engine_record_with_gpu(fake_gpu: None, tmp_path: Path) -> None:
    spec = GraphSpec("rmat-9", "rmat", (("scale", 9), ("edge_factor", 8)), reference=(0.5, 8000), label="x")
    opts = EngineOptions(
        repeats=4,
        warmup=1,
        memcpy_repeats=2,
        peer_repeats=1,
        engines=("gpu", "cpu", "scipy"),
        cache_dir=tmp_path,
    )
    record = run_engine_benchmark(spec, opts, log=lambda s: None)
    assert record["status"] == "ok", {k: v.get("traceback") for k, v in record["results"].items()}
    gpu = record["results"]["gpu"]
    assert gpu["status"] == "ok"
    assert gpu["compute_ms"]["n"] == 4 and gpu["call_ms"]["n"] == 4 and gpu["with_memcpy_ms"]["n"] == 2
    assert gpu["compute_ms"]["median"] > 0 and gpu["directed_edges_per_s"] > 0
    assert gpu["bytes_per_edge"] > 0 and gpu["deterministic"] is True
    assert "_edge_ids" not in gpu
    assert record["checks"]["same_edges_gpu_cpu"] is True
    assert record["checks"]["total_weight_agrees"] is True
    assert set(record["checks"]["totals"]) == {"gpu", "cpu", "scipy"}
    ratios = record["ratios"]
    assert ratios["scipy_over_gpu"] > 0 and ratios["gpu_over_reference"] > 0

    env = report.environment()
    assert env["gpu"]["available"] and env["gpu"]["name"] == "Fake H100"
    results: dict[str, Any] = {"schema_version": 1, "suite": "full", "environment": env, "invocations": []}
    results["benchmarks"] = {"rmat-9": record}
    paths = report.write_results(tmp_path / "out", results, ["rmat-9"])
    md = paths["markdown"].read_text()
    assert "Fake H100" in md and "GPU compute ms" in md and "| rmat-9 |" in md


def test_gpu_failure_is_recorded_and_the_rest_goes_on(fake_gpu: None, tmp_path: Path, monkeypatch) -> None:
    def broken(*a: Any, **k: Any) -> Any:
        raise RuntimeError("device fell over")

    monkeypatch.setattr(gpu_core, "Graph", broken)
    spec = GraphSpec("grid-8", "grid", (("rows", 8),))
    opts = EngineOptions(peer_repeats=1, engines=("gpu", "scipy"), cache_dir=tmp_path)
    record = run_engine_benchmark(spec, opts, log=lambda s: None)
    assert record["status"] == "error"
    assert "device fell over" in record["results"]["gpu"]["error"]
    assert record["results"]["scipy"]["status"] == "ok"


def test_without_a_gpu_the_gpu_is_skipped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(gpu_core, "gpu_available", lambda: False)
    spec = GraphSpec("grid-8", "grid", (("rows", 8),))
    record = run_engine_benchmark(
        spec, EngineOptions(engines=("gpu", "cpu"), cache_dir=tmp_path), lambda s: None
    )
    assert record["status"] == "ok"
    assert record["results"]["gpu"]["status"] == "skipped"
    assert engine._ratios(record)["cpu_over_gpu"] is None


def test_rerun_with_fewer_engines_keeps_the_others(fake_gpu: None, tmp_path: Path) -> None:
    spec = GraphSpec("grid-16", "grid", (("rows", 16),))
    full = run_engine_benchmark(
        spec,
        EngineOptions(repeats=2, peer_repeats=1, engines=("gpu", "cpu", "scipy"), cache_dir=tmp_path),
        print,
    )
    full["measured_at"] = "earlier"
    gpu_only = run_engine_benchmark(
        spec, EngineOptions(repeats=2, engines=("gpu",), cache_dir=tmp_path), print
    )
    merged = engine.merge_records(full, gpu_only)
    assert merged["carried"] == ["cpu", "scipy"]
    assert merged["results"]["scipy"]["carried_from"] == "earlier"
    assert merged["status"] == "ok" and merged["checks"]["total_weight_agrees"] is True
    assert merged["checks"]["same_edges_gpu_cpu"] is True
    assert merged["ratios"]["scipy_over_gpu"] > 0
    # another graph: nothing is carried
    other = run_engine_benchmark(
        GraphSpec("grid-17", "grid", (("rows", 17),)),
        EngineOptions(engines=("cpu",), cache_dir=tmp_path),
        print,
    )
    assert "carried" not in engine.merge_records(full, other)
