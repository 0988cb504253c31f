"""Timing helpers: repeated measurements under a time budget, and their summary."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def summarize(samples_ms: Sequence[float]) -> dict[str, Any]:
    """Median and spread of a list of milliseconds (``runs`` keeps every sample)."""
    xs = sorted(float(x) for x in samples_ms)
    if not xs:
        return {"n": 0}
    median = statistics.median(xs)
    return {
        "n": len(xs),
        "median": median,
        "min": xs[0],
        "max": xs[-1],
        "mean": statistics.fmean(xs),
        "stdev": statistics.stdev(xs) if len(xs) > 1 else 0.0,
        "p90": percentile(xs, 90),
        # relative spread: (max - min) / median
        "spread": (xs[-1] - xs[0]) / median if median > 0 else 0.0,
        "runs": [float(x) for x in samples_ms],
    }


def percentile(xs: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (linear interpolation, like ``numpy.percentile``)."""
    ys = sorted(xs)
    if not ys:
        return math.nan
    pos = (len(ys) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ys) - 1)
    return ys[lo] + (ys[hi] - ys[lo]) * (pos - lo)


def repeat(
    fn: Callable[[], T], repeats: int, budget_s: float | None = None, min_runs: int = 1
) -> tuple[list[float], T]:
    """Call ``fn`` up to ``repeats`` times (at least ``min_runs``), stopping early when the next
    run, expected to take as long as the last one, would end past ``budget_s`` seconds.
    Returns the wall times in milliseconds and the last result.
    """
    times: list[float] = []
    start = time.perf_counter()
    result: T
    for i in range(max(repeats, min_runs, 1)):
        t0 = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t0) * 1e3)
        elapsed = time.perf_counter() - start
        if i + 1 >= min_runs and budget_s is not None and elapsed + times[-1] / 1e3 > budget_s:
            break
    return times, result


def fmt_ms(ms: float | None) -> str:
    """Milliseconds with 3 significant digits (µs below 1 ms kept as decimals)."""
    if ms is None or (isinstance(ms, float) and math.isnan(ms)):
        return "\u2013"
    if ms >= 100:
        return f"{ms:,.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3f}"


def device_sync(backend: str) -> None:
    """Wait for the GPU's queued work (nothing on the CPU backend): a clock read after it is honest."""
    if backend == "gpu":
        import cupy

        cupy.cuda.Device().synchronize()


def median_ms(run: Callable[[], Any], repeats: int, backend: str, warm_up: bool = True) -> float:
    """Median milliseconds of ``repeats`` calls of ``run``, each ended by :func:`device_sync`
    (after one warm-up call unless ``warm_up`` is false)."""
    if warm_up:
        run()
        device_sync(backend)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        device_sync(backend)
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def on_backend(backend: str, array: Any) -> Any:
    """``array`` on the backend's device: a CuPy copy for the GPU, as it is for the CPU."""
    if backend == "gpu":
        import cupy

        return cupy.asarray(array)
    return array
