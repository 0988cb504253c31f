"""Smoke test of ``python -m bench --suite quick`` (a reduced run): the output is sane.

Not a timing assertion: it checks that every part ran, wrote its JSON and
Markdown, found the same total weight as every peer, and measured positive times.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import main
from bench.server import service_present

ENGINE_GRAPHS = ["grid-256", "grid-256-float", "rmat-14-raw"]


def _positive(stats: dict[str, Any]) -> bool:
    return stats["n"] >= 1 and 0 < stats["min"] <= stats["median"] <= stats["max"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    out = tmp_path_factory.mktemp("bench-out")
    cache = tmp_path_factory.mktemp("bench-cache")
    argv = ["--suite", "quick", "--out", str(out), "--cache", str(cache), "--no-plot"]
    argv += ["--only", *ENGINE_GRAPHS, "service-grid-256"]
    argv += ["--repeats", "3", "--peer-repeats", "2", "--requests", "5", "--uploads", "2"]
    return main(argv), out


@pytest.mark.slow
def test_exit_code_and_files(quick_run: tuple[int, Path]) -> None:
    rc, out = quick_run
    results = json.loads((out / "results.json").read_text())
    assert rc == 0, {k: v.get("error") for k, v in results["benchmarks"].items()}
    assert (out / "results.md").exists()
    assert set(results) >= {"schema_version", "suite", "environment", "invocations", "benchmarks"}
    assert results["suite"] == "quick"
    env = results["environment"]
    assert set(env) >= {"date", "host", "git", "gpu", "versions", "cpu"}
    assert "available" in env["gpu"]
    assert list(results["benchmarks"]) == [*ENGINE_GRAPHS, "service-grid-256"]


@pytest.mark.parametrize("name", ENGINE_GRAPHS)
def test_engine_records(quick_run: tuple[int, Path], name: str) -> None:
    _, out = quick_run
    record = json.loads((out / "results.json").read_text())["benchmarks"][name]
    assert record["status"] == "ok", record.get("error")
    graph = record["graph"]
    assert graph["num_vertices"] > 0 and graph["directed_edges"] == 2 * graph["num_edges"] >= 100_000
    results = record["results"]
    assert results["gpu"]["status"] in ("ok", "skipped")
    cpu = results["cpu"]
    assert cpu["status"] == "ok" and _positive(cpu["compute_ms"]) and cpu["build_ms"] > 0
    assert cpu["bytes_per_edge"] > 0
    scipy = results["scipy"]
    assert scipy["status"] == "ok" and _positive(scipy["total_ms"]) and _positive(scipy["csr_build_ms"])
    for peer in ("networkx", "igraph"):
        assert results[peer]["status"] in ("ok", "skipped")
    checks = record["checks"]
    assert checks["total_weight_agrees"] is True and checks["components_agree"] is True
    assert {"cpu", "scipy"} <= set(checks["totals"])
    assert record["ratios"]["cpu_over_scipy"] > 0
    if name.endswith("-raw"):  # self-loops and parallel edges: the peers saw a merged list
        assert record["peer_edges"]["num_edges"] < graph["num_edges"]


def test_service_record(quick_run: tuple[int, Path]) -> None:
    _, out = quick_run
    record = json.loads((out / "results.json").read_text())["benchmarks"]["service-grid-256"]
    if not service_present():
        assert record["status"] == "skipped"
        return
    assert record["status"] == "ok", record.get("error")
    res = record["results"]
    for fmt in ("json", "npz"):
        assert res[f"upload_{fmt}"]["status"] == "ok" and res[f"upload_{fmt}"]["mb_per_s"] > 0
    lat = res["latency"]
    assert lat["status"] == "ok" and lat["requests"] == 5
    assert 0 < lat["e2e_ms"]["p50"] <= lat["e2e_ms"]["p99"]
    assert lat["compute_ms"]["p50"] > 0 and lat["compute_ms"]["p50"] < lat["e2e_ms"]["p50"]
    assert lat["check"]["total_weight_agrees"] is True and lat["check"]["forest_edges_agree"] is True
    # the bundled client's one request (Client.forest): timed, and its forest checked the same way
    one = res["latency_forest"]
    assert one["status"] == "ok" and one["requests"] == 5 and one["backend"] == lat["backend"]
    assert 0 < one["compute_ms"]["p50"] < one["e2e_ms"]["p50"] <= one["e2e_ms"]["p99"]
    assert one["check"]["got"] == lat["check"]["got"]
    assert one["check"]["total_weight_agrees"] is True and one["check"]["forest_edges_agree"] is True
    assert res["download"]["json"]["mb_per_s"] > 0 and res["download"]["binary"]["mb_per_s"] > 0
    assert res["one_shot"]["npz"]["ms"]["median"] > 0 and res["one_shot"]["json"]["ms"]["median"] > 0


def test_markdown_lists_every_benchmark(quick_run: tuple[int, Path]) -> None:
    _, out = quick_run
    md = (out / "results.md").read_text()
    assert "# MST benchmarks: quick suite" in md
    for name in [*ENGINE_GRAPHS, "service-grid-256"]:
        assert f"| {name} |" in md


def test_isolated_run_merges_into_the_results(quick_run: tuple[int, Path], tmp_path: Path) -> None:
    _, out = quick_run
    merged = tmp_path / "out"
    merged.mkdir()
    (merged / "results.json").write_text((out / "results.json").read_text())
    argv = ["--suite", "quick", "--out", str(merged), "--only", "road-256", "--isolate"]
    argv += ["--engines", "cpu,scipy", "--peer-repeats", "1", "--no-plot", "--cache", str(tmp_path / "cache")]
    assert main(argv) == 0
    results = json.loads((merged / "results.json").read_text())
    assert set(results["benchmarks"]) == {*ENGINE_GRAPHS, "service-grid-256", "road-256"}
    assert results["benchmarks"]["road-256"]["status"] == "ok"
    assert len(results["invocations"]) == 2


def test_list_and_bad_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--suite", "full", "--list"]) == 0
    names = capsys.readouterr().out.split()
    assert {"grid-1024", "delaunay-20", "rmat-16", "rmat-22", "random-23", "kron-21"} <= set(names)
    assert main(["--suite", "quick", "--only", "no-such-graph"]) == 2


def test_plot(quick_run: tuple[int, Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from bench.report import plot_throughput

    _, out = quick_run
    results = json.loads((out / "results.json").read_text())
    png = plot_throughput(results, tmp_path / "t.png")
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
