"""A tiny progress bar for the CLI's uploads and downloads (stderr; no dependency).

Shown for bodies of :data:`MIN_BYTES` or more, when the stream is a terminal or when asked for
(``--progress``). Redrawn at most every :data:`REDRAW_S` seconds and at the end.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

#: smaller bodies go by without a bar
MIN_BYTES = 4 << 20
REDRAW_S = 0.1


def _size(count: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} GB"  # pragma: no cover - the loop returns


class ProgressBar:
    """``label [#####-----]  42%  12.3 MB / 29.1 MB  80.5 MB/s`` on one line, redrawn in place."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None, width: int = 28) -> None:
        self.label = label
        self.total = max(total, 0)
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.done = 0
        self._start = time.monotonic()
        self._drawn = 0.0
        self._closed = False

    def update(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if now - self._drawn >= REDRAW_S:
            self._draw(now)

    def _draw(self, now: float) -> None:
        self._drawn = now
        fraction = min(self.done / self.total, 1.0) if self.total else 1.0
        filled = int(fraction * self.width)
        rate = self.done / max(now - self._start, 1e-9)
        self.stream.write(
            f"\r{self.label} [{'#' * filled}{'-' * (self.width - filled)}] {fraction:4.0%}  "
            f"{_size(self.done)} / {_size(self.total)}  {_size(rate)}/s"
        )
        self.stream.flush()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()


def wanted(flag: bool | None, stream: TextIO | None = None) -> bool:
    """Bars when asked for (``flag``), else when the stream (stderr) is a terminal."""
    if flag is not None:
        return flag
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
