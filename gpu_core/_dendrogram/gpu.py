"""Single-linkage dendrograms on the device: the SciPy linkage matrix of a spanning tree whose
edges are in merge order, computed where the tree already is (``kernels/dendrogram.cu``).

The same matrix as :func:`~gpu_core.linkage_from_sorted_edges`, bit for bit, without the host's
sequential union-find: reps (smallest vertices) of the components every edge joins, by a divide
and conquer over the ranks (one union-find launch pair per level, small blocks finished by one
thread each); the children from the edges grouped by winning rep; the sizes from an Euler tour of
the reps' tree ranked by a ruling set. The kernel file's header explains why each step is exact.
Input the kernels cannot take (bad ids, unsorted weights, wrong shapes, no tree) is answered by
the host function, so the errors are the same typed errors with the same messages.

:func:`build_linkage` is written against an array module and a kernel launcher: CuPy and its
``RawKernel`` here; NumPy and the kernels compiled for the host in the CPU tests.

Design: docs/design/dendrogram.md.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from .._backend.arrays import to_numpy
from .._backend.kernels import DENDROGRAM_FILE, kernel
from ..errors import GraphTooLargeError

Array = Any
#: ``launch(kernel name, grid, block, args)``
Launch = Callable[[str, tuple[int], tuple[int], tuple[Any, ...]], None]

BLOCK = 256
#: edges per block that one thread finishes sequentially (``finish_blocks``), a power of two: the
#: last log2(TAIL) levels of the divide and conquer cost one launch instead of two per level
#: (256 was faster than 32 or 64 on many points, and 512 no faster)
TAIL = 256
#: about one tour token in SPACING starts a sublist of the list ranking (a power of two)
SPACING = 32
#: the most points: tour tokens (2n) and cluster ids (up to 2n - 2) stay 32-bit
MAX_POINTS = 2**30 - 1


def _grid(work: int) -> tuple[int]:
    return (max(1, min(-(-work // BLOCK), 65535)),)


def _host_answer(xp: Any, n: int, u: Array, v: Array, w: Array) -> Array:
    """The host function's answer: its typed error for input the kernels cannot take, or (n < 2) the
    empty matrix."""
    from .cpu import linkage_from_sorted_edges

    return xp.asarray(linkage_from_sorted_edges(n, to_numpy(u), to_numpy(v), to_numpy(w)))


def linkage_on_device(
    n: int, src: Array, dst: Array, weights: Array, *, tail: int = TAIL, spacing: int = SPACING,
    timings_ms: dict[str, float] | None = None,
) -> Array:  # fmt: skip
    """The linkage matrix ``(n - 1) x 4`` (a float64 CuPy array) of a spanning tree of ``n`` points
    whose edges ``(src[i], dst[i])`` are in merge order (non-decreasing ``weights``), on the device.

    Equal to :func:`~gpu_core.linkage_from_sorted_edges` of the same edges, raising its errors.
    ``tail`` and ``spacing`` (powers of two) tune the speed only. A ``timings_ms`` dict gets the
    device time of each phase (CUDA events; ``check``, ``reps``, ``sort``, ``tour``, ``rows``).
    """
    import cupy as cp

    def launch(name: str, grid: tuple[int], block: tuple[int], args: tuple[Any, ...]) -> None:
        kernel(name, DENDROGRAM_FILE)(grid, block, args)

    events: list[tuple[str, Any]] = []

    def mark(phase: str) -> None:
        if timings_ms is not None:
            event = cp.cuda.Event()
            event.record()
            events.append((phase, event))

    mark("start")
    out = build_linkage(cp, launch, n, src, dst, weights, tail=tail, spacing=spacing, mark=mark)
    if timings_ms is not None and len(events) > 1:
        events[-1][1].synchronize()
        for (_, begin), (phase, end) in itertools.pairwise(events):
            timings_ms[phase] = timings_ms.get(phase, 0.0) + float(cp.cuda.get_elapsed_time(begin, end))
    return out


def _no_mark(phase: str) -> None:
    pass


def build_linkage(
    xp: Any, launch: Launch, n: int, src: Array, dst: Array, weights: Array, *, tail: int = TAIL,
    spacing: int = SPACING, mark: Callable[[str], None] = _no_mark,
) -> Array:  # fmt: skip
    """:func:`linkage_on_device` on the array module ``xp``, kernels run by ``launch``; ``mark(phase)``
    is called at the end of each phase."""
    if tail < 1 or tail & (tail - 1) or spacing < 1 or spacing & (spacing - 1):
        raise ValueError(f"tail and spacing must be powers of two; got {tail} and {spacing}.")
    if n > MAX_POINTS:
        raise GraphTooLargeError(
            f"the device dendrogram numbers clusters with 32 bits: at most {MAX_POINTS} points, got {n}.",
            limit=MAX_POINTS,
            actual=n,
        )
    u, v = xp.asarray(src), xp.asarray(dst)
    w = xp.ascontiguousarray(xp.asarray(weights), dtype=xp.float64)
    m = n - 1
    if n < 2 or not (u.ndim == v.ndim == w.ndim == 1 and u.shape[0] == v.shape[0] == w.shape[0] == m):
        return _host_answer(xp, n, u, v, w)
    if u.dtype.kind != "i" or v.dtype.kind != "i":
        return _host_answer(xp, n, u, v, w)
    checks = xp.stack(  # one read back: the smallest and largest id, whether a weight goes down
        [xp.minimum(u.min(), v.min()), xp.maximum(u.max(), v.max()), (w[1:] < w[:-1]).any()]
    ).astype(xp.int64)
    low, high, unsorted = (int(x) for x in checks.tolist())
    if low < 0 or high >= n or unsorted:
        return _host_answer(xp, n, u, v, w)
    mark("check")
    eu = xp.ascontiguousarray(u.astype(xp.int32))  # copies: both are rewritten in place
    ev = xp.ascontiguousarray(v.astype(xp.int32))
    if not _reps(xp, launch, m, eu, ev, tail):
        return _host_answer(xp, n, u, v, w)  # a cycle: the host names the components
    mark("reps")
    grid, block = _grid(m), (BLOCK,)
    launch("winners", grid, block, (np.int32(m), eu, ev))
    order = xp.argsort(eu, kind="stable") if xp is np else xp.argsort(eu)  # CuPy's sort is stable
    mark("sort")
    last_won = xp.empty(n, dtype=xp.int32)
    succ = xp.empty(2 * n, dtype=xp.int32)
    launch("init_tour", _grid(n), block, (np.int32(n), last_won, succ))
    launch("link_groups", grid, block, (np.int32(m), order, eu, ev, last_won, succ))
    owner, offset, suffix = _rank_tour(xp, launch, 2 * n, succ, spacing)
    del succ
    mark("tour")
    out = xp.empty((m, 4), dtype=xp.float64)
    launch(
        "write_rows", grid, block,
        (np.int32(m), np.int32(n), order, eu, ev, last_won, owner, offset, suffix, w, out),
    )  # fmt: skip
    mark("rows")
    return out


def _reps(xp: Any, launch: Launch, m: int, eu: Array, ev: Array, tail: int) -> bool:
    """Step 1: eu[i], ev[i] become the reps of the components edge i joins; False on a cycle."""
    levels = (m - 1).bit_length()  # S = 2^levels >= m
    log_tail = min(tail.bit_length() - 1, levels)
    word = xp.zeros(m + 1, dtype=xp.uint64)  # one per vertex, stamp 0: a root for every block
    grid, block = _grid(m), (BLOCK,)
    for log_s in range(levels, log_tail, -1):
        args = (np.int32(m), np.int32(log_s - 1), np.uint32(1 << (levels - log_s)), eu, ev, word)
        launch("unite_lower", grid, block, args)
        launch("find_upper", grid, block, args)
    cycle = xp.zeros(1, dtype=xp.int32)
    launch(
        "finish_blocks", _grid(-(-m // (1 << log_tail))), block,
        (np.int32(m), np.int32(log_tail), np.uint32(1 << (levels - log_tail)), eu, ev, word, cycle),
    )  # fmt: skip
    return int(cycle[0]) == 0


def _rank_tour(xp: Any, launch: Launch, tokens: int, succ: Array, spacing: int) -> tuple[Array, Array, Array]:
    """Step 3's list ranking: a token's tour position is ``tokens - suffix[owner] + offset``."""
    flag = xp.empty(tokens, dtype=xp.uint8)
    launch("mark_splitters", _grid(tokens), (BLOCK,), (np.int32(tokens), np.int32(spacing), flag))
    splitters = xp.flatnonzero(flag).astype(xp.int32)
    del flag
    k = int(splitters.shape[0])
    owner = xp.empty(tokens, dtype=xp.int32)
    offset = xp.empty(tokens, dtype=xp.int32)
    nxt = xp.empty(k, dtype=xp.int32)
    count = xp.empty(k, dtype=xp.int32)
    grid, block = _grid(k), (BLOCK,)
    walk = (np.int32(k), np.int32(spacing), splitters, succ, owner, offset, nxt, count)
    launch("walk_sublists", grid, block, walk)
    launch("splitter_links", grid, block, (np.int32(k), owner, nxt))
    sums, nexts, spare_sums, spare_nexts = count, nxt, xp.empty_like(count), xp.empty_like(nxt)
    for _ in range((k - 1).bit_length()):  # pointer jumping: 2^rounds >= k splitters
        launch("jump", grid, block, (np.int32(k), sums, nexts, spare_sums, spare_nexts))
        sums, nexts, spare_sums, spare_nexts = spare_sums, spare_nexts, sums, nexts
    return owner, offset, sums
