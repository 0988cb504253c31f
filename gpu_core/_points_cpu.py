"""The CPU backend for point sets: Borůvka rounds over SciPy's k-d tree, exact under the tie rule.

The k-d tree only *proposes* neighbours; every distance that decides anything is
recomputed here with the contract's formula (``_points.squared_distances``) and every
choice applies the ``(weight², min, max)`` order. A neighbour list is trusted only as
far as it provably reaches: the k-d tree's own distances differ from the exact ones
by a few ulps, so a point not listed is known to be at least ``(1 - SLACK)`` times the
last listed distance away, and a candidate counts only when it beats that bound
strictly (a tie with an unlisted point could otherwise win on the indices).

Each round, every component needs its lightest outgoing edge:

1. all points scan their cached list of nearest neighbours for points of other
   components (vectorized over the whole ``(n, K)`` list);
2. a point whose list cannot rule out a lighter (or tying) unlisted outside point,
   *and* whose lower bound does not exceed its component's best candidate so far,
   asks the k-d tree again with twice the neighbours, bounded by that candidate;
3. points still unresolved then (interior points of large components) query a
   k-d tree built on the points *outside* their component.

The k-d tree over all points (with the coordinates' transpose) is the point set's index
(:class:`CpuIndex`): it does not depend on ``min_samples``, so one index serves every tree.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree

from ._points import EuclideanTree, finish_tree, squared_distances

#: relative error bound of the k-d tree's distances against the exact ones (a generous one)
SLACK = 1e-9
#: neighbours cached per point at the start (core distances ask for min_samples more)
CACHED_NEIGHBOURS = 16
#: most neighbours one k-d tree query asks for before the complement-tree fallback
MAX_NEIGHBOURS = 64
#: deeper k-d tree queries only while at most 1/DEEP_FRACTION of the points are unresolved
DEEP_FRACTION = 32
INT64_MAX = np.iinfo(np.int64).max
#: about the bytes of one cKDTree node (SciPy's ckdtreenode: ten 8-byte fields)
KDTREE_NODE_BYTES = 80
Array = np.ndarray[Any, Any]


class CpuIndex:
    """SciPy's k-d tree over validated float64 coordinates, with their ``(d, n)`` transpose.

    Read-only once built: every computation on it keeps its state (core distances, components)
    to itself. ``owns_coords``: the coordinates are a copy made for the index (counted in
    ``nbytes``), not the caller's array.
    """

    def __init__(self, coords: Array, *, owns_coords: bool) -> None:
        started = time.perf_counter()
        self.coords = coords
        self.n, self.d = (int(x) for x in coords.shape)
        self.coords_t = np.ascontiguousarray(coords.T)
        self.kdtree = cKDTree(coords)
        self._owns_coords = owns_coords
        self._build_ms = (time.perf_counter() - started) * 1e3

    @property
    def nbytes(self) -> int:
        tree = int(self.kdtree.indices.nbytes) + int(self.kdtree.size) * KDTREE_NODE_BYTES
        return int(self.coords_t.nbytes) + tree + (int(self.coords.nbytes) if self._owns_coords else 0)

    def build_ms(self) -> float:
        return self._build_ms

    def tree(self, min_samples: int, started: float, fresh: bool, on_device: bool) -> EuclideanTree:
        del on_device  # the CPU backend's trees are NumPy arrays
        return cpu_tree(self, min_samples, started, fresh)


class _Neighbours:
    """Neighbour lists of some rows with their exact weights and the bound on unlisted points."""

    def __init__(self, rows: Array, idx: Array, w2: Array, lower: Array) -> None:
        self.rows = rows  # (r,) query point ids
        self.idx = idx  # (r, K) neighbour ids, n where missing
        self.w2 = w2  # (r, K) exact squared weights, inf where missing
        self.lower = lower  # (r,) every unlisted point weighs strictly more than... at least this


class _Search:
    """One computation's searches on an index (the index is shared; ``core2`` is this computation's)."""

    def __init__(self, index: CpuIndex, core2: Array | None) -> None:
        self.coords = index.coords
        self.coords_t = index.coords_t
        self.n = index.n
        self.tree = index.kdtree
        # core2 padded with one slot for the "missing neighbour" index n
        self.core2 = None if core2 is None else np.append(core2, np.inf)

    def query(
        self,
        rows: Array,
        k: int,
        bound2: Array | None = None,
        tree: Any = None,
        ids: Array | None = None,
    ) -> _Neighbours:
        """The ``k`` nearest points of ``rows`` (optionally only those closer than ``sqrt(bound2)``).

        ``tree`` / ``ids``: a k-d tree over a subset of the points and the subset's point ids.
        """
        tree = self.tree if tree is None else tree
        size = self.n if ids is None else ids.shape[0]
        k = max(1, min(k, size))
        ub: Array = np.full(rows.shape[0], np.inf)
        if bound2 is None:
            dist, idx = tree.query(self.coords[rows], k=k)
        else:
            # the floor keeps the bound positive once squared, so duplicates (distance 0) are found
            ub = np.sqrt(bound2) * (1.0 + 4 * SLACK) + 1e-150
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
                    for a in tree.query(self.coords[rows[sel]], k=k, distance_upper_bound=b)
                )
        dist = dist.reshape(rows.shape[0], k)
        idx = np.asarray(idx, dtype=np.int64).reshape(rows.shape[0], k)
        missing = idx >= size
        if ids is not None:
            idx = np.where(missing, self.n, ids[np.minimum(idx, size - 1)])
        else:
            idx = np.where(missing, self.n, idx)
        safe_idx = np.where(missing, rows[:, None], idx)
        w2 = squared_distances(self.coords_t, rows[:, None], safe_idx)
        if self.core2 is not None:
            w2 = np.maximum(w2, np.maximum(self.core2[rows][:, None], self.core2[idx]))
        w2[missing] = np.inf
        # every point not listed is at least this far (squared), by the k-d tree's distances
        last = dist[:, -1]
        reach = np.where(np.isinf(last), ub, np.inf if k >= size else last)
        lower = (reach * (1.0 - SLACK)) ** 2
        if self.core2 is not None:
            lower = np.maximum(lower, self.core2[rows])
        return _Neighbours(rows, idx, w2, lower)


def _core_distances(search: _Search, k: int) -> Array:
    """Squared distance of every point to its k-th nearest point (itself counted), exactly."""
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


def _row_best(nb: _Neighbours, comp: Array, n: int) -> tuple[Array, Array]:
    """Each row's lightest listed edge to another component: (weight², min·n + max), inf/MAX if none."""
    own = comp[nb.rows][:, None]
    padded = np.append(comp, -1)
    out = (padded[nb.idx] != own) & (nb.idx < n)
    w = np.where(out, nb.w2, np.inf)
    row_w = w.min(axis=1)
    rows = nb.rows[:, None]
    pair = np.minimum(rows, nb.idx) * n + np.maximum(rows, nb.idx)
    tie = out & (w == row_w[:, None])
    row_pair = np.where(tie, pair, INT64_MAX).min(axis=1)
    return row_w, row_pair


