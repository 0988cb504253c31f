"""How much memory a graph of ``n`` vertices and ``m`` edges takes, before it is built.

Counted from what the backends allocate (``_gpu.GpuGraph._build``, ``_cpu.CpuGraph``),
with ``k = m`` (no self-loops: an upper bound). Two numbers:

* ``resident``: what the prepared graph holds while it stays loaded (``Graph.nbytes``);
* ``peak``: the most the build holds at once, the input copies and the sorts' scratch
  included. A build needs ``peak`` free bytes; afterwards it keeps ``resident``.

Measured (``tests/gpu_core/test_estimate.py``): on an H100 with CuPy 14.2, the live
bytes of CuPy's pool peaked at 104 + 2w bytes per edge (``w`` the weight's itemsize;
the vertices' share is small) during the edge ranking, while the input ids, their int64
copies, the sort's scratch and the permuted ids are all alive; ``peak`` allows 112 + 2w.
``resident`` matched ``Graph.nbytes`` within 0.2 % for graphs without self-loops. On
the CPU backend (NumPy, traced with ``tracemalloc``) the build peaked at about 49 + w
bytes per edge with 32-bit ids given (37 + w with int64 ids); ``peak`` allows 60 + w.
Both are upper bounds for the graph given: self-loops only shrink a graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ._forest import filter_threshold

#: bytes a build adds whatever its size (pool rounding, counters, the pinned read-back block)
GPU_OVERHEAD = 1 << 20
#: peak bytes per edge of the GPU build besides the weights' share (see the module's docstring)
GPU_PEAK_PER_EDGE = 112
#: peak bytes per edge per byte of the weight's itemsize on the GPU (the weights and the sort's copy)
GPU_PEAK_PER_WEIGHT_BYTE = 2
#: peak bytes per vertex of the GPU build (the row searches' int64 vertex range and results)
GPU_PEAK_PER_VERTEX = 24
#: peak bytes per edge of the CPU build besides the weights: int64 ids, the order (int64 and
#: int32), the permuted ids, the loop mask, the gathers
CPU_PEAK_PER_EDGE = 60
CPU_OVERHEAD = 1 << 20


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a graph needs: ``peak`` while it is built, ``resident`` once it is."""

    resident: int
    peak: int


def _index_bytes(num_vertices: int, num_edges: int) -> int:
    return 4 if max(num_vertices, num_edges) < 2**31 else 8


def estimate_device_bytes(
    num_vertices: int, num_edges: int, weight_dtype: Any, backend: Literal["gpu", "cpu"] = "gpu"
) -> MemoryEstimate:
    """Memory a graph of this size needs on ``backend``: device bytes on the GPU, host bytes on the CPU.

    An upper bound for graphs without self-loops (self-loops only shrink it), so an admission
    check can refuse a graph before anything of its size is allocated.
    """
    if num_vertices < 0 or num_edges < 0:
        raise ValueError(f"sizes must be non-negative, got n={num_vertices}, m={num_edges}.")
    if backend not in ("gpu", "cpu"):
        raise ValueError(f"backend must be 'gpu' or 'cpu', got {backend!r}.")
    n, m = int(num_vertices), int(num_edges)
    w = int(np.dtype(weight_dtype).itemsize)
    if backend == "cpu":
        index = _index_bytes(n, m)
        # weights, both endpoints by edge id, and the minimum order's rank map and endpoints
        # (a maximum-forest query ranks the edges once more: 3 * index bytes per edge on top)
        resident = m * (w + 5 * index)
        peak = m * (CPU_PEAK_PER_EDGE + w) + CPU_OVERHEAD
        return MemoryEstimate(resident=resident, peak=peak)
    k = m
    threshold = filter_threshold(n, k)
    capacity = max(threshold, k - threshold, 1)
    nv = max(n, 1)
    resident = (
        m * w  # weights in input order
        + 4 * k  # rank -> edge id
        + 16 * k  # adjacency: (column, rank) of both directions
        + 8 * (n + 1)  # row_ptr and split
        + 8 * (2 * k // 256 + 1)  # heavy-row chunks (at most one per 256 slots)
        + 2 * 12 * capacity  # the two worklists
        + nv * (4 + 4 + 4 + 8 + w)  # lightest x2, parent, forest ids, forest weights
        + 4 * max((m + 31) // 32, 1)  # forest bit set
        + 4 * _tiles(m)  # per-tile forest counts
        + 16  # counters
    )
    build = m * (GPU_PEAK_PER_EDGE + GPU_PEAK_PER_WEIGHT_BYTE * w) + GPU_PEAK_PER_VERTEX * nv
    # the validated int64 ids live until the build returns, next to the finished graph
    finish = resident + 16 * m
    return MemoryEstimate(resident=resident, peak=max(build, finish) + GPU_OVERHEAD)


def _tiles(num_edges: int) -> int:
    """Tiles of the forest bit set (``_gpu.TILE_WORDS`` words each)."""
    words = max((num_edges + 31) // 32, 1)
    return max(-(-words // (256 * 8)), 1)
