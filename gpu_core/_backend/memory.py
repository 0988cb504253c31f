"""Memory figures both parts estimate (graphs, point sets), and the measure of a device's peak."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a graph or a point set needs: ``peak`` while it is built (or computed on),
    ``resident`` once it is."""

    resident: int
    peak: int


@dataclass
class PoolPeak:
    """What CuPy's default memory pool held: at the start of a block, and at most during it."""

    base: int = 0
    high: int = 0

    @property
    def peak(self) -> int:
        """The most the block added over what was held at its start."""
        return self.high - self.base


@contextlib.contextmanager
def pool_peak() -> Iterator[PoolPeak]:
    """Measure the pool's high-water mark over a block (the estimates' GPU figures are measured so).

    Frees the pool's cached blocks first, then counts every allocation through the pool; the
    allocator is put back however the block ends.
    """
    import cupy as cp

    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    cp.cuda.Device().synchronize()
    seen = PoolPeak(pool.used_bytes(), pool.used_bytes())

    def counting(size: int) -> Any:
        block = pool.malloc(size)
        seen.high = max(seen.high, pool.used_bytes())
        return block

    cp.cuda.set_allocator(counting)
    try:
        yield seen
    finally:
        cp.cuda.set_allocator(pool.malloc)
