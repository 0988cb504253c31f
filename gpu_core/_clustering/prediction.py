"""Prediction and soft clustering of a fitted HDBSCAN* model, with the hdbscan library's definitions.

The hdbscan library's ``prediction.py`` (0.8.44) walks the condensed tree once per new point in
Python; here every step is an array operation over all points at once, in NumPy or CuPy (one
code path), with the k-nearest-neighbour search where the model's index is: SciPy's k-d tree on
the CPU backend, the device's point hierarchy (``core_distances<D, K, true>`` of
``kernels/emst.cu`` with query points) on the GPU backend. The definitions, as the library has
them, with ``m = min_samples - 1`` (the library's ``min_samples``, ours less the point itself):

* a training point's *prediction* core distance is its distance to its m-th nearest point, itself
  counted (the library's ``PredictionData``: one fewer than the clustering's);
* a new point looks at its ``2m`` nearest training points; its own core distance is the distance
  to the ``(m + 1)``-th of them; its mutual reachability to each is ``max(core, core', d)``; the
  smallest wins (ties: the nearer, then the lower index), at ``lambda = 1 / distance``
  (``DBL_MAX`` for 0);
* ``approximate_predict``: the point joins its neighbour's cluster, or, when the neighbour
  leaves later than ``lambda``, the lowest ancestor born before ``lambda`` (the climb, in closed
  form: that is inside the neighbour's selected cluster exactly when the selected cluster was
  born before ``lambda``); probability ``min(lambda, death) / death`` of that selected cluster;
* ``membership_vector`` / ``all_points_membership_vectors``: the library's distance vector (one
  over the distance to each cluster's nearest exemplar), outlier vector (softmax of the merge
  heights, :func:`.model.merge_heights`) and probability of being in some
  cluster, combined as the library combines them (its float32 lambda in ``per_cluster_scores``
  included).

:class:`PredictionData` is the model's picklable summary for all of this (a few arrays per point
and per cluster); with the model's :class:`~gpu_core.PointIndex` it is all a worker needs to keep
resident to predict.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, fields
from typing import Any, Literal

import numpy as np

from .._points.estimate import estimate_point_set_bytes
from .._points.index import PointIndex, build_point_index
from .._points.metrics import EUCLIDEAN, Metric
from .._points.neighbours import index_coordinates, kth_distances, query_neighbours
from .dendrogram_labels import _module_of, _to_host
from .model import Model, exemplar_points, merge_heights

Array = Any
DBL_MAX = float(np.finfo(np.float64).max)
#: elements of the largest temporary array of a chunked computation (points x clusters x exemplars)
CHUNK_ELEMENTS = 1 << 24


@dataclass(frozen=True, eq=False)
class PredictionData:
    """What prediction and soft clustering read of a fitted model (NumPy or CuPy arrays).

    Per training point: the cluster it leaves and the lambda it leaves at, and its prediction core
    distance (to its ``min_samples - 1``-th nearest point, itself counted). Per condensed cluster:
    its label (of its selected ancestor-or-self, -1 if none) and death, and its place in the
    preorder (``tin``, ``tout``, the births' sparse table ``birth_min`` and ``log2``). The
    selected clusters in label order, and their exemplars (point indices, labels, search
    coordinates: the unit vectors for cosine and haversine, and ``pad``: per label, indices into
    them padded with the label's first). ``metric`` and ``alpha``: the model's.
    """

    min_samples: int
    dimensions: int
    point_cluster: Array
    point_lam: Array
    core_distances: Array
    cluster_label: Array
    deaths: Array
    selected: Array
    tin: Array
    tout: Array
    birth_min: Array
    log2: Array
    exemplar_index: Array
    exemplar_label: Array
    exemplars: Array
    pad: Array
    metric: Metric = EUCLIDEAN
    alpha: float = 1.0

    @property
    def num_clusters(self) -> int:
        """The number of condensed clusters (1: the root alone, nothing to predict into)."""
        return int(self.cluster_label.shape[0])

    @property
    def num_labels(self) -> int:
        return int(self.selected.shape[0])

    @property
    def nbytes(self) -> int:
        return sum(
            int(getattr(self, f.name).nbytes)
            for f in fields(self)
            if hasattr(getattr(self, f.name), "nbytes")
        )

    def to_module(self, xp: Any) -> PredictionData:
        """The same data with every array in ``xp`` (NumPy: on the host; CuPy: on the device)."""
        move = (lambda a: _to_host(a)) if xp is np else xp.asarray
        values = {
            f.name: move(v) if hasattr(v, "shape") else v
            for f in fields(self)
            for v in (getattr(self, f.name),)
        }
        return PredictionData(**values)


def prediction_data(model: Model) -> PredictionData:
    """The prediction data of ``model``, in its array module."""
    xp = model.xp
    tables = model.tables()
    m = model.options.min_samples - 1
    core = kth_distances(model.index, m)
    selected, cluster_label = label_selection(model, tables)
    points, labels = exemplar_points(model, cluster_label)
    count = int(selected.shape[0])
    if model.n > 1:
        exemplars = index_coordinates(model.index)[points]
    else:  # one point: no cluster, no exemplar (and a GPU index of one point keeps no coordinates)
        exemplars = xp.zeros((0, model.index.dimensions))
    sizes = xp.bincount(labels, minlength=count) if count else xp.zeros(0, dtype=xp.int64)
    widest = int(sizes.max()) if count else 0
    starts = xp.cumsum(sizes) - sizes
    column = xp.arange(max(widest, 1), dtype=xp.int64)[None, :]
    pad = starts[:, None] + xp.minimum(column, xp.maximum(sizes, 1)[:, None] - 1)
    c = model.clusters
    return PredictionData(
        min_samples=model.options.min_samples, dimensions=model.index.dimensions,
        point_cluster=c.point_cluster, point_lam=c.point_lam, core_distances=core,
        cluster_label=cluster_label, deaths=model.deaths,
        selected=selected, tin=tables.tin, tout=tables.tout, birth_min=tables.birth_min,
        log2=tables.log2, exemplar_index=points, exemplar_label=labels, exemplars=exemplars,
        pad=pad.astype(xp.int64), metric=model.index._metric, alpha=model.options.alpha,
    )  # fmt: skip


def label_selection(model: Model, tables: Any) -> tuple[Array, Array]:
    """The selected clusters as the library's prediction data reads them
    (``CondensedTree._select_clusters``, hdbscan 0.8.44): for each label, the smallest condensed
    cluster its points leave from (the selected cluster itself unless none of its points leaves it
    directly), ``(L,)``; and each cluster's label through them, ``(C,)`` (-1 outside every one).
    No label, no cluster: a root chosen by ``allow_single_cluster`` whose points are all noise
    predicts noise, as the library does."""
    xp = model.xp
    count = model.num_labels
    clusters = int(model.clusters.parent.shape[0])
    if count == 0:
        return xp.zeros(0, dtype=xp.int64), xp.full(clusters, -1, dtype=xp.int64)
    labels = xp.asarray(model.labels)
    labelled = labels >= 0
    selected = xp.full(count, clusters, dtype=xp.int64)
    xp.minimum.at(selected, labels[labelled], model.clusters.point_cluster[labelled])
    # the selected clusters' subtrees are disjoint ranges of the preorder: label + 1 inside, 0 outside
    marks = xp.zeros(clusters + 1, dtype=xp.int64)
    value = xp.arange(1, count + 1, dtype=xp.int64)
    marks[tables.tin[selected]] += value
    marks[tables.tout[selected]] -= value
    return selected, xp.cumsum(marks[:-1])[tables.tin] - 1


def nearest_reachable(data: PredictionData, index: PointIndex, queries: Array) -> tuple[Array, Array]:
    """The library's ``_find_neighbor_and_lambda`` for every query point: the training point at
    the smallest mutual-reachability distance and the lambda of that distance."""
    xp = _module_of(queries)
    m = data.min_samples - 1
    k = min(max(2 * m, m + 1), index.n)
    ids, keys = query_neighbours(index, queries, k)
    dist = data.metric.distances(keys).reshape(keys.shape)
    own = dist[:, min(m, k - 1)][:, None]
    if data.alpha != 1.0:  # as the tree: max(core, core', d / alpha)
        dist = dist / data.alpha
    reach = xp.maximum(xp.maximum(data.core_distances[ids], own), dist)
    best = xp.argmin(reach, axis=1)[:, None]
    nearest = xp.take_along_axis(ids, best, axis=1)[:, 0]
    smallest = xp.take_along_axis(reach, best, axis=1)[:, 0]
    lam = xp.where(smallest > 0.0, 1.0 / xp.where(smallest > 0.0, smallest, 1.0), DBL_MAX)
    return nearest, lam


def predict_labels(data: PredictionData, index: PointIndex, queries: Array) -> tuple[Array, Array]:
    """``approximate_predict``: labels (int64, -1 noise) and probabilities of the query points."""
    xp = _module_of(queries)
    count = int(queries.shape[0])
    if data.num_clusters == 1 or data.num_labels == 0:  # no cluster to join: noise, as the library
        return xp.full(count, -1, dtype=xp.int64), xp.zeros(count)
    nearest, lam = nearest_reachable(data, index, queries)
    cluster = data.point_cluster[nearest]
    label = data.cluster_label[cluster]
    chosen = data.selected[xp.maximum(label, 0)]
    # the climb ends inside the selected cluster unless it was born at or after lambda
    from_birth = data.birth_min[0][data.tin[chosen]]
    inside = (data.point_lam[nearest] <= lam) | (from_birth < lam)
    label = xp.where((label >= 0) & inside, label, -1)
    death = data.deaths[chosen]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = xp.minimum(death, lam) / xp.where(death > 0.0, death, 1.0)
    prob = xp.where(death > 0.0, ratio, 1.0)
    return label, xp.where(label >= 0, prob, 0.0)


def _rows(count: int, width: int) -> int:
    return max(1, CHUNK_ELEMENTS // max(1, width))


def distance_vectors(data: PredictionData, points: Array) -> Array:
    """The library's ``dist_membership_vector`` of each point: one over its distance to each
    cluster's nearest exemplar (``DBL_MAX / L`` at distance 0), normalized to sum 1."""
    xp = _module_of(points)
    labels = data.num_labels
    dist = _exemplar_distances(data, points)
    with np.errstate(divide="ignore"):
        inv = xp.where(dist != 0.0, 1.0 / xp.where(dist != 0.0, dist, 1.0), DBL_MAX / labels)
    return inv / inv.sum(axis=1, keepdims=True)


def _exemplar_distances(data: PredictionData, points: Array) -> Array:
    """Each point's distance to each cluster's nearest exemplar, ``(count, L)``: the metric's
    distance of the exact key (the square root of ``Σ (a_j - b_j)²`` in dimension order for
    Euclidean points), whichever way it is found.

    Few points against few exemplars: every distance, in chunks (the library's way). Otherwise a
    nearest-neighbour search per cluster, in an index of its exemplars built once per model (kept
    beside the prediction data while it lives): the exemplars grow with the model (about 14 % of
    the points of 2-D blobs), so computing every distance is quadratic in the model's size, where
    the searches are not.
    """
    xp = _module_of(points)
    count, labels = int(points.shape[0]), data.num_labels
    if not searches_exemplars(data, count, on_host=xp is np):
        return _dense_exemplar_distances(data, points, data.pad)
    out = xp.empty((count, labels))
    for label, (lo, hi, index) in enumerate(_exemplar_indexes(data)):
        if index is None:  # few exemplars: every distance to them
            block = xp.arange(lo, hi, dtype=xp.int64)[None, :]
            out[:, label] = _dense_exemplar_distances(data, points, block)[:, 0]
        else:
            _, keys = query_neighbours(index, points, 1)
            out[:, label] = data.metric.distances(xp.ascontiguousarray(keys[:, 0]))
    return out


#: the most point x exemplar-slot x coordinate products computed one by one (on the device, on the
#: host), before the searches in the exemplars' indexes take over; clusters of at most
#: DENSE_EXEMPLARS exemplars are always computed so
DENSE_DEVICE = 1 << 28
DENSE_HOST = 1 << 22
DENSE_EXEMPLARS = 64


def searches_exemplars(data: PredictionData, count: int, on_host: bool) -> bool:
    """Whether membership vectors of ``count`` points search the exemplars' indexes (built on the
    first such request, kept while ``data`` lives) rather than compute every distance."""
    return count * int(data.pad.size) * data.dimensions > (DENSE_HOST if on_host else DENSE_DEVICE)


def exemplar_index_bytes(data: PredictionData) -> int:
    """Bytes the exemplars' indexes built for ``data`` hold (0 before a request searched them)."""
    with _INDEXES_LOCK:
        built = _INDEXES.get(data, [])
    return sum(int(index.nbytes) for _, _, index in built if index is not None)


def exemplar_index_build_bytes(data: PredictionData, backend: Literal["cpu", "gpu"]) -> int:
    """An upper bound of the bytes building the exemplars' indexes of ``data`` allocates (0 when
    they are built, or none would be): an index of the exemplars of every cluster of more than
    :data:`DENSE_EXEMPLARS`, a tree on it, and their copy."""
    with _INDEXES_LOCK:
        if data in _INDEXES:
            return 0
    sizes = _exemplar_counts(data)
    count = int(sizes[sizes > DENSE_EXEMPLARS].sum())
    if count == 0:
        return 0
    estimate = estimate_point_set_bytes(count, data.dimensions, backend=backend)
    return int(estimate.peak + count * data.dimensions * data.exemplars.dtype.itemsize)


#: the exemplars' indexes of each prediction data: (start, stop, index or None) per label
_INDEXES: weakref.WeakKeyDictionary[PredictionData, list[tuple[int, int, PointIndex | None]]] = (
    weakref.WeakKeyDictionary()
)
_INDEXES_LOCK = threading.Lock()


def _exemplar_counts(data: PredictionData) -> np.ndarray[Any, Any]:
    """How many exemplars each label has (on the host), in label order."""
    counts: np.ndarray[Any, Any] = _to_host(
        _module_of(data.exemplars).bincount(data.exemplar_label, minlength=data.num_labels)
    )
    return counts


def _exemplar_indexes(data: PredictionData) -> list[tuple[int, int, PointIndex | None]]:
    with _INDEXES_LOCK:
        known = _INDEXES.get(data)
        if known is not None:
            return known
        xp = _module_of(data.exemplars)
        sizes = _exemplar_counts(data)
        stops = np.cumsum(sizes)
        built: list[tuple[int, int, PointIndex | None]] = []
        for size, stop in zip(sizes.tolist(), stops.tolist(), strict=True):
            lo = stop - size
            index = None
            if size > DENSE_EXEMPLARS:
                backend: Literal["cpu", "gpu"] = "cpu" if xp is np else "gpu"
                index = build_point_index(
                    xp.ascontiguousarray(data.exemplars[lo:stop]), metric=data.metric.search_metric,
                    backend=backend,
                )  # fmt: skip
            built.append((lo, stop, index))
        _INDEXES[data] = built
        return built


def _dense_exemplar_distances(data: PredictionData, points: Array, pad: Array) -> Array:
    """Each point's distance to the nearest exemplar of each row of ``pad`` (indices into the
    exemplars), every distance computed, in chunks."""
    xp = _module_of(points)
    count = int(points.shape[0])
    out = xp.empty((count, int(pad.shape[0])))
    ex = data.exemplars[pad]  # (rows, width, d)
    step = _rows(count, int(pad.size))
    space = data.metric.space
    assert space is not None
    for lo in range(0, count, step):
        chunk = points[lo : lo + step]
        acc = xp.zeros((int(chunk.shape[0]), *pad.shape))
        for j in range(int(points.shape[1])):
            diff = chunk[:, j][:, None, None] - ex[None, :, :, j]
            acc = acc + diff * diff if space.kind == "l2" else space.combine(acc, space.term(diff))
        least = xp.ascontiguousarray(acc.min(axis=2))
        out[lo : lo + step] = data.metric.distances(least).reshape(least.shape)
    return out


def membership_vectors(data: PredictionData, index: PointIndex, queries: Array) -> Array:
    """``membership_vector``: each query point's probability of being in each cluster, ``(q, L)``."""
    xp = _module_of(queries)
    count, labels = int(queries.shape[0]), data.num_labels
    if labels == 0:
        return xp.zeros((count, 0))
    nearest, lam = nearest_reachable(data, index, queries)
    lam = xp.minimum(lam, data.point_lam[nearest])  # no later than the neighbour leaves
    cluster = data.point_cluster[nearest]
    distance = distance_vectors(data, queries)
    # per_cluster_scores: the lambda as float32 (the library's signature), the cluster's own death
    with np.errstate(over="ignore"):
        lam32 = lam.astype(xp.float32).astype(xp.float64)
    heights = _heights(data, cluster, lam32)
    top = data.deaths[cluster][:, None]
    gap = top - heights
    scores = top / xp.where(gap <= 0.0, 1e-8, gap)
    outlier = xp.exp(scores - xp.nanmax(scores, axis=1, keepdims=True))
    outlier = outlier / outlier.sum(axis=1, keepdims=True)
    # prob_in_some_cluster: the float64 lambda
    heights = _heights(data, cluster, lam)
    nearest_label = xp.argmax(heights, axis=1)
    top = xp.maximum(lam, data.deaths[data.selected[nearest_label]]) + 1e-8
    in_some = heights.max(axis=1) / top
    result = xp.sqrt(distance) * (outlier * outlier)
    result = result / result.sum(axis=1, keepdims=True)
    return result * in_some[:, None]


def _heights(data: PredictionData, cluster: Array, lam: Array) -> Array:
    return merge_heights(data, cluster, lam, data.selected, _module_of(data.tin))


def all_points_vectors(data: PredictionData, index: PointIndex) -> Array:
    """``all_points_membership_vectors``: every training point's membership vector, ``(n, L)``."""
    xp = _module_of(data.point_lam)
    labels = data.num_labels
    n = int(data.point_lam.shape[0])
    if labels == 0:
        return xp.zeros((n, 0))
    coords = index_coordinates(index)
    distance = distance_vectors(data, coords)
    lam = data.point_lam
    cluster = data.point_cluster
    out = xp.empty((n, labels))
    in_some = xp.empty(n)
    step = _rows(n, labels)
    for lo in range(0, n, step):
        c, p = cluster[lo : lo + step], lam[lo : lo + step]
        heights = _heights(data, c, p)
        top = (data.deaths[c] + 1e-8)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            out[lo : lo + step] = xp.exp(-(top / heights))
        nearest_label = xp.argmax(heights, axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            in_some[lo : lo + step] = heights.max(axis=1) / xp.maximum(
                data.deaths[data.selected[nearest_label]], p
            )
    with np.errstate(invalid="ignore"):
        outlier = xp.exp(out - xp.nanmax(out))
    outlier = outlier / outlier.sum(axis=1, keepdims=True)
    result = distance * outlier
    result = result / result.sum(axis=1, keepdims=True)
    return result * in_some[:, None]
