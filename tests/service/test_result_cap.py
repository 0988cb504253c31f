"""The result files' cap (service/runtime/supervisor/result_cap.py): at most half of their file
system; a result's part file (written beside it in the result folder), or a file that is not a
result (MST_RESULT_DIR may be a shared folder), is never counted or removed."""

from __future__ import annotations

import os
import time
from pathlib import Path

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
