"""Point sets for the tests, and a brute-force O(n²) oracle for Euclidean and mutual-reachability trees.

The oracle shares nothing with the engine: a dense squared-distance matrix computed with the
contract's formula (float64, dimension order, one rounding per operation) and Prim's algorithm
under the ``(weight², min(i, j), max(i, j))`` order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PointSet:
    name: str
    points: np.ndarray


def random_points(seed: int, n: int, d: int, dtype=np.float64) -> PointSet:
    rng = np.random.default_rng(seed)
    return PointSet(f"random-{n}x{d}", rng.random((n, d)).astype(dtype))


def blobs(seed: int, n: int, d: int, centers: int = 5, spread: float = 0.05, dtype=np.float64) -> PointSet:
    rng = np.random.default_rng(seed)
    c = rng.random((centers, d)) * 4
    which = rng.integers(0, centers, n)
    return PointSet(f"blobs-{n}x{d}", (c[which] + rng.normal(0, spread, (n, d))).astype(dtype))


def duplicated(seed: int, n: int, d: int) -> PointSet:
    rng = np.random.default_rng(seed)
    base = rng.random((max(1, n // 4), d))
    return PointSet(f"duplicated-{n}x{d}", base[rng.integers(0, base.shape[0], n)])


def collinear(seed: int, n: int, d: int) -> PointSet:
    rng = np.random.default_rng(seed)
    t = rng.integers(0, n // 2 + 1, n).astype(np.float64)  # equal spacings and repeats: many ties
    direction = np.arange(1, d + 1, dtype=np.float64)
    return PointSet(f"collinear-{n}x{d}", t[:, None] * direction[None, :])


def integer_grid(seed: int, n: int, d: int) -> PointSet:
    rng = np.random.default_rng(seed)
    side = max(2, round(n ** (1.0 / d)) + 1)
    return PointSet(f"grid-{n}x{d}", rng.integers(0, side, (n, d)).astype(np.float32))


def point_sets(n: int, d: int, seed: int = 0) -> list[PointSet]:
    return [
        random_points(seed, n, d),
        random_points(seed + 1, n, d, np.float32),
        blobs(seed + 2, n, d),
        duplicated(seed + 3, n, d),
        collinear(seed + 4, n, d),
        integer_grid(seed + 5, n, d),
    ]


def squared_distance_matrix(points: np.ndarray) -> np.ndarray:
    x = np.asarray(points, dtype=np.float64)
    acc = np.zeros((x.shape[0], x.shape[0]))
    for k in range(x.shape[1]):
        diff = x[:, k][:, None] - x[:, k][None, :]
        acc = acc + diff * diff
    return acc


def core_squared(d2: np.ndarray, min_samples: int) -> np.ndarray:
    return np.sort(d2, axis=1)[:, min_samples - 1]


def weight_matrix(points: np.ndarray, min_samples: int = 1) -> np.ndarray:
    d2 = squared_distance_matrix(points)
    if min_samples > 1:
        core = core_squared(d2, min_samples)
        d2 = np.maximum(d2, np.maximum(core[:, None], core[None, :]))
    return d2


def prim_tree(w2: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Prim's algorithm on a dense matrix under the (w², min, max) order; edges sorted by that order."""
    n = w2.shape[0]
    in_tree = np.zeros(n, dtype=bool)
    in_tree[0] = True
    best_w = w2[0].copy()
    best_from = np.zeros(n, dtype=np.int64)
    edges = []
    for _ in range(n - 1):
        lo = np.minimum(best_from, np.arange(n))
        hi = np.maximum(best_from, np.arange(n))
        cand = np.flatnonzero(~in_tree)
        order = np.lexsort((hi[cand], lo[cand], best_w[cand]))
        v = cand[order[0]]
        edges.append((best_w[v], lo[v], hi[v]))
        in_tree[v] = True
        # keep, per vertex, the lightest edge into the tree under the full order
        w_new = w2[v]
        lo_new, hi_new = np.minimum(v, np.arange(n)), np.maximum(v, np.arange(n))
        better = (w_new < best_w) | ((w_new == best_w) & ((lo_new < lo) | ((lo_new == lo) & (hi_new < hi))))
        better &= ~in_tree
        best_w[better] = w_new[better]
        best_from[better] = v
    edges.sort()
    w = np.array([e[0] for e in edges], dtype=np.float64)
    src = np.array([e[1] for e in edges], dtype=np.int64)
    dst = np.array([e[2] for e in edges], dtype=np.int64)
    return src, dst, np.sqrt(w)
