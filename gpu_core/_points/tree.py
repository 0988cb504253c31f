"""The tree both point-set backends return, the exact squared distance they compare, and the
canonical order they finish it in."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class PointTree:
    """A minimum spanning tree of ``n`` points under a metric (Euclidean by default), or HDBSCAN*'s
    mutual-reachability tree of them (``min_samples > 1``).

    ``src[i] < dst[i]`` are point indices and ``weights[i]`` the edge's weight (float64, in the
    metric's unit), in the order ``(key, src, dst)`` (the key: ``weight²`` for Euclidean trees,
    the metric's key otherwise, :mod:`gpu_core._points.metrics`). ``core_distances`` is set when
    ``min_samples > 1``; ``metric`` names the metric.
    The arrays are NumPy arrays, or CuPy arrays when the GPU backend was given CuPy points
    (the tree then stays on the device, like the points).
    ``timings_ms`` splits ``compute_ms`` into its parts (index build, core distances,
    Borůvka rounds, host work).
    """

    src: np.ndarray[Any, np.dtype[np.int64]]
    dst: np.ndarray[Any, np.dtype[np.int64]]
    weights: np.ndarray[Any, np.dtype[np.float64]]
    total_weight: float
    n: int
    dimensions: int
    min_samples: int
    backend: str
    compute_ms: float
    core_distances: np.ndarray[Any, np.dtype[np.float64]] | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    metric: str = "euclidean"

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])


#: the name the tree had when every tree was Euclidean (the same class)
EuclideanTree = PointTree


def squared_distances(coords_t: np.ndarray[Any, Any], i: Any, j: Any) -> np.ndarray[Any, Any]:
    """Exact ``Σ (a_k - b_k)²`` in dimension order, one rounding per operation (no FMA).

    ``coords_t`` is the ``(d, n)`` float64 transpose; ``i`` and ``j`` broadcast together.
    """
    acc: np.ndarray[Any, Any] = np.zeros(np.broadcast_shapes(np.shape(i), np.shape(j)), dtype=np.float64)
    for column in coords_t:
        diff = column[i] - column[j]
        acc = acc + diff * diff
    return acc


def finish_tree(
    lo: np.ndarray[Any, Any],
    hi: np.ndarray[Any, Any],
    w2: np.ndarray[Any, Any],
    *,
    n: int,
    d: int,
    min_samples: int,
    core2: np.ndarray[Any, Any] | None,
    backend: str,
    started: float,
    timings_ms: dict[str, float],
    presorted: bool = False,
    keys: bool = False,
) -> EuclideanTree:
    """Sort the edges into the canonical order (unless ``presorted``) and take square roots
    (``keys``: leave the keys as they are, for the metric's own map)."""
    t0 = time.perf_counter()
    order = np.arange(lo.shape[0]) if presorted else np.lexsort((hi, lo, w2))
    src = np.ascontiguousarray(lo[order], dtype=np.int64)
    dst = np.ascontiguousarray(hi[order], dtype=np.int64)
    root = (lambda a: np.array(a, dtype=np.float64)) if keys else np.sqrt
    weights = root(np.asarray(w2[order], dtype=np.float64))
    core = None if core2 is None else root(core2)
    timings_ms["host_ms"] = timings_ms.get("host_ms", 0.0) + (time.perf_counter() - t0) * 1e3
    return EuclideanTree(
        src=src,
        dst=dst,
        weights=weights,
        total_weight=float(weights.sum()),
        n=n,
        dimensions=d,
        min_samples=min_samples,
        backend=backend,
        compute_ms=(time.perf_counter() - started) * 1e3,
        core_distances=core,
        timings_ms=timings_ms,
    )
