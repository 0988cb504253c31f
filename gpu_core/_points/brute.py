"""Exact trees of points of many coordinates: Borůvka rounds over exact neighbour lists, by brute force.

Above a few dozen coordinates a spatial index prunes almost nothing, so the searches here compare
every point with every other in tiles (``brute_cpu``: NumPy's BLAS; ``brute_gpu``: the float16
tensor-core kernels of ``kernels/brute.cu``), with a fast filtered distance and an exact recheck of
whatever the filter cannot rule out (``filter`` states the margin). Both backends run this module's rounds
on their array module, so they take the same steps and return the same arrays.

**Lists.** Every point first gets its exact ``L`` nearest points (itself included, ascending by
``(d², index)``): the k-nearest-neighbour pass any exact method pays. They give the core distances
and settle most Borůvka edges. A point's list is turned into edges ordered by ``(key, index)``
(``key``: the squared distance, or the mutual-reachability weight ``max(core_i², core_j², d²)``), with
a *bound*: every point not in the list weighs at least the bound. From the nearest-neighbour list,
the bound is the last listed ``d²`` (and ``core_i²``), and under mutual reachability only entries
lighter than it stay listed. A point whose list holds no point of another component any more is
*refreshed*: its ``L`` lightest edges to points outside its component, by the same brute force
with the component's own points skipped (``Engine.outside``), and the bound is the last one's key.

**A round.** The first listed entry of another component is the point's exact lightest edge out
(nothing unlisted is lighter: its key is past the list's). A component's lightest edge is the
least of its points' (the ``(key, min, max)`` order), except where a point without such an entry
might still beat it: its bound is at most the component's best. Only those points are refreshed
(a component with no candidate at all first refreshes its point of smallest bound, to get one).
Components only grow, so a list stays valid: entries now inside are skipped, and its bound still
bounds what it does not list.

Design: docs/design/brute-force.md.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import numpy as np

Array = Any  # a NumPy or a CuPy array

#: list width of Euclidean trees (min_samples = 1), the point itself included
LIST_MIN = 16
#: listed neighbours beyond min_samples (with none beyond it, a mutual-reachability list settles
#: nothing: every edge of a point weighs at least its core distance, the last listed distance)
LIST_EXTRA = 16
#: Borůvka halves the components at least each round: more rounds than this is a bug
MAX_ROUNDS = 64


def list_width(n: int, k: int) -> int:
    """Neighbours listed per point for ``min_samples = k`` (the point itself counted)."""
    return min(n, LIST_MIN if k == 1 else k + LIST_EXTRA)


class Engine(Protocol):
    """The brute-force searches of one backend (``brute_cpu.HostEngine``, ``brute_gpu.DeviceEngine``)."""

    @property
    def xp(self) -> Any: ...

    @property
    def n(self) -> int: ...

    def nearest(self, width: int) -> tuple[Array, Array]:
        """Every point's ``width`` nearest points, itself among them: ids ``(n, width)`` int64 and
        exact squared distances (float64), each row ascending by ``(d², id)``."""
        ...

    def outside(self, rows: Array, comp: Array, core2: Array | None, width: int) -> tuple[Array, Array]:
        """The ``width`` lightest edges of each of ``rows`` to points of other components (``comp``:
        each point's), by ``(key, id)``: ids and exact keys (``d²``, or ``max(core2_i, core2_j, d²)``);
        ``-1`` and ``+inf`` past the points outside."""
        ...


class BruteIndex:
    """What both backends' brute-force indexes provide besides trees (``neighbours`` reads it)."""

    def nearest(self, k: int) -> tuple[Array, Array]:
        """Every point's ``k`` nearest points (itself counted): ids and exact squared distances."""
        raise NotImplementedError

    def query(self, queries: Array, k: int) -> tuple[Array, Array]:
        """The ``k`` nearest points of the set to each of ``queries`` (validated, the index's
        array module): ids and exact squared distances, ascending by ``(d², id)``."""
        raise NotImplementedError

    def coordinates(self) -> Array:
        """The points in their own order (float64, the index's array module)."""
        raise NotImplementedError


def stable_argsort(xp: Any, keys: Array, axis: int = -1) -> Array:
    """A stable argsort (CuPy's is always stable)."""
    return np.argsort(keys, axis=axis, kind="stable") if xp is np else keys.argsort(axis=axis)


def boruvka(
    engine: Engine, k: int, timings: dict[str, float], core_scale: float = 1.0
) -> tuple[Array, Array, Array, Array | None]:
    """The tree of ``min_samples = k`` (``n >= 2``): its edges' ``(lo, hi, key)`` in no order and
    the core keys (squared core distances; None for ``k = 1``), in the engine's array module.
    ``core_scale``: the core keys are multiplied by it for the rounds (``alpha``) and returned as
    they were. ``timings`` receives ``lists_ms``, ``rounds_ms``, ``rounds`` and ``refreshed``
    (points refreshed)."""
    xp, n = engine.xp, engine.n
    width = list_width(n, k)
    t0 = time.perf_counter()
    ids, d2 = engine.nearest(width)
    reported = xp.ascontiguousarray(d2[:, k - 1]) if k > 1 else None
    core2 = reported if reported is None or core_scale == 1.0 else reported * core_scale
    ids, keys, bound = _edge_lists(xp, ids, d2, core2, n)
    del d2
    timings["lists_ms"] = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    rows = xp.arange(n, dtype=xp.int64)
    comp = rows.copy()
    count = n
    parts: list[tuple[Array, Array, Array]] = []
    rounds = refreshed = 0
    while count > 1:
        rounds += 1
        if rounds > MAX_ROUNDS:
            raise RuntimeError(f"the Borůvka rounds stopped making progress ({count} components left).")
        w, pair, has = _listed_edges(xp, ids, keys, comp, rows, n)
        best_w, best_pair = _component_min(xp, comp, count, w, pair, has)
        for stage in (1, 2):
            need = ~has & (bound <= best_w[comp])
            todo = _first_per_component(xp, comp, need, bound, best_w) if stage == 1 else xp.flatnonzero(need)
            if int(todo.size) == 0:
                continue
            new_ids, new_keys = engine.outside(todo, comp, core2, width)
            ids[todo], keys[todo] = new_ids, new_keys
            bound[todo] = xp.where(new_ids[:, -1] >= 0, new_keys[:, -1], xp.inf)
            w[todo], pair[todo], has[todo] = _listed_edges(xp, new_ids, new_keys, comp, todo, n)
            refreshed += int(todo.size)
            best_w, best_pair = _component_min(xp, comp, count, w, pair, has)
        if bool((best_pair < 0).any()):
            raise RuntimeError("a component found no edge out although others remain.")
        pairs, first = xp.unique(best_pair, return_index=True)
        lo, hi = pairs // n, pairs % n
        parts.append((lo, hi, best_w[first]))
        comp, count = _merge(xp, comp, count, comp[lo], comp[hi])
    timings["rounds_ms"] = (time.perf_counter() - t0) * 1e3
    timings["rounds"] = float(rounds)
    timings["refreshed"] = float(refreshed)
    lo, hi, w2 = (xp.concatenate([p[i] for p in parts]) for i in range(3))
    return lo, hi, w2, reported


def _edge_lists(xp: Any, ids: Array, d2: Array, core2: Array | None, n: int) -> tuple[Array, Array, Array]:
    """The nearest-neighbour lists as edge lists ``(ids, keys)`` by ``(key, id)``, and their bounds."""
    width = int(ids.shape[1])
    if core2 is None:  # the Euclidean key is d²: the list is already in order, every entry valid
        bound = d2[:, -1].copy() if width < n else xp.full(n, xp.inf)
        return ids, d2.copy(), bound
    keys = xp.maximum(xp.maximum(core2[:, None], core2[ids]), d2)
    by_id = stable_argsort(xp, ids, axis=1)
    ids, keys = xp.take_along_axis(ids, by_id, axis=1), xp.take_along_axis(keys, by_id, axis=1)
    by_key = stable_argsort(xp, keys, axis=1)
    ids, keys = xp.take_along_axis(ids, by_key, axis=1), xp.take_along_axis(keys, by_key, axis=1)
    if width == n:  # every point listed
        return ids, keys, xp.full(n, xp.inf)
    # an unlisted point j has d² >= the last listed (and every key >= core_i²): only lighter entries
    # are known to come before every unlisted edge
    bound = xp.maximum(core2, d2[:, -1])
    valid = keys < bound[:, None]
    return xp.where(valid, ids, -1), xp.where(valid, keys, xp.inf), bound


def _listed_edges(
    xp: Any, ids: Array, keys: Array, comp: Array, rows: Array, n: int
) -> tuple[Array, Array, Array]:
    """Each row's first listed entry of another component: its key, its pair ``min * n + max`` and
    whether there is one (keys ``+inf`` where not)."""
    safe = xp.where(ids < 0, rows[:, None], ids)  # empty slots: the row itself, never outside
    out = comp[safe] != comp[rows][:, None]
    has = out.any(axis=1)
    first = xp.argmax(out.view(xp.int8), axis=1)[:, None]  # the first True (int8: CuPy's argmax)
    other = xp.take_along_axis(safe, first, axis=1)[:, 0]
    w = xp.where(has, xp.take_along_axis(keys, first, axis=1)[:, 0], xp.inf)
    pair = xp.minimum(rows, other) * n + xp.maximum(rows, other)
    return w, pair, has


def _component_min(
    xp: Any, comp: Array, count: int, w: Array, pair: Array, has: Array
) -> tuple[Array, Array]:
    """Each component's least ``(key, pair)`` over the rows that have one (``+inf``, -1 elsewhere)."""
    idx = xp.flatnonzero(has)
    for key in (pair, w, comp):  # stable sorts, least significant first
        idx = idx[stable_argsort(xp, key[idx])]
    head = _heads(xp, comp[idx])
    chosen = idx[head]
    best_w = xp.full(count, xp.inf)
    best_pair = xp.full(count, -1, dtype=xp.int64)
    best_w[comp[chosen]] = w[chosen]
    best_pair[comp[chosen]] = pair[chosen]
    return best_w, best_pair


def _first_per_component(xp: Any, comp: Array, need: Array, bound: Array, best_w: Array) -> Array:
    """In each component without any candidate, its point of smallest bound (then index) among ``need``."""
    idx = xp.flatnonzero(need & xp.isinf(best_w[comp]))
    for key in (bound, comp):
        idx = idx[stable_argsort(xp, key[idx])]
    return idx[_heads(xp, comp[idx])]


def _heads(xp: Any, sorted_keys: Array) -> Array:
    """Where a run of equal keys starts."""
    head = xp.ones(sorted_keys.shape[0], dtype=xp.bool_)
    head[1:] = sorted_keys[1:] != sorted_keys[:-1]
    return head


def _merge(xp: Any, comp: Array, count: int, a: Array, b: Array) -> tuple[Array, int]:
    """Components joined along edges between components ``a[e]`` and ``b[e]``: new dense labels."""
    parent = xp.arange(count, dtype=xp.int64)
    while True:
        pa, pb = parent[a], parent[b]  # roots: parent is compressed
        active = pa != pb
        if not bool(active.any()):
            break
        # every root points to a smaller label, so no cycle forms; duplicates: any one wins
        parent[xp.maximum(pa, pb)[active]] = xp.minimum(pa, pb)[active]
        while True:
            up = parent[parent]
            if bool((up == parent).all()):
                break
            parent = up
    labels, dense = xp.unique(parent, return_inverse=True)
    return dense.reshape(-1)[comp], int(labels.size)


def plan_blocks(comp_sorted: np.ndarray[Any, Any], block: int) -> list[tuple[int, int, int]]:
    """Blocks of query rows sorted by component: ``(start, end, component)`` with component -1 for a
    block of several small components. A component of at least a quarter block has blocks of its
    own, which skip its own points; the rest share blocks (their own points are masked)."""
    out: list[tuple[int, int, int]] = []
    if comp_sorted.size == 0:
        return out
    starts = np.flatnonzero(np.r_[True, comp_sorted[1:] != comp_sorted[:-1]])
    ends = np.r_[starts[1:], comp_sorted.size]
    mixed = -1
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        if e - s >= max(1, block // 4):
            if mixed >= 0:
                out.extend((lo, min(lo + block, s), -1) for lo in range(mixed, s, block))
                mixed = -1
            c = int(comp_sorted[s])
            out.extend((lo, min(lo + block, e), c) for lo in range(s, e, block))
        elif mixed < 0:
            mixed = s
    if mixed >= 0:
        size = int(comp_sorted.size)
        out.extend((lo, min(lo + block, size), -1) for lo in range(mixed, size, block))
    return out


def split_rows(sizes: np.ndarray[Any, Any], parts: int) -> list[tuple[int, int]]:
    """Consecutive blocks of ``sizes`` rows cut into ``parts`` runs ``[first, last)`` of about as many
    rows each (runs may be empty): how a search's rows are shared out over devices."""
    cum = np.cumsum(np.asarray(sizes, dtype=np.int64))
    total = int(cum[-1]) if cum.size else 0
    cuts = [0] + [int(np.searchsorted(cum, total * i / parts, side="right")) for i in range(1, parts)]
    cuts.append(int(cum.size))
    return [(cuts[i], max(cuts[i], cuts[i + 1])) for i in range(parts)]


def finish_order(xp: Any, lo: Array, hi: Array, w2: Array, n: int) -> Array:
    """The canonical order ``(w², lo, hi)`` of a tree's edges (two stable sorts)."""
    by_pair = stable_argsort(xp, lo * n + hi)
    return by_pair[stable_argsort(xp, w2[by_pair])]