def _offer(best_w: Array, best_pair: Array, comps: Array, row_w: Array, row_pair: Array) -> None:
    """Lower each component's best edge by the rows' candidates, under the (weight², pair) order."""
    finite = np.isfinite(row_w)
    comps, row_w, row_pair = comps[finite], row_w[finite], row_pair[finite]
    before = best_w.copy()
    np.minimum.at(best_w, comps, row_w)
    best_pair[best_w < before] = INT64_MAX  # a lighter edge makes the old pair stale
    at = row_w == best_w[comps]
    np.minimum.at(best_pair, comps[at], row_pair[at])


def _resolve(search: _Search, nb: _Neighbours, comp: Array, best_w: Array, best_pair: Array) -> Array:
    """Offer the rows' candidates; return the rows whose unlisted points might still do better."""
    row_w, row_pair = _row_best(nb, comp, search.n)
    comps = comp[nb.rows]
    _offer(best_w, best_pair, comps, row_w, row_pair)
    return nb.rows[nb.lower <= best_w[comps]]


def _complement_search(search: _Search, rows: Array, comp: Array, best_w: Array, best_pair: Array) -> None:
    """Nearest outside points of ``rows`` from k-d trees built on the complement of each component."""
    comps = comp[rows]
    order = np.argsort(comps, kind="stable")
    uniq, starts = np.unique(comps[order], return_index=True)
    for c, s, e in zip(uniq, starts, [*starts[1:], order.shape[0]], strict=True):
        members = rows[order[s:e]]
        ids = np.flatnonzero(comp != c)
        tree = cKDTree(search.coords[ids])
        k = 4
        while members.size:
            nb = search.query(members, k, best_w[comp[members]], tree=tree, ids=ids)
            members = _resolve(search, nb, comp, best_w, best_pair)
            k *= 2


