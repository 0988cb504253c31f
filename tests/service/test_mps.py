"""MST_MPS: when the service starts CUDA MPS for its workers, and the control daemon's lifecycle.

CI has no GPU and no NVIDIA driver, so these run the service against a stand-in
``nvidia-cuda-mps-control`` on the PATH that records how it was called (its arguments, its
``CUDA_MPS_PIPE_DIRECTORY``, what it read on stdin) and exits as told. The real daemon is measured
on a GPU host (bench/results/scaling/README.md).
"""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import pytest

from service.runtime.supervisor import mps
from service.settings import Settings

from .conftest import ServerFactory

FAKE = """#!{python}
import json, os, sys
record = {{"args": sys.argv[1:], "pipe": os.environ.get("CUDA_MPS_PIPE_DIRECTORY"),
          "log": os.environ.get("CUDA_MPS_LOG_DIRECTORY"),
          "stdin": "" if sys.argv[1:] else sys.stdin.read()}}
with open({calls!r}, "a") as f:
    f.write(json.dumps(record) + "\\n")
if {fail!r} and sys.argv[1:] == ["-d"]:
    sys.stderr.write("An instance of this daemon is already running\\n")
    sys.exit(1)
"""


def fake_control(folder: Path, fail: bool = False) -> Path:
    """A stand-in control program in ``folder``; the calls it gets go to ``folder/calls.jsonl``."""
    import sys

    folder.mkdir(parents=True, exist_ok=True)
    calls = folder / "calls.jsonl"
    program = folder / mps.CONTROL
    program.write_text(FAKE.format(python=sys.executable, calls=str(calls), fail=fail))
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return calls


def calls_of(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, False),  # one worker a GPU (the default): nothing to share
        ({"MST_WORKERS_PER_GPU": "2"}, True),
        ({"MST_WORKERS_PER_GPU": "2", "MST_MPS": "off"}, False),
        ({"MST_MPS": "on"}, True),
        ({"MST_MPS": "on", "MST_BACKEND": "cpu"}, False),
        ({"MST_WORKERS_PER_GPU": "4", "MST_BACKEND": "cpu"}, False),
    ],
)
def test_when_the_workers_want_mps(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: bool
) -> None:
    for name in ("MST_WORKERS_PER_GPU", "MST_MPS", "MST_BACKEND"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert mps.wanted(Settings()) is expected


@pytest.fixture
def clean_mps_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """mps.start sets these in os.environ for the workers to inherit: restored after each test."""
    for name in (mps.PIPE_ENV, mps.LOG_ENV):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv(name, "")  # registers the variable with monkeypatch, so it is undone
        monkeypatch.delenv(name)


def test_a_daemon_of_its_own_started_in_the_run_folder_and_told_to_quit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_mps_env: None
) -> None:
    calls = fake_control(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    daemon = mps.start(Settings(mps="on"), run_dir)
    assert daemon is not None and daemon.pipe_dir.parent == run_dir
    assert os.environ[mps.PIPE_ENV] == str(daemon.pipe_dir)  # what the workers spawned next inherit
    assert stat.S_IMODE(daemon.pipe_dir.stat().st_mode) == 0o700
    daemon.stop()
    started, quit_ = calls_of(calls)
    assert started == {"args": ["-d"], "pipe": str(daemon.pipe_dir), "log": str(daemon.log_dir), "stdin": ""}
    assert quit_["args"] == [] and quit_["stdin"] == "quit\n" and quit_["pipe"] == str(daemon.pipe_dir)


def test_a_daemon_that_does_not_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_mps_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    fake_control(tmp_path / "bin", fail=True)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(mps.MpsStartError, match=r"MST_MPS=on, but .* already running"):
        mps.start(Settings(mps="on"), tmp_path)
    with caplog.at_level(logging.WARNING, logger="service.runtime.supervisor"):
        assert mps.start(Settings(workers_per_gpu=2), tmp_path) is None  # auto: the workers go without
    assert "CUDA MPS not started (MST_MPS=auto)" in caplog.text and "already running" in caplog.text
    assert mps.PIPE_ENV not in os.environ


def test_no_program_and_the_operators_own_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_mps_env: None
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert mps.start(Settings(workers_per_gpu=2), tmp_path) is None
    with pytest.raises(mps.MpsStartError, match="nvidia-cuda-mps-control is not on the PATH"):
        mps.start(Settings(mps="on"), tmp_path)
    calls = fake_control(tmp_path / "bin")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv(mps.PIPE_ENV, "/var/run/operators-mps")
    assert mps.start(Settings(mps="on"), tmp_path) is None  # the operator's daemon, as it is
    assert calls_of(calls) == []


def test_the_service_starts_its_daemon_before_the_workers_and_stops_it(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    """A live service (``MST_BACKEND=auto`` with two workers a GPU, on CI's GPU-less host its workers
    resolve to the CPU): the stand-in is started once with a pipe in the service's run folder before
    the workers, whose environment has it; ``quit`` when the service stops."""
    bin_dir = tmp_path / "bin"
    calls = fake_control(bin_dir)
    server = server_factory(
        MST_BACKEND="auto",
        MST_WORKERS_PER_GPU="2",
        MST_STANDBY_WORKER="off",
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    )
    (started,) = calls_of(calls)
    assert started["args"] == ["-d"] and str(started["pipe"]).endswith("mps-pipe")
    worker = server.worker_pid()
    environ = Path(f"/proc/{worker}/environ").read_bytes().split(b"\0")
    assert f"{mps.PIPE_ENV}={started['pipe']}".encode() in environ
    server.stop()
    assert [c["stdin"] for c in calls_of(calls)] == ["", "quit\n"]
    assert not Path(str(started["pipe"])).exists()  # the run folder went with the service
