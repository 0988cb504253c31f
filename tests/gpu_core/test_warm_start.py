"""The warm-up manifest of ``gpu_core._warm_up.warm_start``: its file, what it holds, how it is read
and written, and the CPU backend's warm start (no CuPy needed).

On the GPU, tests/service/test_warm_start.py starts workers on a real one (a full sweep writes it, a
quick start runs the parts it names and must load every module it lists).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_core._warm_up import (
    MANIFEST_PREFIX,
    Manifest,
    _Beside,
    _run,
    manifest_path,
    read_manifest,
    warm_start,
    write_manifest,
)

ENVIRONMENT = {"gpu_core": "0123abcd", "cupy": "14.2.0", "driver": "13000", "compute_capability": "90"}


def test_the_manifest_lives_in_cupys_kernel_cache_folder_keyed_by_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = manifest_path(ENVIRONMENT, str(tmp_path))
    assert here.parent == tmp_path and here.name.startswith(MANIFEST_PREFIX) and here.suffix == ".json"
    assert manifest_path(dict(reversed(ENVIRONMENT.items())), str(tmp_path)) == here  # order: no matter
    for key in ENVIRONMENT:  # any change: another manifest (a new CuPy or driver, other sources)
        assert manifest_path({**ENVIRONMENT, key: "other"}, str(tmp_path)) != here
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "cupy"))
    assert manifest_path(ENVIRONMENT).parent == tmp_path / "cupy"
    monkeypatch.delenv("CUPY_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert manifest_path(ENVIRONMENT).parent == tmp_path / "home" / ".cupy" / "kernel_cache"


def test_a_manifest_reads_back_as_it_was_written(tmp_path: Path) -> None:
    path = manifest_path(ENVIRONMENT, str(tmp_path / "new folder"))
    manifest = Manifest(frozenset({"a1", "b2", "c3"}), ("graph queries", "points n=3 d=1, cupy"))
    assert write_manifest(path, manifest, ENVIRONMENT) is None
    assert read_manifest(path) == manifest
    assert json.loads(path.read_text())["environment"] == ENVIRONMENT
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no partial file left behind
    again = Manifest(frozenset({"a1"}), ())
    assert write_manifest(path, again, ENVIRONMENT) is None  # replaced whole
    assert read_manifest(path) == again


@pytest.mark.parametrize(
    "text",
    [
        None,  # no file
        "",
        "not json",
        "[]",
        json.dumps({"modules": ["a"]}),  # no parts
        json.dumps({"modules": "a", "parts": []}),
        json.dumps({"modules": ["a", 3], "parts": []}),
        json.dumps({"modules": [], "parts": [None]}),
    ],
)
def test_what_is_not_a_manifest_reads_as_none(tmp_path: Path, text: str | None) -> None:
    """(a start then runs the full sweep and writes a good one)"""
    path = tmp_path / "manifest.json"
    if text is not None:
        path.write_text(text)
    assert read_manifest(path) is None


def test_a_cache_folder_the_manifest_cannot_be_written_to_is_reported_not_raised(tmp_path: Path) -> None:
    blocked = tmp_path / "a file"
    blocked.write_text("")
    path = manifest_path(ENVIRONMENT, str(blocked))  # its folder would be a file
    reason = write_manifest(path, Manifest(frozenset({"a"}), ()), ENVIRONMENT)
    assert reason is not None and "Error" in reason
    assert read_manifest(path) is None


def test_a_sweep_names_the_parts_that_loaded_a_module_first() -> None:
    modules: dict[str, float] = {}

    def loads(*names: str) -> Callable[[], object]:
        return lambda: modules.update(dict.fromkeys(names, 1.0))

    parts = [("a", loads("x")), ("b", loads()), ("c", loads("x")), ("d", loads("y", "z")), ("e", loads("z"))]
    assert _run(parts, modules) == ["a", "d"]  # c and e load nothing the parts before them had not
    assert set(modules) == {"x", "y", "z"}


def test_parts_beside_the_tasks_run_on_their_own_thread_and_their_failure_is_raised_at_the_join() -> None:
    """The quick sweep's parts ``beside`` the caller's tasks (``warm_start(..., beside=True)``)."""
    import threading

    modules: dict[str, float] = {}
    threads: set[str] = set()
    release = threading.Event()

    def part(*names: str) -> Callable[[], object]:
        def run() -> None:
            threads.add(threading.current_thread().name)
            release.wait(10)  # the tasks run meanwhile on the caller's thread
            modules.update(dict.fromkeys(names, 1.0))

        return run

    beside = _Beside([("a", part("x")), ("b", part("x")), ("c", part("y"))], modules)
    modules["t"] = 1.0  # the caller's tasks, while the parts wait
    release.set()
    assert beside.join() == ["a", "c"] and set(modules) == {"t", "x", "y"}
    assert threads == {"warm-up-parts"}

    def fails() -> None:
        raise RuntimeError("a part failed")

    failing = _Beside([("a", fails)], modules)
    with pytest.raises(RuntimeError, match="a part failed"):
        failing.join()


def test_the_cpu_backend_runs_the_callers_tasks_then_the_graph_warm_up() -> None:
    calls: list[str] = []
    laps: list[str] = []
    report = warm_start("cpu", lambda: calls.append("tasks"), lap=laps.append)
    assert calls == ["tasks"] and laps == ["warm_up_tasks", "warm_up"]
    assert report["mode"] == "cpu" and set(report["ms"]) == {"warm_up_tasks", "warm_up"}
