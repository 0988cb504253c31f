"""The host probes beside the throughput benchmarks (bench/host_probes.py)."""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path

import pytest

from bench.host_probes import GpuActivity, disk_write, parse_dmon

DMON = """\
# gpu     sm    mem    enc    dec    jpg    ofa
# Idx      %      %      %      %      %      %
    0     44     10      0      0      0      0
    1      -      -      -      -      -      -
    0    100     30      0      0      0      0
    1     62     20      0      0      0      0
"""


#: ``-o DT``: each sample stamped with dmon's date and local time (as on an H200 host)
DMON_DT = """\
#Date       Time        gpu     sm    mem    enc    dec    jpg    ofa
#YYYYMMDD   HH:MM:SS    Idx      %      %      %      %      %      %
 20261128   22:50:01      0      4      1      0      0      0      0
 20261128   22:50:02      0      0      0      0      0      0      0
 20261128   22:50:03      0     71     20      0      0      0      0
 20261128   22:50:04      0     78     22      0      0      0      0
 20261128   22:50:05      0     74     21      0      0      0      0
 20261128   22:50:06      0      0      0      0      0      0      0
"""


def at(clock: str) -> float:
    return datetime.datetime.strptime(f"20261128 {clock}", "%Y%m%d %H:%M:%S").timestamp()


def test_parse_dmon_keeps_each_gpus_sm_samples() -> None:
    assert parse_dmon(DMON) == {"0": [(None, 44), (None, 100)], "1": [(None, 62)]}
    assert parse_dmon("") == {}
    stamped = parse_dmon(DMON_DT)["0"]
    assert [v for _, v in stamped] == [4, 0, 71, 78, 74, 0]
    assert [t for t, _ in stamped] == [at(f"22:50:0{i}") for i in range(1, 7)]


def test_gpu_activity_counts_the_loads_seconds_only() -> None:
    """A block that also starts and stops its clients: only the samples of the load's window count
    (the whole block's median would be 37.5 %, the load's 76 %)."""
    gpus = GpuActivity()
    gpus.samples = parse_dmon(DMON_DT)
    whole = gpus.summary()
    assert whole is not None and whole["0"]["median"] == 37.5 and whole["0"]["window_s"] == 6
    load = gpus.summary((at("22:50:02") + 0.4, at("22:50:05") + 0.6))
    assert load is not None
    assert load["0"] == {"sm_percent": [4, 0, 71, 78, 74, 0], "median": 76.0, "window_s": 2}
    assert gpus.summary((at("22:50:10"), at("22:50:12")))["0"]["median"] is None  # type: ignore[index]


def test_disk_write_writes_every_byte_and_leaves_nothing(tmp_path: Path) -> None:
    result = disk_write(tmp_path, total_mb=6, writers=3)
    assert result["bytes"] == 6 << 20 and result["writers"] == 3
    assert result["mb_per_s"] > 0 and result["seconds"] > 0
    assert list(tmp_path.iterdir()) == []


def test_disk_write_into_a_missing_folder_raises_and_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        disk_write(tmp_path / "missing", total_mb=2, writers=2)
    assert list(tmp_path.iterdir()) == []


def test_gpu_activity_from_a_fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The block's samples come from ``nvidia-smi dmon``'s output, per GPU, with their median;
    disabled, or without nvidia-smi, it samples nothing."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\ncat <<'END'\n{DMON}END\nexec sleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with GpuActivity("0,1") as gpus:
        time.sleep(0.5)  # the fake prints at once, then waits to be stopped (as dmon samples on)
    assert gpus.summary() == {
        "0": {"sm_percent": [44, 100], "median": 72.0, "window_s": 2},
        "1": {"sm_percent": [62], "median": 62, "window_s": 1},
    }
    with GpuActivity(enabled=False) as off:
        pass
    assert off.summary() is None
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with GpuActivity() as absent:
        pass
    assert absent.summary() is None
