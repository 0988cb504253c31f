"""SciPy's k-d tree as an exact neighbour search, under the point sets' tie rule.

The k-d tree only *proposes* neighbours; every distance that decides anything is recomputed with
the contract's formula (``tree.squared_distances``) and every choice applies the
``(weight², min, max)`` order. A neighbour list is trusted only as far as it provably reaches: the
k-d tree's own distances differ from the exact ones by a few ulps, so a point not listed is known
to be at least ``(1 - SLACK)`` times the last listed distance away, and a candidate counts only
when it beats that bound strictly (a tie with an unlisted point could otherwise win on the indices).

The CPU backend's Borůvka rounds (``cpu``) search with it; the GPU backend (``gpu``) takes its
exact core distances from it where ``min_samples`` is beyond the device's registers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.spatial import cKDTree

from .metrics import KeySpace
from .tree import squared_distances

#: the Euclidean key space (squared distances), the default
L2 = KeySpace("l2")
#: relative error bound of the k-d tree's distances against the exact ones (a generous one)
SLACK = 1e-9
Array = np.ndarray[Any, Any]


class KdTree:
    """SciPy's k-d tree over validated float64 coordinates, with their ``(d, n)`` transpose.

    Read-only once built: every search on it keeps its state to itself. ``space``: the keys its
    searches compare (squared Euclidean distances; Minkowski keys search with SciPy's ``p``).
    """

    def __init__(self, coords: Array, space: KeySpace = L2) -> None:
        self.coords = coords
        self.space = space
        self.n, self.d = (int(x) for x in coords.shape)
        self.coords_t = np.ascontiguousarray(coords.T)
        self.kdtree = cKDTree(coords)


class Neighbours:
    """Neighbour lists of some rows with their exact weights and the bound on unlisted points."""

    def __init__(self, rows: Array, idx: Array, w2: Array, lower: Array) -> None:
        self.rows = rows  # (r,) query point ids
        self.idx = idx  # (r, K) neighbour ids, n where missing
        self.w2 = w2  # (r, K) exact squared weights, inf where missing
        self.lower = lower  # (r,) every unlisted point weighs strictly more than... at least this


class Search:
    """One computation's searches on an index (the index is shared; ``core2`` is this computation's)."""

    def __init__(self, index: KdTree, core2: Array | None) -> None:
        self.coords = index.coords
        self.coords_t = index.coords_t
        self.n = index.n
        self.tree = index.kdtree
        self.space = index.space
        # core2 padded with one slot for the "missing neighbour" index n
        self.core2 = None if core2 is None else np.append(core2, np.inf)

    def query(
        self,
        rows: Array,
        k: int,
        bound2: Array | None = None,
        tree: Any = None,
        ids: Array | None = None,
    ) -> Neighbours:
        """The ``k`` nearest points of ``rows`` (optionally only those closer than ``sqrt(bound2)``).

        ``tree`` / ``ids``: a k-d tree over a subset of the points and the subset's point ids.
        """
        tree = self.tree if tree is None else tree
        space = self.space
        p = space.kdtree_p
        size = self.n if ids is None else ids.shape[0]
        k = max(1, min(k, size))
        ub: Array = np.full(rows.shape[0], np.inf)
        if bound2 is None:
            dist, idx = tree.query(self.coords[rows], k=k, p=p)
        else:
            # the floor keeps the bound positive once squared, so duplicates (distance 0) are found
            ub = space.distance_above(bound2) * (1.0 + 4 * SLACK) + 1e-150
            dist = np.empty((rows.shape[0], k))
            idx = np.empty((rows.shape[0], k), dtype=np.int64)
            # cKDTree takes one scalar bound per call: round bounds up to powers of two and group
            ub = np.exp2(np.ceil(np.log2(ub)))
            order = np.argsort(ub, kind="stable")
            uniq, starts = np.unique(ub[order], return_index=True)
            for b, s, e in zip(uniq, starts, [*starts[1:], order.shape[0]], strict=True):
                sel = order[s:e]
                dist[sel], idx[sel] = (
                    np.asarray(a).reshape(sel.shape[0], k)
                    for a in tree.query(self.coords[rows[sel]], k=k, p=p, distance_upper_bound=b)
                )
        dist = dist.reshape(rows.shape[0], k)
        idx = np.asarray(idx, dtype=np.int64).reshape(rows.shape[0], k)
        missing = idx >= size
        if ids is not None:
            idx = np.where(missing, self.n, ids[np.minimum(idx, size - 1)])
        else:
            idx = np.where(missing, self.n, idx)
        safe_idx = np.where(missing, rows[:, None], idx)
        if space.kind == "l2":
            w2 = squared_distances(self.coords_t, rows[:, None], safe_idx)
        else:
            w2 = space.keys(self.coords_t, rows[:, None], safe_idx)
        if self.core2 is not None:
            w2 = np.maximum(w2, np.maximum(self.core2[rows][:, None], self.core2[idx]))
        w2[missing] = np.inf
        # every point not listed is at least this far (squared), by the k-d tree's distances
        last = dist[:, -1]
        reach = np.where(np.isinf(last), ub, np.inf if k >= size else last)
        lower = (reach * (1.0 - SLACK)) ** 2 if space.kind == "l2" else space.key_below(reach * (1.0 - SLACK))
        if self.core2 is not None:
            lower = np.maximum(lower, self.core2[rows])
        return Neighbours(rows, idx, w2, lower)


def core_distances(search: Search, k: int) -> Array:
    """Every point's key (squared distance) to its k-th nearest point (itself counted), exactly."""
    n = search.n
    core2 = np.empty(n)
    rows = np.arange(n)
    kk = k + 4
    while rows.size:
        nb = search.query(rows, kk)
        kth = np.partition(nb.w2, k - 1, axis=1)[:, k - 1]
        done = kth < nb.lower
        core2[rows[done]] = kth[done]
        rows = rows[~done]
        kk *= 2
    return core2


def exact_core_distances(coords: Array, k: int, space: KeySpace = L2) -> Array:
    """Core keys (``min_samples = k``; squared distances by default) of validated float64
    ``coords``, exactly."""
    return core_distances(Search(KdTree(coords, space), None), k)
