"""HDBSCAN*'s condensed tree as rows ``(parent, child, lambda, size)`` (scikit-learn's
``condensed_tree_`` layout), built from ``gpu_core._clustering.condense``: the tests' view of the condensed
tree and of the stabilities, to compare the compiled passes and the summation order with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu_core._clustering.condense import Clusters, condense_columns, summaries
from gpu_core._clustering.hdbscan import _columns

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class CondensedTree:
    """Rows ``(parent, child, lambda, size)``; clusters are numbered from ``n`` (the root)."""

    parent: Array
    child: Array
    lam: Array
    size: Array
    n: int


def condense(linkage: Array, min_cluster_size: int) -> CondensedTree:
    """The condensed tree's rows: cluster rows in cluster-number order, then one row per point."""
    n = linkage.shape[0] + 1
    left, right, sizes, distances = _columns(linkage)
    cl = condense_columns(left, right, distances, sizes, min_cluster_size)
    count = cl.parent.shape[0]
    return CondensedTree(
        parent=np.concatenate([cl.parent[1:], cl.point_cluster]) + n,
        child=np.concatenate([n + np.arange(1, count), np.arange(n)]),
        lam=np.concatenate([cl.birth[1:], cl.point_lam]),
        size=np.concatenate([cl.size[1:], np.ones(n, dtype=np.int64)]),
        n=n,
    )


def _clusters_of(tree: CondensedTree, num_clusters: int) -> Clusters:
    """The rows of ``tree`` (in any order) by cluster number (``condense.Clusters``)."""
    n = tree.n
    rows = tree.child >= n
    parent = np.zeros(num_clusters, dtype=np.int64)
    birth = np.zeros(num_clusters)
    size = np.full(num_clusters, n, dtype=np.int64)
    parent[tree.child[rows] - n] = tree.parent[rows] - n
    birth[tree.child[rows] - n] = tree.lam[rows]
    size[tree.child[rows] - n] = tree.size[rows]
    point_cluster = np.empty(n, dtype=np.int64)
    point_lam = np.empty(n)
    point_cluster[tree.child[~rows]] = tree.parent[~rows] - n
    point_lam[tree.child[~rows]] = tree.lam[~rows]
    return Clusters(parent, birth, size, point_cluster, point_lam)


def stability(tree: CondensedTree, num_clusters: int) -> Array:
    """The clusters' stabilities, summed in the order ``condense`` defines (chunks of points)."""
    stability: Array = summaries(_clusters_of(tree, num_clusters))[0]
    return stability
