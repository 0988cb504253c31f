"""The result files' cap (service/runtime/supervisor/result_cap.py): at most half of their file
system, and a result's part file (written beside it in the result folder) is never counted or removed."""

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


def test_trim_removes_the_least_recently_used_results_and_never_a_part_file(tmp_path: Path) -> None:
    now = time.time()
    for k in range(4):
        path = tmp_path / f"j_{k}.npz"
        path.write_bytes(b"x" * 1000)
        os.utime(path, (now - 100 + k, now - 100 + k))  # j_0 the least recently used
    part = tmp_path / ".j_9.npz.123.part"
    part.write_bytes(b"x" * 10_000)
    os.utime(part, (now - 1000, now - 1000))  # older than every result, and larger than the cap
    assert trim(tmp_path, 2000) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [".j_9.npz.123.part", "j_2.npz", "j_3.npz"]
