"""The tree both point-set backends return, the exact squared distance they compare, and the
canonical order they finish it in."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class EuclideanTree:
    """A Euclidean (or mutual-reachability) minimum spanning tree of ``n`` points.

    ``src[i] < dst[i]`` are point indices and ``weights[i]`` the edge's weight (float64),
    in the order ``(weight², src, dst)``. ``core_distances`` is set when ``min_samples > 1``.
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

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])


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
) -> EuclideanTree:
    """Sort the edges into the canonical order (unless ``presorted``) and take square roots."""
    t0 = time.perf_counter()
    order = np.arange(lo.shape[0]) if presorted else np.lexsort((hi, lo, w2))
    src = np.ascontiguousarray(lo[order], dtype=np.int64)
    dst = np.ascontiguousarray(hi[order], dtype=np.int64)
    weights = np.sqrt(np.asarray(w2[order], dtype=np.float64))
    core = None if core2 is None else np.sqrt(core2)
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
