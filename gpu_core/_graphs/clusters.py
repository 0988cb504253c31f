"""Clusters from a spanning forest, computed where the forest is (NumPy or CuPy arrays).

* :func:`forest_components`: connected-component labels of the vertices joined by some
  forest edges, numbered ``0, 1, ...`` in the order of each component's smallest vertex
  (as ``scipy.sparse.csgraph.connected_components`` numbers them);
* :func:`kept_for_clusters`: which forest edges stay when the forest is cut into ``k``
  clusters (the heaviest edges go, by the ``(weight, edge_id)`` order) or at a threshold.

Components come from hooking and pointer jumping (Shiloach-Vishkin style): every round
links the root of each tree to the smaller root across a crossing edge (a scatter-min, so
links only ever point at smaller ids and cannot form a cycle), then every vertex jumps to
its root. A forest edge stays a crossing edge only until its trees meet.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import numpy as np

from ..errors import GraphValidationError


def forest_components(xp: ModuleType, n: int, u: Any, v: Any) -> Any:
    """Component labels (int64) of ``n`` vertices joined by the edges ``(u[i], v[i])``."""
    parent = xp.arange(n, dtype=xp.int64)
    u = u.astype(xp.int64, copy=False)
    v = v.astype(xp.int64, copy=False)
    while u.shape[0]:
        pu, pv = parent[u], parent[v]
        crossing = pu != pv
        if not bool(crossing.any()):
            break
        u, v, pu, pv = u[crossing], v[crossing], pu[crossing], pv[crossing]
        xp.minimum.at(parent, xp.maximum(pu, pv), xp.minimum(pu, pv))
        while True:  # pointer jumping until every vertex points at its root
            jumped = parent[parent]
            if bool((jumped == parent).all()):
                break
            parent = jumped
    roots = parent == xp.arange(n, dtype=xp.int64)
    label_of_root = xp.cumsum(roots, dtype=xp.int64) - 1
    return label_of_root[parent]


def _threshold_keep(xp: ModuleType, weights: Any, threshold: float) -> Any:
    """Forest edges of weight at most ``threshold``, compared exactly in the weights' dtype."""
    if not math.isfinite(threshold):
        return xp.full(weights.shape, threshold > 0, dtype=xp.bool_)
    if weights.dtype.kind in "iu":
        bound = math.floor(threshold)
        info = np.iinfo(weights.dtype)
        if bound < info.min:
            return xp.zeros(weights.shape, dtype=xp.bool_)
        if bound > info.max:
            return xp.ones(weights.shape, dtype=xp.bool_)
        return weights <= weights.dtype.type(bound)
    return weights.astype(xp.float64) <= threshold


def kept_for_clusters(
    xp: ModuleType,
    num_vertices: int,
    weights: Any,
    *,
    k: int | None = None,
    threshold: float | None = None,
) -> Any:
    """Mask of the forest edges (given in ascending edge-id order) that stay after the cut.

    ``k``: the number of clusters; the ``k - num_components`` heaviest forest edges go
    (heaviest by ``(weight, edge_id)``: among equal weights the higher edge id goes first).
    ``threshold``: edges heavier than it go (the clusters of single linkage at that height).
    """
    if (k is None) == (threshold is None):
        raise GraphValidationError("give exactly one of 'k' and 'threshold' to cut the forest.", field="k")
    forest_edges = int(weights.shape[0])
    if threshold is not None:
        return _threshold_keep(xp, weights, float(threshold))
    assert k is not None
    components = num_vertices - forest_edges
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise GraphValidationError(f"'k' must be an integer, got {k!r}.", field="k")
    if not components <= k <= max(num_vertices, 1):
        raise GraphValidationError(
            f"'k' = {k} clusters cannot be cut from this forest: the graph has {components} connected "
            f"component(s) and {num_vertices} vertices, so k must lie in [{components}, {num_vertices}].",
            field="k",
        )
    remove = int(k) - components
    keep = xp.ones(forest_edges, dtype=xp.bool_)
    if remove:
        # ids are ascending, so a stable sort by weight is the (weight, edge_id) order
        by_order = xp.argsort(weights, kind="stable") if xp is np else xp.argsort(weights)
        keep[by_order[forest_edges - remove :]] = False
    return keep
