"""The CPU backend for point sets: Borůvka rounds over SciPy's k-d tree, exact under the tie rule.

The k-d tree's searches (``kdtree``) only propose neighbours; every weight that decides anything is
exact there, and every choice here applies the ``(weight², min, max)`` order.

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

Design: docs/design/point-trees.md.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree

from .kdtree import L2, Array, KdTree, Neighbours, Search, core_distances
from .metrics import KeySpace
from .tree import EuclideanTree, finish_tree

#: neighbours cached per point at the start (core distances ask for min_samples more)
CACHED_NEIGHBOURS = 16
#: most neighbours one k-d tree query asks for before the complement-tree fallback
MAX_NEIGHBOURS = 64
#: deeper k-d tree queries only while at most 1/DEEP_FRACTION of the points are unresolved
DEEP_FRACTION = 32
INT64_MAX = np.iinfo(np.int64).max
#: about the bytes of one cKDTree node (SciPy's ckdtreenode: ten 8-byte fields)
KDTREE_NODE_BYTES = 80


class CpuIndex(KdTree):
    """The CPU backend's index: the :class:`~.kdtree.KdTree` of the points, with its bytes and build time.

    Read-only once built: every computation on it keeps its state (core distances, components)
    to itself. ``owns_coords``: the coordinates are a copy made for the index (counted in
    ``nbytes``), not the caller's array.
    """

    def __init__(self, coords: Array, *, owns_coords: bool, space: KeySpace = L2) -> None:
        started = time.perf_counter()
        super().__init__(coords, space)
        self._owns_coords = owns_coords
        self._build_ms = (time.perf_counter() - started) * 1e3

    @property
    def nbytes(self) -> int:
        tree = int(self.kdtree.indices.nbytes) + int(self.kdtree.size) * KDTREE_NODE_BYTES
        return int(self.coords_t.nbytes) + tree + (int(self.coords.nbytes) if self._owns_coords else 0)

    def build_ms(self) -> float:
        return self._build_ms

    def tree(
        self, min_samples: int, started: float, fresh: bool, on_device: bool, *, keys: bool = False,
        core_scale: float = 1.0,
    ) -> EuclideanTree:  # fmt: skip
        del on_device  # the CPU backend's trees are NumPy arrays
        return cpu_tree(self, min_samples, started, fresh, keys=keys, core_scale=core_scale)


def _row_best(nb: Neighbours, comp: Array, n: int) -> tuple[Array, Array]:
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


def _resolve(search: Search, nb: Neighbours, comp: Array, best_w: Array, best_pair: Array) -> Array:
    """Offer the rows' candidates; return the rows whose unlisted points might still do better."""
    row_w, row_pair = _row_best(nb, comp, search.n)
    comps = comp[nb.rows]
    _offer(best_w, best_pair, comps, row_w, row_pair)
    return nb.rows[nb.lower <= best_w[comps]]


def _complement_search(search: Search, rows: Array, comp: Array, best_w: Array, best_pair: Array) -> None:
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


def _lightest_edges(
    search: Search, cached: Neighbours, live: Neighbours, comp: Array, num_comp: int
) -> tuple[Array, Array, Neighbours]:
    """One Borůvka round's search: each component's lightest outgoing edge (``best_w``, and
    ``best_pair`` as ``lo * n + hi``), and the cached lists' rows that still list an outside point."""
    n = search.n
    best_w = np.full(num_comp, np.inf)
    best_pair = np.full(num_comp, INT64_MAX, dtype=np.int64)
    # cached lists: only rows that still list an outside point need scanning (components grow)
    row_w, row_pair = _row_best(live, comp, n)
    _offer(best_w, best_pair, comp[live.rows], row_w, row_pair)
    keep = np.isfinite(row_w)
    live = Neighbours(live.rows[keep], live.idx[keep], live.w2[keep], live.lower[keep])
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
    return best_w, best_pair, live


def cpu_tree(
    index: CpuIndex, k: int, started: float, fresh: bool, *, keys: bool = False, core_scale: float = 1.0
) -> EuclideanTree:
    """The tree of ``min_samples = k`` (checked) on ``index``; ``fresh``: built for this computation.
    ``keys``: weights and core distances as keys (no square roots); ``core_scale``: the core keys
    are multiplied by it before the rounds (``alpha``), and reported as they were."""
    n, d = index.n, index.d
    timings: dict[str, float] = {"index_ms": index.build_ms() if fresh else 0.0}
    empty = np.empty(0, dtype=np.int64)
    if n == 1:
        return finish_tree(
            empty, empty, np.empty(0), n=n, d=d, min_samples=k, backend="cpu",
            core2=np.zeros(1) if k > 1 else None, started=started, timings_ms=timings, keys=keys,
        )  # fmt: skip

    search = Search(index, None)
    core2: Array | None = None
    if k > 1:
        t0 = time.perf_counter()
        core2 = core_distances(search, k)
        search.core2 = np.append(core2 if core_scale == 1.0 else core2 * core_scale, np.inf)
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
        best_w, best_pair, live = _lightest_edges(search, cached, live, comp, num_comp)
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
        n=n, d=d, min_samples=k, core2=core2, backend="cpu", started=started, timings_ms=timings, keys=keys,
    )  # fmt: skip
