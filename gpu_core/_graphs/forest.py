"""The result of a minimum-spanning-forest computation, and what both backends share to build it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: ECL-MST filters when the average (directed) degree is at least this ...
FILTER_MIN_AVERAGE_DEGREE = 4
#: ... and then runs its first phase on the ``FILTER_EDGES_PER_VERTEX * n`` lightest edges.
FILTER_EDGES_PER_VERTEX = 1


def filter_threshold(num_vertices: int, num_edges: int) -> int:
    """How many of the lightest (non-loop, undirected) edges the first phase processes.

    ECL-MST samples 20 weights to *estimate* the weight of the c·|V|-th lightest
    edge. Both backends here rank every edge by ``(weight, edge_id)`` once, when
    the graph is built, so the c·|V|-th lightest edge is simply rank c·|V|: the
    threshold is exact and costs nothing. Returns ``num_edges`` when no
    filtering happens (average degree below 4). The paper aims at 3·|V| edges;
    with the second phase's sets flattened first (see ``prepare_second_phase``)
    1·|V| is faster than 2·|V| or 3·|V|, and fewer is no faster (docs/performance.md).
    """
    if 2 * num_edges < FILTER_MIN_AVERAGE_DEGREE * num_vertices:
        return num_edges
    return min(num_edges, int(FILTER_EDGES_PER_VERTEX * num_vertices))


def forest_total(weights: np.ndarray[Any, Any], bound: int | None = None) -> int | float:
    """Total weight of a forest: exact for integers (Python int), float64 sum for floats.

    ``bound``: a bound on the weights' magnitude already known (the graph's), which saves
    finding one; integer sums stay in int64 whenever ``bound * count`` fits there.
    """
    if weights.size == 0:
        return 0 if weights.dtype.kind in "iu" else 0.0
    if weights.dtype.kind in "iu":
        if bound is None and weights.dtype.itemsize <= 4:
            bound = 2**32  # 32-bit weights fit anyway: |sum| < 2^32 * 2^31
        elif bound is None:
            bound = max(abs(int(weights.min())), abs(int(weights.max())))
        if bound * int(weights.size) < 2**63:
            return int(weights.sum(dtype=np.int64))
        return sum(int(x) for x in weights.tolist())  # exact beyond int64
    return float(weights.sum(dtype=np.float64))


def weight_bound(weight: Any, order: Any) -> int | None:
    """The largest weight magnitude of a graph from its weights sorted by ``order`` (None for floats)."""
    if weight.dtype.kind not in "iu":
        return None
    if not weight.shape[0]:
        return 0
    return max(abs(int(weight[order[0]])), abs(int(weight[order[-1]])))


@dataclass(frozen=True)
class SpanningForest:
    """A minimum spanning forest, unique under the ``(weight, edge_id)`` order.

    ``edge_ids`` are positions in the uploaded edge list (int64, ascending) and
    ``weights`` their weights in the input dtype.
    """

    edge_ids: np.ndarray[Any, np.dtype[np.int64]]
    weights: np.ndarray[Any, Any]
    num_vertices: int
    num_components: int
    total_weight: int | float
    backend: str
    #: time of the computation itself, in milliseconds (CUDA events on the GPU)
    compute_ms: float

    @property
    def num_edges(self) -> int:
        return int(self.edge_ids.shape[0])


def make_forest(
    edge_ids: np.ndarray[Any, Any],
    weights: np.ndarray[Any, Any],
    num_vertices: int,
    backend: str,
    compute_ms: float,
    weight_bound: int | None = None,
) -> SpanningForest:
    """Build a :class:`SpanningForest` from ascending edge ids and their weights.

    ``weight_bound``: the graph's largest weight magnitude, when known (see :func:`forest_total`).
    """
    ids = np.ascontiguousarray(edge_ids, dtype=np.int64)
    weights = np.ascontiguousarray(weights)
    return SpanningForest(
        edge_ids=ids,
        weights=weights,
        num_vertices=num_vertices,
        num_components=num_vertices - int(ids.shape[0]),
        total_weight=forest_total(weights, weight_bound),
        backend=backend,
        compute_ms=compute_ms,
    )
