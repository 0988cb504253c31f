"""``Server-Timing``: what :class:`service.timing.Steps` writes, :func:`service.timing.parse_header`
reads back."""

from __future__ import annotations

from service.timing import Steps, parse_header


def test_the_header_reads_back_as_written() -> None:
    steps = Steps()
    steps.lap("receive")
    steps.add({"parse": 1.25, "build": 0.5}, "w-")
    steps.lap("worker")
    assert parse_header(steps.header()) == steps.ms
    assert list(parse_header(steps.header())) == ["receive", "w-parse", "w-build", "worker"]


def test_parts_without_a_duration_are_left_out() -> None:
    assert parse_header("") == {}
    assert parse_header("cache, queue;dur=4.5 ,db;desc=x, reply;dur=0") == {"queue": 4.5, "reply": 0.0}
