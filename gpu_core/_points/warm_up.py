"""The point-set half of the warm-up: every kernel and CuPy specialization a point-set request meets.

The hierarchy's kernels (``kernels/emst.cu``: one module, every template) and the brute-force ones
(``kernels/brute.cu``) compile on their first use; CuPy compiles an elementwise or reduction
kernel for each dtype it first meets, and picks some reductions' block sizes by the size of their
input (the number of points, of coordinates, the lists' width): so trees, core distances and query
lists run here on point sets of every power-of-two size class up to 2^14 points, coordinates up to
1,024 and list widths up to 256, from NumPy and from CuPy points.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .._backend.resolve import Backend, resolve_backend
from .index import SPATIAL_MAX_DIMENSIONS, build_index, tree_on_index, validated
from .neighbours import kth_distances, query_neighbours, query_points

#: point counts (2^j + 1) and min_samples (list widths 16 to 256) the warm-up computes trees of
WARM_UP_POINTS: tuple[int, ...] = tuple(2**j + 1 for j in range(1, 15))
WARM_UP_MIN_SAMPLES: tuple[int, ...] = (1, 2, 10, 20, 60, 120, 240)


def _tree(points: Any, backend: str, k: int, search: str = "auto") -> None:
    coords, chosen, from_cupy = validated(points, backend)  # type: ignore[arg-type]
    index = build_index(points, coords, chosen, from_cupy, search)  # type: ignore[arg-type]
    k = min(k, index.n)
    tree_on_index(index, k, time.perf_counter(), fresh=True, on_device=chosen == "gpu")
    tree_on_index(index, k, time.perf_counter(), fresh=False)
    queries, _ = query_points(index, points[: max(1, index.n // 2)])
    query_neighbours(index, queries, k)
    kth_distances(index, k)


def warm_up_points(backend: Backend = "auto") -> str:
    """Compute what a point-set request can (trees, core distances, query lists) on small sets of
    every size class, by the hierarchy and by brute force, on the GPU (the CPU backend compiles
    nothing). Returns the backend."""
    chosen = resolve_backend(backend)
    if chosen != "gpu":  # the CPU backend compiles nothing
        return chosen
    import cupy

    rng = np.random.default_rng(0)
    wide = SPATIAL_MAX_DIMENSIONS[chosen] + 1
    moves: tuple[Any, ...] = (np.asarray, cupy.asarray)  # NumPy points (the library) and CuPy (a worker)
    for move in moves:
        for d in (1, 2, 3, 8, wide):
            for n in WARM_UP_POINTS:
                points = rng.random((n, d))
                points[n // 2] = points[0]  # a duplicate: ties
                for k in (1, 5):
                    _tree(move(points), chosen, k)
        for k in WARM_UP_MIN_SAMPLES:  # every list width class, both paths (the hierarchy's > 64: the host)
            points = rng.random((600, wide))
            _tree(move(points), chosen, k)
            _tree(move(points[:, :3]), chosen, k)
        for d in (64, 128, 256, 512, 1024):  # the coordinates' size classes (norms, the exact recheck)
            _tree(move(rng.random((40, d)).astype(np.float32)), chosen, 3)
    return chosen
