"""The device half of :mod:`.metrics` (``kernels/metrics.cu``): unit vectors, distances of keys,
``pow`` of elements and exact Minkowski key tiles, on CuPy arrays."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._backend.kernels import METRICS_FILE, kernel

Array = Any
BLOCK = 256
#: the tile kernel's block edge (kTile in kernels/metrics.cu)
TILE_EDGE = 16


def _grid(work: int) -> tuple[int]:
    return (max(1, min(math.ceil(work / BLOCK), 65535)),)


def device_unit_rows(coords: Array) -> tuple[Array, Array]:
    """(each row's ``sum x_k^2``, the unit rows) of C-contiguous float64 device coordinates."""
    import cupy as cp

    x = cp.ascontiguousarray(coords, dtype=cp.float64)
    n, d = (int(v) for v in x.shape)
    norm2 = cp.empty(n, dtype=cp.float64)
    out = cp.empty_like(x)
    kernel("unit_rows", METRICS_FILE)(_grid(n), (BLOCK,), (x, np.int64(n), np.int32(d), norm2, out))
    return norm2, out


def device_unit_vectors(coords: Array) -> Array:
    """The ``(n, 3)`` unit vectors of ``(n, 2)`` latitude and longitude rows (radians)."""
    import cupy as cp

    x = cp.ascontiguousarray(coords, dtype=cp.float64)
    n = int(x.shape[0])
    out = cp.empty((n, 3), dtype=cp.float64)
    kernel("unit_vectors", METRICS_FILE)(_grid(n), (BLOCK,), (x, np.int64(n), out))
    return out


def device_distances(keys: Array, distance_map: int, inverse_p: float, alpha: float) -> Array:
    import cupy as cp

    flat = cp.ascontiguousarray(keys, dtype=cp.float64)
    out = cp.empty_like(flat)
    n = int(flat.size)
    if n:
        kernel("key_distances", METRICS_FILE)(
            _grid(n), (BLOCK,),
            (flat, np.int64(n), np.int32(distance_map), np.float64(inverse_p), np.float64(alpha), out),
        )  # fmt: skip
    return out


def device_pow(x: Array, p: float) -> Array:
    import cupy as cp

    flat = cp.ascontiguousarray(x, dtype=cp.float64)
    out = cp.empty_like(flat)
    n = int(flat.size)
    if n:
        kernel("pow_elements", METRICS_FILE)(_grid(n), (BLOCK,), (flat, np.int64(n), np.float64(p), out))
    return out


def device_cross_keys(queries: Array, targets: Array, code: int, p: float) -> Array:
    """Exact Minkowski keys (kind ``code`` of :data:`.metrics.KIND_CODES`, 1 to 3) of every query
    row against every target row, ``(q, t)``."""
    import cupy as cp

    q = cp.ascontiguousarray(queries, dtype=cp.float64)
    t = cp.ascontiguousarray(targets, dtype=cp.float64)
    nq, nt, d = int(q.shape[0]), int(t.shape[0]), int(q.shape[1])
    out = cp.empty((nq, nt), dtype=cp.float64)
    if nq and nt:
        grid = (math.ceil(nt / TILE_EDGE), math.ceil(nq / TILE_EDGE))
        kernel("minkowski_tile", METRICS_FILE)(
            grid, (TILE_EDGE, TILE_EDGE),
            (q, np.int32(nq), t, np.int32(nt), np.int32(d), np.int32(code), np.float64(p), out),
        )  # fmt: skip
    return out
