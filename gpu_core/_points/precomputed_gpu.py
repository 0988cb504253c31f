"""The device half of :mod:`.precomputed` for dense matrices: core distances by radix select per
row, Borůvka rounds over the rows (``kernels/precomputed.cu``), linking by ``emst.cu``'s kernels."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._backend.kernels import EMST_FILE, PRECOMPUTED_FILE, kernel
from ..errors import DeviceError

Array = Any
BLOCK = 256
#: blocks of the row kernels (one row per block at a time)
ROW_BLOCKS = 4096


def _grid(work: int) -> tuple[int]:
    return (max(1, min(math.ceil(work / BLOCK), 65535)),)


def device_dense_tree(
    matrix: Array, k: int, core_scale: float, symmetric: bool, timings: dict[str, float]
) -> tuple[Array, Array, Array, Array]:
    """``(lo, hi, weight, core)`` on the device: the tree's edges in the canonical order."""
    import cupy as cp

    n = int(matrix.shape[0])
    rows = (min(n, ROW_BLOCKS),)
    if k > 1:
        core = cp.empty(n, dtype=cp.float64)
        kernel("row_kth", PRECOMPUTED_FILE)(rows, (BLOCK,), (matrix, np.int64(n), np.int32(k), core))
    else:
        core = cp.zeros(n, dtype=cp.float64)
    scaled = core if core_scale == 1.0 else core * core_scale
    comp = cp.arange(n, dtype=cp.int32)
    parent = cp.arange(n, dtype=cp.int32)
    pos = cp.arange(n, dtype=cp.int32)
    bound = cp.empty(n, dtype=cp.uint64)
    pair = cp.empty(n, dtype=cp.uint64)
    best_w = cp.empty(n, dtype=cp.float64)
    best_pair = cp.empty(n, dtype=cp.uint64)
    edges = cp.empty(n - 1, dtype=cp.int64)
    edge_w = cp.empty(n - 1, dtype=cp.float64)
    num_edges = cp.zeros(1, dtype=cp.int32)
    num_roots = cp.zeros(1, dtype=cp.int32)
    grid = _grid(n)
    roots, rounds = n, 0
    while roots > 1:
        rounds += 1
        if rounds > 64:
            raise DeviceError(f"the Borůvka rounds stopped making progress ({roots} components left).")
        kernel("reset_round", EMST_FILE)(grid, (BLOCK,), (np.int32(n), bound, pair))
        kernel("dense_nearest", PRECOMPUTED_FILE)(
            rows, (BLOCK,),
            (matrix, np.int64(n), scaled, comp, np.int32(symmetric), bound, best_w, best_pair),
        )  # fmt: skip
        kernel("offer_pairs", EMST_FILE)(grid, (BLOCK,), (np.int32(n), comp, best_w, best_pair, bound, pair))
        kernel("link_components", EMST_FILE)(
            grid, (BLOCK,), (np.int32(n), comp, pos, bound, pair, parent, num_edges, edges, edge_w)
        )
        num_roots.fill(0)
        kernel("compress", EMST_FILE)(grid, (BLOCK,), (np.int32(n), parent, comp, num_roots))
        roots = int(num_roots.get()[0])
    count = int(num_edges.get()[0])
    if count != n - 1:
        raise DeviceError(f"the device tree has {count} edges instead of {n - 1}.")
    timings["rounds"] = float(rounds)
    by_pair = cp.argsort(edges)
    order = by_pair[cp.argsort(edge_w[by_pair])]
    packed = edges[order]
    lo = (packed >> 32).astype(cp.int64)
    hi = (packed & 0xFFFFFFFF).astype(cp.int64)
    return lo, hi, edge_w[order], core
