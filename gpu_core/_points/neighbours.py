"""The nearest points of an index's own points and of query points: what prediction reads.

Each backend's search proposes; the keys returned are the contract's (the index's metric's:
``Σ (a_j - b_j)²`` in dimension order for Euclidean points and the unit vectors of cosine and
haversine, float64) and each list is ascending by (key, index). The index's search coordinates in
their own order (:func:`index_coordinates`), each point's distance to its k-th nearest
(:func:`kth_distances`, in the metric's unit), and the k nearest training points of new points
(:func:`query_points` validates them and makes their search coordinates, :func:`query_neighbours`
searches).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._backend.arrays import is_cupy, to_host
from ..errors import MetricError, PointSetShapeError
from .brute import BruteIndex
from .index import PointIndex
from .metrics import KeySpace
from .validate import validate_points

Array = Any  # a NumPy or a CuPy array


def _module_of(array: Any) -> Any:
    if is_cupy(array):
        import cupy

        return cupy
    return np


def refuse_precomputed(index: PointIndex, what: str) -> None:
    """Prediction needs coordinates: a model of precomputed distances (or a callable's) has none."""
    if index._metric.precomputed:
        raise MetricError(
            f"{what} needs the coordinates of new points, and a model fitted with metric={index.metric!r} "
            "has none to place them by; fit on coordinates with a metric of its own to predict.",
            field="metric",
        )


def _space(index: PointIndex) -> KeySpace:
    space = index._metric.space
    assert space is not None
    return space


def index_coordinates(index: PointIndex) -> Array:
    """The index's search coordinates in their own order (the points, or their unit vectors for
    cosine and haversine), float64, where the index keeps them."""
    refuse_precomputed(index, "this")
    state: Any = index._state
    if isinstance(state, BruteIndex):
        return state.coordinates()
    if index.backend == "cpu":
        return state.coords
    dev = state.device
    if dev is None:  # one point: the GPU index keeps none (never searched: see query_neighbours)
        raise PointSetShapeError("a model of one point has no neighbours to predict from.", field="points")
    coords = dev.cp.empty_like(dev.pts)
    coords[dev.orig] = dev.pts
    return coords


def kth_distances(index: PointIndex, k: int) -> Array:
    """Each point's distance to its k-th nearest point, itself counted (0 for k <= 1), in the
    index's array module and its metric's unit."""
    refuse_precomputed(index, "prediction")
    to_distance = index._metric.distances
    state: Any = index._state
    if isinstance(state, BruteIndex):
        xp = _module_of(state.coordinates())
        if k <= 1:
            return xp.zeros(index.n)
        return to_distance(xp.ascontiguousarray(state.nearest(k)[1][:, k - 1]))
    if index.backend == "cpu":
        if k <= 1:
            return np.zeros(index.n)
        from .kdtree import Search, core_distances

        return to_distance(core_distances(Search(state, None), k))
    from .gpu import DEVICE_MAX_K

    cp = state.cp
    dev = state.device
    if k <= 1 or dev is None:
        return cp.zeros(index.n)
    if k <= DEVICE_MAX_K:
        packed = dev.packed()
        dev.pack(dev.min_core2(None), packed)
        core2 = dev.core_distances(k, packed)
    else:  # beyond the registers of one thread: the exact host search, the same values
        from .cpu import CpuIndex
        from .kdtree import Search, core_distances

        host = CpuIndex(dev.host_coords(), owns_coords=True, space=dev.space)
        core2 = cp.asarray(core_distances(Search(host, None), k))[dev.orig]
    out = cp.empty(index.n)
    out[dev.orig] = to_distance(core2)
    return out


def query_points(index: PointIndex, points: Any) -> tuple[Array, bool]:
    """The query points validated and as the index searches them (unit vectors for cosine and
    haversine), in the index's array module, and whether they came as CuPy."""
    refuse_precomputed(index, "prediction")
    from_cupy = is_cupy(points)
    coords = validate_points(points, on_device=index.backend == "gpu")
    if coords.shape[1] != index.dimensions:
        raise PointSetShapeError(
            f"the points to predict have {coords.shape[1]} coordinates, but the model was fitted on "
            f"{index.dimensions}.",
            field="points",
        )
    coords = index._metric.prepare(coords)
    if index.backend == "gpu" and _module_of(coords) is np:
        import cupy

        coords = cupy.asarray(coords)
    return coords, from_cupy


def query_neighbours(index: PointIndex, queries: Array, k: int) -> tuple[Array, Array]:
    """Each query point's ``k`` nearest training points (``k <= n``; ``queries`` as
    :func:`query_points` makes them): their indices and exact keys (float64; squared distances
    ``Σ (a_j - b_j)²`` in dimension order for Euclidean keys), each row ascending by (key, index)."""
    state: Any = index._state
    xp = _module_of(queries)
    space = _space(index)
    if isinstance(state, BruteIndex):  # exact, in this order already
        return state.query(queries, k)
    if index.backend == "cpu":
        _, ids = state.kdtree.query(queries, k=k, p=space.kdtree_p)
        ids = np.asarray(ids, dtype=np.int64).reshape(queries.shape[0], k)
        w2 = _keys(queries, state.coords, ids, np, space)
        _settle_near_ties(state, queries, ids, w2, space)
    else:
        from .gpu import QUERY_LIST_SIZES

        dev = state.device
        size = next((s for s in QUERY_LIST_SIZES if s >= k), None)
        if size is not None:
            packed = dev.packed()
            dev.pack(dev.min_core2(None), packed)
            pos, w2 = dev.query_lists(xp.ascontiguousarray(queries), size, packed)
            ids = dev.orig[pos[:, :k]].astype(xp.int64)
            w2 = w2[:, :k]
        else:  # more than the device's lists hold: the host's k-d tree, the same values
            from scipy.spatial import cKDTree

            host = dev.host_coords()
            _, found = cKDTree(host).query(to_host(queries), k=k, p=space.kdtree_p)
            ids = xp.asarray(np.asarray(found, dtype=np.int64).reshape(queries.shape[0], k))
            w2 = _keys(queries, index_coordinates(index), ids, xp, space)
    by_id = _argsort_rows(ids, xp)
    ids = xp.take_along_axis(ids, by_id, axis=1)
    w2 = xp.take_along_axis(w2, by_id, axis=1)
    by_w2 = _argsort_rows(w2, xp)
    return xp.take_along_axis(ids, by_w2, axis=1), xp.take_along_axis(w2, by_w2, axis=1)


def _settle_near_ties(state: Any, queries: Array, ids: Array, w2: Array, space: KeySpace) -> None:
    """SciPy's k-d tree ranks points by distances of its own rounding, so where the k-th nearest
    is within a rounding of the next it may list either: any point it left out lies within a hair
    of the list's largest exact distance. Rows with more points than ``k`` that close are ranked
    again by the exact distances and ids, in place (a few rows, if any: ties at the boundary)."""
    k = int(ids.shape[1])
    p = space.kdtree_p
    radius = space.distance_above(w2.max(axis=1)) * (1.0 + 1e-9) + 1e-300
    counts = np.asarray(state.kdtree.query_ball_point(queries, radius, p=p, return_length=True))
    for row in np.flatnonzero(counts > k):
        near = np.asarray(state.kdtree.query_ball_point(queries[row], radius[row], p=p), dtype=np.int64)
        exact = _keys(queries[row : row + 1], state.coords, near[None, :], np, space)[0]
        best = np.lexsort((near, exact))[:k]
        ids[row], w2[row] = near[best], exact[best]


def _argsort_rows(keys: Array, xp: Any) -> Array:
    """A stable argsort of each row (CuPy's is always stable)."""
    return np.argsort(keys, axis=1, kind="stable") if xp is np else keys.argsort(axis=1)


def _keys(queries: Array, coords: Array, ids: Array, xp: Any, space: KeySpace) -> Array:
    """Exact keys (squared distances for Euclidean ones) of each query point to its listed
    points, in dimension order."""
    acc = xp.zeros(ids.shape, dtype=xp.float64)
    for j in range(int(queries.shape[1])):
        diff = queries[:, j][:, None] - coords[:, j][ids]
        acc = acc + diff * diff if space.kind == "l2" else space.combine(acc, space.term(diff))
    return acc
