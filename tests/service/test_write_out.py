"""Result files handed to the disk behind their answers (service/storage/write_out.py)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.runtime.worker.protocol import WorkerConfig
from service.runtime.worker.state import Worker
from service.storage import npzio
from service.storage.write_out import WriteOut, hand_to_disk


class Gate:
    """A hand-off that waits until the test opens the gate, recording the files handed over."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.handed: list[str] = []
        self.started = threading.Event()

    def __call__(self, path: str) -> None:
        self.started.set()
        assert self.open.wait(10)
        self.handed.append(path)


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_files_are_handed_over_in_their_order() -> None:
    gate = Gate()
    gate.open.set()
    out = WriteOut(backlog_bytes=1 << 20, hand=gate)
    names = [f"f{i}" for i in range(20)]
    assert all(out.offer(name, 1000) for name in names)
    out.close(timeout=10)
    assert gate.handed == names
    assert out.pending_bytes() == 0 and out.skipped == 0


def test_a_disk_behind_by_more_than_the_backlog_leaves_files_to_the_kernel() -> None:
    """While the hand-off is stuck (a slow disk), offers return at once; past the backlog they are
    refused and counted, and the ones taken are all handed over once the disk catches up."""
    gate = Gate()
    out = WriteOut(backlog_bytes=3000, hand=gate)
    started = time.perf_counter()
    taken = [out.offer(f"f{i}", 1000) for i in range(6)]
    assert time.perf_counter() - started < 1.0  # nobody waits for the disk
    assert taken == [True, True, True, False, False, False]
    assert out.skipped == 3 and out.pending_bytes() == 3000
    gate.open.set()
    wait_until(lambda: out.pending_bytes() == 0)
    assert out.offer("late", 1000)  # room again
    out.close(timeout=10)
    assert gate.handed == ["f0", "f1", "f2", "late"]


def test_a_file_larger_than_the_backlog_is_taken_when_nothing_waits() -> None:
    gate = Gate()
    gate.open.set()
    out = WriteOut(backlog_bytes=10, hand=gate)
    assert out.offer("big", 1 << 30)
    out.close(timeout=10)
    assert gate.handed == ["big"]


def test_a_failing_hand_off_loses_nothing_and_the_thread_goes_on() -> None:
    handed: list[str] = []

    def hand(path: str) -> None:
        if path == "bad":
            raise OSError(5, "I/O error")
        handed.append(path)

    out = WriteOut(hand=hand)
    for name in ("a", "bad", "b"):
        assert out.offer(name, 10)
    out.close(timeout=10)
    assert handed == ["a", "b"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_hand_to_disk_on_real_files(tmp_path: Path) -> None:
    """The real hand-off accepts a written file (the call must succeed: an error would raise) and
    passes over one removed meanwhile; the file's bytes are unchanged."""
    from service.storage.spool import start_write_out

    arrays = {"edge_ids": np.arange(100_000, dtype=np.int64), "weights": np.linspace(0, 1, 100_000)}
    path = tmp_path / "r.npz"
    npzio.write_npz_file(path, arrays)
    start = start_write_out()
    assert start is not None
    with open(path, "rb") as f:
        assert start(f.fileno(), 0, 0) == 0
    hand_to_disk(str(path))
    hand_to_disk(str(tmp_path / "gone.npz"))
    with np.load(path) as npz:
        assert all(np.array_equal(npz[k], v) for k, v in arrays.items())


def test_a_worker_result_is_in_place_before_the_disk_takes_it(tmp_path: Path) -> None:
    """Worker.write_arrays returns with the file whole in place while the hand-off is still stuck;
    the file is then queued once; a one-shot's (write_out=False) is not queued."""
    (tmp_path / "tmp").mkdir()
    config = WorkerConfig(
        0, "cpu", str(tmp_path), str(tmp_path / "w.sock"), None, str(tmp_path / "tmp"), 10**6, 0.5
    )
    worker = Worker(config)
    gate = Gate()
    worker.write_out = WriteOut(hand=gate)
    arrays: dict[str, Any] = {
        "edge_ids": np.arange(65_535, dtype=np.int64),
        "weights": np.ones(65_535, np.float32),
    }
    first, second, oneshot = (str(tmp_path / name) for name in ("a.npz", "b.npz", "c.npz"))
    worker.write_arrays(arrays, first)
    assert gate.started.wait(10)  # the thread holds the first file, stuck
    worker.write_arrays(arrays, second)
    worker.write_arrays(arrays, oneshot, write_out=False)
    for path in (first, second, oneshot):
        with np.load(path) as npz:
            assert np.array_equal(npz["edge_ids"], arrays["edge_ids"])
    assert worker.write_out.pending_bytes() == 2 * Path(first).stat().st_size
    gate.open.set()
    worker.write_out.close(timeout=10)
    assert gate.handed == [first, second]