def cpu_tree(index: CpuIndex, k: int, started: float, fresh: bool) -> EuclideanTree:
    """The tree of ``min_samples = k`` (checked) on ``index``; ``fresh``: built for this computation."""
    n, d = index.n, index.d
    timings: dict[str, float] = {"index_ms": index.build_ms() if fresh else 0.0}
    empty = np.empty(0, dtype=np.int64)
    if n == 1:
        return finish_tree(
            empty, empty, np.empty(0), n=n, d=d, min_samples=k, backend="cpu",
            core2=np.zeros(1) if k > 1 else None, started=started, timings_ms=timings,
        )  # fmt: skip

    search = _Search(index, None)
    core2: Array | None = None
    if k > 1:
        t0 = time.perf_counter()
        core2 = _core_distances(search, k)
        search.core2 = np.append(core2, np.inf)
        timings["core_ms"] = (time.perf_counter() - t0) * 1e3

    t0 = time.perf_counter()
    all_rows = np.arange(n)
    cached = search.query(all_rows, CACHED_NEIGHBOURS + (k if k > 1 else 0))
    live = cached
    comp = np.arange(n)
    num_comp = n
    lo_parts: list[Array] = []
    hi_parts: list[Array] = []
    w_parts: list[Array] = []
    rounds = 0
    while num_comp > 1:
        rounds += 1
        best_w = np.full(num_comp, np.inf)
        best_pair = np.full(num_comp, INT64_MAX, dtype=np.int64)
        # cached lists: only rows that still list an outside point need scanning (components grow)
        row_w, row_pair = _row_best(live, comp, n)
        _offer(best_w, best_pair, comp[live.rows], row_w, row_pair)
        keep = np.isfinite(row_w)
        live = _Neighbours(live.rows[keep], live.idx[keep], live.w2[keep], live.lower[keep])
        rows = np.flatnonzero(cached.lower <= best_w[comp])
        kk = 2 * cached.idx.shape[1]
        # bounded k-d tree queries with more neighbours while few rows are unresolved ...
        while rows.size and kk <= MAX_NEIGHBOURS and rows.size * DEEP_FRACTION <= n:
            nb = search.query(rows, kk, best_w[comp[rows]])
            rows = _resolve(search, nb, comp, best_w, best_pair)
            kk *= 2
        # ... else (interior points of large components) trees over each component's complement
        if rows.size:
            _complement_search(search, rows, comp, best_w, best_pair)
        # every component now has its lightest outgoing edge; the strict order makes them a forest
        pairs, first = np.unique(best_pair, return_index=True)
        lo, hi = pairs // n, pairs % n
        lo_parts.append(lo)
        hi_parts.append(hi)
        w_parts.append(best_w[first])
        graph = coo_matrix((np.ones(lo.shape[0]), (comp[lo], comp[hi])), shape=(num_comp, num_comp))
        num_comp, relabel = connected_components(graph, directed=False)
        comp = relabel[comp]
    timings["rounds_ms"] = (time.perf_counter() - t0) * 1e3
    timings["rounds"] = float(rounds)
    return finish_tree(
        np.concatenate(lo_parts), np.concatenate(hi_parts), np.concatenate(w_parts),
        n=n, d=d, min_samples=k, core2=core2, backend="cpu", started=started, timings_ms=timings,
    )  # fmt: skip
