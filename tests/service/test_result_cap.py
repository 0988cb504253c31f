"""The result files' cap (service/runtime/supervisor/result_cap.py): at most half of their file
system; a result's part file (written beside it in the result folder), or a file that is not a
result (MST_RESULT_DIR may be a shared folder), is never counted or removed; a slow look at the
folder is followed by ten times its length of rest."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import pytest

from service.runtime.supervisor.result_cap import effective_cap, trim


def test_the_cap_is_at_most_half_of_the_file_system(tmp_path: Path) -> None:
    fs = os.statvfs(tmp_path)
    half = fs.f_blocks * fs.f_frsize // 2
    assert effective_cap(tmp_path, 1 << 62) == half
    assert effective_cap(tmp_path, 4096) == 4096
    assert effective_cap(tmp_path / "missing", 4096) == 4096


def test_trim_removes_the_least_recently_used_results_and_nothing_else(tmp_path: Path) -> None:
    now = time.time()
    names = [f"j_{k:032x}.npz" for k in range(4)]
    for k, name in enumerate(names):
        path = tmp_path / name
        path.write_bytes(b"x" * 1000)
        os.utime(path, (now - 100 + k, now - 100 + k))  # names[0] the least recently used
    others = [f".j_{9:032x}.npz.123.part", "someone-elses.npz"]  # a part file; not a result of ours
    for name in others:
        (tmp_path / name).write_bytes(b"x" * 10_000)
        os.utime(tmp_path / name, (now - 1000, now - 1000))  # older than every result, larger than the cap
    assert trim(tmp_path, 2000) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*others, *names[2:]])


def test_a_slow_look_at_the_folder_makes_the_thread_wait_ten_times_as_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A look that takes 50 ms (a folder of about 10^4 results) is followed by at least 500 ms of
    rest, whatever the interval: the thread's share of a core stays at most 1/11."""
    from service.runtime.supervisor import result_cap

    starts: list[float] = []
    real = result_cap.trim

    def slow(result_dir: Path, max_bytes: int) -> int:
        starts.append(time.monotonic())
        time.sleep(0.05)
        return real(result_dir, max_bytes)

    monkeypatch.setattr(result_cap, "trim", slow)
    cap = result_cap.ResultCap(tmp_path, 1 << 30, interval_s=0.001)
    time.sleep(2.0)
    cap.stop()
    assert 1 <= len(starts) <= 4, starts  # every 1 ms (about 40 looks) without the rest
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(gap >= 0.05 + result_cap.WAIT_PER_LOOK * 0.05 for gap in gaps), gaps
