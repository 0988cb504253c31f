"""Step durations of one request, for its ``Server-Timing`` header (W3C Server Timing).

Uploads and weight updates answer with where their time went on the server: the API's steps
(``receive``: the body into the spool; ``worker``: the worker's round trip; ``durable``: the wait
for the fsync and the commit, which a weights update splits into ``fsync``, ``publish``, the
rename into place with its folder fsynced, and ``commit``, the record) and the worker's own steps
inside its round trip (``w-parse``, ``w-build``, ``w-apply``, ``w-prepare``, ...). Clients see it;
the benchmarks read it to split a figure into its parts without a profiler on the host.
"""

from __future__ import annotations

import time
from collections.abc import Mapping


class Steps:
    """Named durations in milliseconds, each from the previous :meth:`lap` (or the start)."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self.ms: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.ms[name] = round(self.ms.get(name, 0.0) + (now - self._last) * 1e3, 3)
        self._last = now

    def add(self, durations: Mapping[str, float], prefix: str) -> None:
        """Record steps measured elsewhere (a worker's), named ``prefix + name``."""
        for name, ms in durations.items():
            self.ms[prefix + name] = round(float(ms), 3)

    def header(self) -> str:
        """The ``Server-Timing`` value: ``name;dur=ms`` for each step, in the order recorded."""
        return ", ".join(f"{name};dur={ms:.3f}" for name, ms in self.ms.items())


def parse_header(value: str) -> dict[str, float]:
    """A ``Server-Timing`` value (``name;dur=ms, ...``, as :meth:`Steps.header` writes it) as
    {name: ms}; parts without a duration are left out."""
    out: dict[str, float] = {}
    for part in value.split(","):
        name, _, duration = part.strip().partition(";dur=")
        if name and duration:
            out[name] = float(duration)
    return out
