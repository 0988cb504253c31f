"""The board's run stamps: which requests a worker's run answers, as an API process reads them
when the worker dies (``service/runtime/board.py``)."""

from __future__ import annotations

from service.runtime.board import Board


def test_a_run_stamp_names_exactly_its_requests() -> None:
    """Not every id from a run's first to its last: requests queued between identical jobs or
    batched one-shots did not run, and one caught there would be sent again suspect (or lost)."""
    board = Board.create(2, 3)
    board.stamp(1, {0: [17, 9, 12], 2: [5]})
    assert board.running(1, 0) == [9, 12, 17]
    assert board.running(1, 2) == [5]
    assert board.running(1, 1) == []  # nothing of that API process in the run
    assert board.running(0, 0) == []  # another worker

    board.stamp(1, {0: [3, 3 + 51]})  # the widest span named one by one
    assert board.running(1, 0) == [3, 54]
    board.stamp(1, {0: [3, 3 + 52, 40]})  # wider: the whole range (more than ran)
    assert board.running(1, 0) == list(range(3, 56))
    board.stamp(1, {1: [8]})  # a new run replaces every API process's ids
    assert board.running(1, 0) == [] and board.running(1, 1) == [8]

    board.clear_stamp(1)
    assert all(board.running(1, slot) == [] for slot in range(3))
