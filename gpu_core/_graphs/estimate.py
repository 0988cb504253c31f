"""How much memory a graph of ``n`` vertices and ``m`` edges takes, before it is built.

Counted from what the backends allocate (``gpu.GpuGraph._build``, ``cpu.CpuGraph``),
with ``k = m`` (no self-loops: an upper bound). Two numbers:

* ``resident``: what the prepared graph holds while it stays loaded (``Graph.nbytes``);
* ``peak``: the most the build holds at once, the input's device copies (int64 ids at
  worst, as a host upload makes them), the sorts' scratch included. A build needs
  ``peak`` free bytes; afterwards it keeps ``resident``.

GPU layouts (``layout``): graphs of fewer than 2^30 loop-free edges index their slots (one per
edge) with 32 bits; larger ones with 64 bits and worklists half the size (``slot_layout``).
The build's phases, in bytes per edge (``w`` the weight's itemsize, ``I`` the input's device copies, 16 + w):
ranking (4-byte weights) ``I + w + 16`` (the 64-bit keys and the sort's scratch),
(8-byte weights) ``I + w + 2w + 16`` (CuPy's argsort: a copy of the keys, int64 ids and
the sort's pairs); endpoints by rank ``I + w + 12``; the CSR ``w + 20`` plus the sorted
chunk's keys and scratch (16 bytes per slot of one of ``csr_pieces`` chunks); and then the
resident graph. ``peak`` is the largest of them. Measured on the GPU by
``tests/gpu_core/graphs/test_estimate.py`` (CuPy's pool, a counting allocator); the CPU backend
(NumPy, traced with ``tracemalloc``) peaks at about 49 + w bytes per edge with 32-bit ids
given (37 + w with int64 ids); ``peak`` allows 60 + w there.
Both are upper bounds for the graph given: self-loops only shrink a graph.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from .._backend.memory import MemoryEstimate
from .layout import SlotLayout, csr_pieces, slot_layout

#: bytes a build adds whatever its size (pool rounding, counters, the pinned read-back block, sort scratch)
GPU_OVERHEAD = 1 << 20
#: device bytes per edge of the input's copies at worst: int64 ids (a host upload), besides the weights
GPU_INPUT_IDS_PER_EDGE = 16
#: peak bytes per edge of the CPU build besides the weights: int64 ids, the order (int64 and
#: int32), the permuted ids, the loop mask, the gathers
CPU_PEAK_PER_EDGE = 60
CPU_OVERHEAD = 1 << 20


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
    return _gpu_bytes(n, m, w, slot_layout(n, m))


def _gpu_bytes(n: int, m: int, w: int, layout: SlotLayout) -> MemoryEstimate:
    """The GPU backend's bytes for a graph of ``m`` loop-free edges in ``layout``."""
    k = m
    s = layout.slot_bytes
    nv = max(n, 1)
    resident = (
        m * w  # weights in input order
        + 4 * k  # rank -> edge id
        + 8 * k  # adjacency: (larger endpoint, rank), one slot per edge
        + s * (2 * n + 1)  # row_ptr and split
        + 2 * s * (k // 256 + 1)  # heavy-row chunks (at most one per 256 slots)
        + 2 * 12 * layout.capacity  # the two worklists
        + nv * (4 + 4 + 4 + 8 + w)  # lightest x2, parent, forest ids, forest weights
        + 4 * max((m + 31) // 32, 1)  # forest bit set
        + 4 * _tiles(m)  # per-tile forest counts
        + 16  # counters
    )
    inputs = (GPU_INPUT_IDS_PER_EDGE + w) * m
    # 4-byte weights: the 64-bit keys and the sort's scratch; 8-byte: argsort's key copy, ids, pairs' scratch
    sort_scratch = 16 * m if w == 4 else (2 * w + 24) * m
    ranking = inputs + w * m + sort_scratch
    endpoints = inputs + w * m + 12 * k  # rank -> id and both endpoints by rank
    chunk = -(-k // csr_pieces(k)) if k else 0  # k slots: one per edge
    rows = 2 * s * (n + 1) + 8 * nv  # row_ptr, split and the row counts
    csr = w * m + 20 * k + rows + 16 * chunk  # + one chunk's keys and their sort's scratch
    return MemoryEstimate(resident=resident, peak=max(ranking, endpoints, csr, resident) + GPU_OVERHEAD)


def _tiles(num_edges: int) -> int:
    """Tiles of the forest bit set (``gpu.TILE_WORDS`` words each)."""
    words = max((num_edges + 31) // 32, 1)
    return max(-(-words // (256 * 8)), 1)
