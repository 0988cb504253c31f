"""The point-set entry points: the exact minimum spanning tree of a point set under a metric
(``metric_mst``; ``euclidean_mst`` the Euclidean one), HDBSCAN*'s mutual-reachability tree with
``min_samples > 1``, and its single-linkage dendrogram.

Semantics shared by both backends (bit for bit):

* distances are compared as float64 squared distances ``Σ (a_k - b_k)²`` accumulated in
  dimension order without fused multiply-add (coordinates are converted to float64 first);
* with ``min_samples = k > 1`` the squared core distance of a point is the k-th smallest
  squared distance to all points, the point itself counted (scikit-learn's convention),
  and an edge weighs ``max(core_i², core_j², d²(i, j))`` squared;
* edges are ordered by ``(squared weight, min(i, j), max(i, j))``: under that strict total
  order the tree is unique, and the output lists it in that order;
* the output weights are the square roots of the float64 squared weights.

Other metrics (``metrics`` states each one's key and its map to distances) follow the same rules on
their keys: edges ordered by ``(key, min(i, j), max(i, j))``, a core key the k-th smallest key, the
weights and core distances the map of the keys.

Design: docs/design/exactness.md.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .._backend.arrays import is_cupy
from .._backend.resolve import Backend
from .._dendrogram.cpu import linkage_from_sorted_edges
from ..errors import MetricError
from .index import PointIndex, build_index, check_index_backend, tree_on_index, validated
from .metrics import resolve_metric
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
    if isinstance(points, PointIndex) and points.metric != "euclidean":
        raise MetricError(
            f"euclidean_mst takes a Euclidean index; this one is of metric={points.metric!r}: "
            "use metric_mst.",
            field="metric",
        )
    return metric_mst(points, min_samples=min_samples, backend=backend)


def metric_mst(
    points: Any,
    metric: Any = "euclidean",
    *,
    metric_params: dict[str, Any] | None = None,
    min_samples: int = 1,
    backend: Backend = "auto",
) -> EuclideanTree:
    """Exact minimum spanning tree of ``points`` under ``metric``: scikit-learn's names and
    ``metric_params`` (``"euclidean"``; ``"manhattan"``, ``"l1"``, ``"cityblock"``; ``"chebyshev"``,
    ``"infinity"``; ``"minkowski"`` with ``metric_params={"p": p}``, p >= 1; ``"cosine"`` (1 - cos);
    ``"haversine"`` (latitude, longitude in radians; great-circle radians); ``"precomputed"`` (an
    ``n x n`` distance matrix, dense or SciPy sparse); or a callable of two points, evaluated on
    every pair).

    ``points``: an ``(n, d)`` NumPy or CuPy array (the matrix for ``"precomputed"``), or a
    :class:`PointIndex` built with that metric (``metric`` is then the index's; pass it or leave
    the default). With ``min_samples = k > 1`` HDBSCAN*'s mutual-reachability tree
    ``max(core_i, core_j, d(i, j))``, a core distance being the distance to the k-th nearest point,
    the point itself counted. Edges are ordered by ``(key, min(i, j), max(i, j))`` (the metric's
    key: ``gpu_core._points.metrics``), so the tree is unique and both backends return the same
    arrays; weights are in the metric's unit. CuPy points on the GPU backend give CuPy arrays.
    """
    started = time.perf_counter()
    if isinstance(points, PointIndex):
        _check_index_metric(points, metric, metric_params)
        check_index_backend(points, backend)
        return tree_on_index(points, check_min_samples(min_samples, points.n), started, fresh=False)
    resolved = resolve_metric(metric, metric_params)
    coords, chosen, from_cupy = validated(points, backend, resolved)
    k = check_min_samples(min_samples, int(coords.shape[0]))
    index = build_index(points, coords, chosen, from_cupy, metric=resolved)
    return tree_on_index(index, k, started, fresh=True)


def _check_index_metric(index: PointIndex, metric: Any, metric_params: Any) -> None:
    """An index answers for its own metric: ``metric`` must be the default or name it."""
    default = metric is None or (isinstance(metric, str) and metric == "euclidean" and metric_params is None)
    if default:
        return
    wanted = resolve_metric(metric, metric_params)
    if wanted.name != index.metric or wanted.params != index.metric_params:
        raise MetricError(
            f"the index was built with metric={index.metric!r} {index.metric_params or ''}; it cannot "
            f"answer for {wanted.describe()}: build an index with that metric.",
            field="metric",
        )


def single_linkage(
    points_or_tree: Any,
    *,
    metric: Any = "euclidean",
    metric_params: dict[str, Any] | None = None,
    backend: Backend = "auto",
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Single-linkage dendrogram as a SciPy linkage matrix (``(n - 1) x 4``, float64).

    Takes points or a :class:`PointIndex` (then their MST under ``metric``, as :func:`metric_mst`
    takes it, is computed on ``backend``: the heights of SciPy's ``linkage(pdist(X, metric),
    "single")``) or a :class:`PointTree` (a mutual-reachability tree gives HDBSCAN*'s hierarchy).
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
            _check_index_metric(points_or_tree, metric, metric_params)
            check_index_backend(points_or_tree, backend)
            index, fresh = points_or_tree, False
        else:
            resolved = resolve_metric(metric, metric_params)
            coords, chosen, from_cupy = validated(points_or_tree, backend, resolved)
            index = build_index(points_or_tree, coords, chosen, from_cupy, metric=resolved)
            fresh = True
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
