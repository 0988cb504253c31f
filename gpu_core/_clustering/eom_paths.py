"""HDBSCAN*'s cluster selection where the condensed tree lies: excess of mass by heavy paths.

The host's excess of mass (``select._eom``) is a loop over the clusters from the last to the
first: a cluster's children are resolved before it, and its resolved stability is
``max``-like of its own and the sum of its two children's. The float sums make it a chain that
cannot be re-associated, and the tree is deep (about 10^5 levels for 10^7 uniform points), so
neither tree contraction nor a launch per level will do. Here the tree is cut into heavy paths
(each cluster continues the path of its child with more points), and one thread walks a path
from its leaf to its head, doing the host's operations in the host's order. A light child has at
most half of its parent's points, so a root-to-leaf way crosses at most log2(n) light edges:
the paths run in that many launches, the deepest first (``eom_up``). The long paths are walked
over consecutive slots, so a thread's loads stream. The anchors (each cluster's selected
ancestor-or-self) need no walk: down a path, a cluster's anchor is the head's inherited one, or
else the path's first chosen cluster from there on; one short launch per light depth passes the
inherited anchors down (``eom_above``), the rest is elementwise.

Written against an array module and a kernel launcher (``condense.Launch``): CuPy and its
``RawKernel`` on the device; NumPy and the kernels compiled for the host in the CPU tests.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._backend.arrays import to_numpy
from .condense import Launch, argsort

Array = Any
BLOCK = 128  # threads (paths) per block: a launch's paths differ much in length


@dataclass(frozen=True)
class HeavyPaths:
    """The clusters in path order: ``node_at[slot]`` (and back: ``slot_of[cluster]``); path ``p``
    (paths by decreasing light depth) spans slots ``start[p] .. start[p] + length[p]``, its head
    first; ``path_of[cluster]``; ``rounds``: the path ranges of one light depth each, the deepest
    first (host ints)."""

    node_at: Array
    slot_of: Array
    path_of: Array
    start: Array
    length: Array
    rounds: list[tuple[int, int]]


def _jump_with_counts(ptr: Array, count: Array, xp: Any, launch: Launch) -> tuple[Array, Array]:
    """Each node's root (``ptr[x] == x``) and the sum of ``count`` on its way there, the root's
    excluded (``find_roots_counted``: pointer and sum packed in one word, 32 bits each). Parents
    have smaller ids than their children (the cluster tree's numbering)."""
    size = int(ptr.shape[0])
    if size >= 2**32:  # never from a device dendrogram (at most 2^30 points: its clusters fewer)
        raise ValueError(f"find_roots_counted packs node ids in 32 bits; got {size} nodes.")
    words = ptr.astype(xp.uint64) | (count.astype(xp.uint64) << 32)
    launch("find_roots_counted", _grid(size), (BLOCK,), (words, np.int64(size), np.int64(0)))  # parents first
    return (words & 0xFFFFFFFF).astype(xp.int64), (words >> 32).astype(xp.int64)


def heavy_paths(parent: Array, size: Array, xp: Any, launch: Launch) -> HeavyPaths:
    """``parent``: the clusters' parents (0 the root, its own parent; children after parents, the
    two children of a split numbered ``2j + 1, 2j + 2``), ``size``: their points."""
    count = int(parent.shape[0])
    ids = xp.arange(count, dtype=xp.int64)
    sibling = xp.where(ids % 2 == 1, ids + 1, ids - 1)
    sibling[0] = 0
    # the heavy child: more points, the first of the pair on a tie (the root is no one's child)
    heavy = (size > size[sibling]) | ((size == size[sibling]) & (ids % 2 == 1))
    heavy[0] = False
    head, pos = _jump_with_counts(xp.where(heavy, parent, ids), heavy.astype(xp.int64), xp, launch)
    is_head = ~heavy
    # light depth: the light edges above a head (at most log2 of the points)
    up = xp.where(is_head, head[parent], ids)
    up[0] = 0
    _, depth = _jump_with_counts(up, (is_head & (ids != 0)).astype(xp.int64), xp, launch)
    leaf = xp.ones(count, dtype=xp.bool_)
    leaf[parent[1:]] = False
    length = xp.zeros(count, dtype=xp.int64)
    length[head[leaf]] = pos[leaf] + 1  # each path ends at one leaf
    heads = xp.flatnonzero(is_head)
    head_depth = depth[heads]
    by_depth = heads[argsort(-head_depth, xp)]  # stable: the deepest first
    path_length = length[by_depth]
    path_start = xp.cumsum(path_length) - path_length
    start_of = xp.zeros(count, dtype=xp.int64)
    start_of[by_depth] = path_start
    slot_of = start_of[head] + pos
    node_at = xp.empty(count, dtype=xp.int64)
    node_at[slot_of] = ids
    path_index = xp.zeros(count, dtype=xp.int64)
    path_index[by_depth] = xp.arange(int(by_depth.shape[0]), dtype=xp.int64)
    bounds = np.concatenate(([0], np.cumsum(to_numpy(xp.bincount(head_depth))[::-1])))
    rounds = [(int(a), int(b)) for a, b in itertools.pairwise(bounds) if b > a]
    return HeavyPaths(node_at, slot_of, path_index[head], path_start, path_length, rounds)


def _grid(work: int) -> tuple[int]:
    return ((work + BLOCK - 1) // BLOCK,)


def select_on_device(
    parent: Array, size: Array, stability: Array, method: str, xp: Any, launch: Launch
) -> tuple[Array, Array]:
    """The selected clusters' mask (``select.select_clusters`` with epsilon 0, the same
    answer) and each cluster's anchor: its selected ancestor-or-self, 0 where it has none."""
    count = int(parent.shape[0])
    ids = xp.arange(count, dtype=xp.int64)
    if method == "leaf":  # clusters without child clusters; nothing nests in them
        selected = xp.ones(count, dtype=xp.bool_)
        selected[parent[1:]] = False
        selected[0] = False
        return selected, xp.where(selected, ids, 0)
    if count == 1:
        return xp.zeros(1, dtype=xp.bool_), xp.zeros(1, dtype=xp.int64)
    paths = heavy_paths(parent, size, xp, launch)
    _, chose = resolve(paths, stability, xp, launch)
    chose[paths.slot_of[0]] = 0  # the root is never chosen
    # per path its first chosen slot (its end for none): below it the path's anchor is that
    # cluster unless the head inherits one from above
    end = paths.start + paths.length
    chosen = xp.concatenate((xp.flatnonzero(chose), xp.full(1, count, dtype=xp.int64)))
    first_chosen = xp.minimum(chosen[xp.searchsorted(chosen, paths.start)], end)
    above = xp.zeros(int(paths.start.shape[0]), dtype=xp.int64)
    for a, b in reversed(paths.rounds):  # the shallowest first: a head's parent lies on one of them
        args = (paths.start, np.int64(a), np.int64(b - a), paths.node_at, parent, paths.path_of,
                paths.slot_of, first_chosen, above)  # fmt: skip
        launch("eom_above", _grid(b - a), (BLOCK,), args)
    q = paths.path_of
    own = paths.node_at[xp.minimum(first_chosen[q], count - 1)]
    anchor = xp.where(above[q] != 0, above[q], xp.where(paths.slot_of >= first_chosen[q], own, 0))
    selected = anchor == ids
    selected[0] = False
    return selected, anchor


def resolve(paths: HeavyPaths, stability: Array, xp: Any, launch: Launch) -> tuple[Array, Array]:
    """The bottom-up half: ``best`` (by cluster; at the heads, the host's resolved stability) and
    ``chose`` (by slot: the host's ``chose``; at the root's slot, nothing)."""
    count = int(paths.node_at.shape[0])
    node_at = paths.node_at
    stab = xp.ascontiguousarray(stability[node_at], dtype=xp.float64)
    # slot i's heavy child is slot i + 1 (not at a path's last slot, where nothing reads it)
    heavy_child = xp.concatenate((node_at[1:], xp.zeros(1, dtype=xp.int64)))
    light_child = xp.where(heavy_child % 2 == 1, heavy_child + 1, heavy_child - 1)
    light_child[heavy_child == 0] = 0
    light = xp.zeros(count, dtype=xp.float64)
    best = xp.zeros(count, dtype=xp.float64)
    chose = xp.zeros(count, dtype=xp.uint8)
    slot_bounds = xp.concatenate((paths.start, xp.full(1, count, dtype=xp.int64)))
    edges = np.array([a for a, _ in paths.rounds] + [paths.rounds[-1][1]], dtype=np.int64)
    slot_edges = to_numpy(slot_bounds[xp.asarray(edges)])
    for r, (a, b) in enumerate(paths.rounds):  # the deepest first: their heads are light children
        lo, hi = int(slot_edges[r]), int(slot_edges[r + 1])
        light[lo:hi] = best[light_child[lo:hi]]
        span = (paths.start, paths.length, np.int64(a), np.int64(b - a))
        launch("eom_up", _grid(b - a), (BLOCK,), (*span, stab, light, node_at, best, chose))
    return best, chose
