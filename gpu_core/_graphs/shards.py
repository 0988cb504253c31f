"""Spanning forests of graphs split by edges: each shard's forest, then the forest of their union.

A graph's edges are split into shards (here: contiguous edge-id ranges, :func:`edge_ranges`).
By the cycle property, an edge that is not in its shard's minimum spanning forest is the
heaviest edge of some cycle of that shard, hence of the whole graph, so it is not in the whole
graph's forest either: the forest of the **union of the shard forests** is the forest of the
whole graph. That holds under any strict total order of the edges, so it is exact under the
``(weight, edge_id)`` order (and ``(-weight, edge_id)`` for the maximum forest) as long as
every step compares edges by their *global* edge ids.

How the global ids are kept as the tie-breaker: a :class:`~gpu_core.Graph` breaks ties by an
edge's position in its lists. A shard is a contiguous range ``[lo, hi)``, so its local ids are
``global - lo``: the same order. The union is sorted by global id before it is built
(:func:`merge_shard_forests`), so its positions are in the order of the global ids as well;
its forest's positions are then mapped back to global ids. No id argument is needed.

Excluded edges (``exclude``) are left out by the shard that holds them; the union then holds
none of them. Every weight dtype is kept as it is (the union is never converted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._backend.resolve import Backend
from .forest import SpanningForest, make_forest
from .graph import Graph
from .order import check_objective


@dataclass(frozen=True)
class ShardForest:
    """A shard's spanning forest in the whole graph's terms: global edge ids and their edges."""

    edge_ids: np.ndarray[Any, np.dtype[np.int64]]
    src: np.ndarray[Any, Any]
    dst: np.ndarray[Any, Any]
    weights: np.ndarray[Any, Any]


def edge_ranges(num_edges: int, shards: int) -> list[tuple[int, int]]:
    """``shards`` contiguous edge-id ranges ``[lo, hi)`` that cover ``0..num_edges``, sizes within one."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1; got {shards}.")
    base, extra = divmod(num_edges, shards)
    ranges, lo = [], 0
    for i in range(shards):
        hi = lo + base + (1 if i < extra else 0)
        ranges.append((lo, hi))
        lo = hi
    return ranges


def local_exclude(exclude: Any, lo: int, hi: int) -> np.ndarray[Any, np.dtype[np.int64]] | None:
    """The shard ``[lo, hi)``'s local ids of the global ids in ``exclude`` (None: nothing excluded)."""
    if exclude is None:
        return None
    ids = np.asarray(exclude, dtype=np.int64).reshape(-1)
    inside = ids[(ids >= lo) & (ids < hi)]
    return inside - lo


def shard_forest(
    src: Any,
    dst: Any,
    weight: Any,
    lo: int,
    hi: int,
    num_vertices: int,
    *,
    objective: str = "min",
    exclude: Any = None,
    backend: Backend = "auto",
) -> ShardForest:
    """The forest of edges ``lo..hi-1`` of a graph (host arrays; ``exclude``: global ids to leave out)."""
    s, d, w = np.asarray(src)[lo:hi], np.asarray(dst)[lo:hi], np.asarray(weight)[lo:hi]
    graph = Graph(s, d, w, num_vertices, backend=backend)
    forest = graph.minimum_spanning_forest(objective=objective, exclude=local_exclude(exclude, lo, hi))
    local = forest.edge_ids
    return ShardForest(local + lo, s[local], d[local], forest.weights)


def merge_shard_forests(
    forests: Sequence[ShardForest],
    num_vertices: int,
    *,
    objective: str = "min",
    backend: Backend = "auto",
) -> SpanningForest:
    """The whole graph's forest from its shards' forests (of the same ``objective``), global edge ids.

    The shards may come in any order and need not be contiguous ranges, but each must have
    computed its forest under the global-id order (see the module's docstring) and every edge
    may be in one shard only. ``compute_ms`` is that of the union's computation.
    """
    chosen = check_objective(objective)
    graph, ids = union_graph(forests, num_vertices, backend=backend)
    forest = graph.minimum_spanning_forest(objective=chosen)
    return make_forest(ids[forest.edge_ids], forest.weights, num_vertices, forest.backend, forest.compute_ms)


def union_graph(
    forests: Sequence[ShardForest], num_vertices: int, *, backend: Backend = "auto"
) -> tuple[Graph, np.ndarray[Any, np.dtype[np.int64]]]:
    """The union of shard forests as a :class:`Graph` whose edge positions ascend with the global
    ids, and those global ids (position ``i`` of the graph is global edge ``ids[i]``).

    Any query of the graph that breaks ties by edge id (forests, components, clusters, the
    single-linkage dendrogram) answers as the whole graph would, by the cycle property.
    """
    if not forests:
        raise ValueError("merging shard forests needs at least one shard.")
    ids = np.concatenate([np.asarray(f.edge_ids, dtype=np.int64) for f in forests])
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    if ids.size > 1 and bool((ids[1:] == ids[:-1]).any()):
        raise ValueError("an edge id occurs in more than one shard forest; shards must not overlap.")
    src = np.concatenate([np.asarray(f.src) for f in forests])[order]
    dst = np.concatenate([np.asarray(f.dst) for f in forests])[order]
    weights = np.concatenate([np.asarray(f.weights) for f in forests])[order]
    return Graph(src, dst, weights, num_vertices, backend=backend), ids


def sharded_spanning_forest(
    src: Any,
    dst: Any,
    weight: Any,
    num_vertices: int,
    shards: int,
    *,
    objective: str = "min",
    exclude: Any = None,
    backend: Backend = "auto",
) -> SpanningForest:
    """The forest of a graph computed shard by shard (``shards`` contiguous ranges), then merged:
    the same answer as :func:`~gpu_core.minimum_spanning_forest` (the service runs the shards on
    several workers; this runs them one after the other here)."""
    m = int(np.asarray(weight).shape[0])
    parts = [
        shard_forest(
            src, dst, weight, lo, hi, num_vertices, objective=objective, exclude=exclude, backend=backend
        )
        for lo, hi in edge_ranges(m, shards)
    ]
    return merge_shard_forests(parts, num_vertices, objective=objective, backend=backend)
