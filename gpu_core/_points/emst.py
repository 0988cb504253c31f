"""The point-set entry points: the exact Euclidean minimum spanning tree (HDBSCAN*'s
mutual-reachability tree with ``min_samples > 1``) and its single-linkage dendrogram.

Semantics shared by both backends (bit for bit):

* distances are compared as float64 squared distances ``Σ (a_k - b_k)²`` accumulated in
  dimension order without fused multiply-add (coordinates are converted to float64 first);
* with ``min_samples = k > 1`` the squared core distance of a point is the k-th smallest
  squared distance to all points, the point itself counted (scikit-learn's convention),
  and an edge weighs ``max(core_i², core_j², d²(i, j))`` squared;
* edges are ordered by ``(squared weight, min(i, j), max(i, j))``: under that strict total
  order the tree is unique, and the output lists it in that order;
* the output weights are the square roots of the float64 squared weights.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .._backend.arrays import is_cupy
from .._backend.resolve import Backend
from .._dendrogram.cpu import linkage_from_sorted_edges
from .index import PointIndex, build_index, check_index_backend, tree_on_index, validated
from .tree import EuclideanTree
from .validate import check_min_samples


def euclidean_mst(points: Any, *, min_samples: int = 1, backend: Backend = "auto") -> EuclideanTree:
    """Exact Euclidean minimum spanning tree of ``points`` (an ``(n, d)`` NumPy or CuPy array,
    or a :class:`PointIndex` built by :func:`build_point_index`).

    With ``min_samples = k > 1`` the tree of HDBSCAN*'s mutual-reachability distances
    ``max(core_i, core_j, d(i, j))``, where a core distance is the distance to the k-th
    nearest point, the point itself counted. Ties are broken by ``(weight², min(i, j),
    max(i, j))``, so the tree is unique and both backends return the same arrays. CuPy
    points on the GPU backend give a tree of CuPy arrays (nothing is copied to the host).
    A :class:`PointIndex` is computed on by its own backend (``backend`` must be ``"auto"``
    or that one); its ``timings_ms["index_ms"]`` is then 0.
    """
    started = time.perf_counter()
    if isinstance(points, PointIndex):
        check_index_backend(points, backend)
        return tree_on_index(points, check_min_samples(min_samples, points.n), started, fresh=False)
    coords, chosen, from_cupy = validated(points, backend)
    k = check_min_samples(min_samples, int(coords.shape[0]))
    return tree_on_index(build_index(points, coords, chosen, from_cupy), k, started, fresh=True)


def single_linkage(
    points_or_tree: Any, *, backend: Backend = "auto"
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Single-linkage dendrogram as a SciPy linkage matrix (``(n - 1) x 4``, float64).

    Takes points or a :class:`PointIndex` (then their Euclidean MST is computed on ``backend``)
    or an :class:`EuclideanTree` (a mutual-reachability tree gives HDBSCAN*'s hierarchy).
    Cluster ``n + i`` is formed by the i-th merge; merges follow the tree's order. On the GPU
    backend the merges are computed on the device, where the tree is: a tree of CuPy arrays, CuPy
    points or an index of them give a CuPy matrix (nothing is copied to the host); NumPy points
    (or their index) get the matrix copied back. A tree on the host is merged on the host. Both
    give the same matrix, bit for bit.
    """
    started = time.perf_counter()
    if isinstance(points_or_tree, EuclideanTree):
        tree, keep_on_device = points_or_tree, True
    else:
        if isinstance(points_or_tree, PointIndex):
            check_index_backend(points_or_tree, backend)
            index, fresh = points_or_tree, False
        else:
            coords, chosen, from_cupy = validated(points_or_tree, backend)
            index, fresh = build_index(points_or_tree, coords, chosen, from_cupy), True
        # on the GPU backend the tree stays on the device for the merges
        tree = tree_on_index(
            index, check_min_samples(1, index.n), started, fresh=fresh, on_device=index.backend == "gpu"
        )
        keep_on_device = index.on_device
    if is_cupy(tree.src):
        from .._dendrogram.gpu import linkage_on_device

        linkage = linkage_on_device(tree.n, tree.src, tree.dst, tree.weights)
        return linkage if keep_on_device else linkage.get()  # type: ignore[no-any-return]
    return linkage_from_sorted_edges(tree.n, tree.src, tree.dst, tree.weights)
