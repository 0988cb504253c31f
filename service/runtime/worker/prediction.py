"""Fitted HDBSCAN* models kept with a resident point set, and the predictions they answer.

A :class:`ResidentModel` is :class:`gpu_core.HDBSCAN` fitted on the point set's own spatial index
(no second index, no copy of the points), reduced to what prediction reads: the model's
:class:`gpu_core.PredictionData` (on the device for a GPU worker) and the index. The fit's other
stages (the tree, the dendrogram, the condensed tree) are dropped once the prediction data is made.
Its answers are :func:`gpu_core.approximate_predict`'s and :func:`gpu_core.membership_vector`'s,
bit for bit: the same engine functions on the same arrays (the estimator's module functions are
these three lines each). Fitting is deterministic, so a model fitted again after a restart or an
eviction (from its parameters alone) answers the same.

Memory: a fit needs the tree of its ``min_samples`` on the index
(:func:`gpu_core.estimate_point_set_bytes`'s ``peak``) and, beside it, the model's other stages
(:data:`FIT_BYTES_PER_POINT`); it keeps the prediction data (:attr:`ResidentModel.nbytes`). A
prediction needs its query points, their neighbour lists and, for membership vectors, a few
arrays of one value per point and cluster (:func:`predict_bytes`); the first membership request
that searches the exemplars' indexes builds them (:meth:`ResidentModel.membership_build_bytes`),
and the model keeps them.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

#: bytes per point of a fit's stages beside the tree (gpu_core's ``fit_model``): the dendrogram
#: (32), the condensed tree's per-point cluster and lambda (16), labels and probabilities on the
#: device and the host (32), the prediction data's core distances (8) and its tables, with room
FIT_BYTES_PER_POINT = 128
#: bytes per query point and neighbour of a prediction: indices, squared distances, distances,
#: reachabilities, the sorts' keys and permutations, and the device's lists in Morton order and
#: back (lists up to twice as long as the neighbours read)
PREDICT_BYTES_PER_NEIGHBOUR = 96
#: bytes per query point and cluster of membership vectors: the distance, outlier, height and
#: score arrays (``(q, L)`` float64 each) alive at once
MEMBERSHIP_BYTES_PER_CLUSTER = 64
#: the most elements of membership's chunked distance computation (gpu_core's CHUNK_ELEMENTS)
MEMBERSHIP_CHUNK_BYTES = 8 << 24


def fit_bytes(
    num_points: int, dims: int, min_samples: int, backend: str, index_built: bool, metric: str = "euclidean"
) -> int:
    """Upper bound of the bytes a fit allocates on ``backend``: the tree of ``min_samples`` (and
    the index unless it is ``index_built``), then the model's stages beside it. ``metric``:
    haversine points are indexed as 3-D unit vectors (cosine's unit vectors have the points' size)."""
    import gpu_core

    if metric == "haversine":
        dims = 3
    estimate = gpu_core.estimate_point_set_bytes(
        num_points,
        dims,
        min_samples=min_samples,
        backend=backend,  # type: ignore[arg-type]
    )
    tree = estimate.peak - (estimate.resident if index_built else 0)
    return int(tree + FIT_BYTES_PER_POINT * num_points)


def predict_bytes(queries: int, dims: int, neighbours: int, labels: int, membership: bool) -> int:
    """Upper bound of the bytes a prediction of ``queries`` points allocates."""
    # the points, and on the device their copy in Morton order, codes and order
    needed = queries * (16 * dims + 32 + PREDICT_BYTES_PER_NEIGHBOUR * neighbours)
    if membership:
        needed += queries * labels * MEMBERSHIP_BYTES_PER_CLUSTER + MEMBERSHIP_CHUNK_BYTES
    return int(needed)


def on_host(array: Any) -> np.ndarray[Any, Any]:
    """A result array in host memory (a device array comes through pinned memory)."""
    if isinstance(array, np.ndarray):
        return array
    from gpu_core._backend.staging import to_pinned

    return to_pinned(array)


class ResidentModel:
    """An HDBSCAN* model fitted on a resident point set's index, kept for prediction.

    ``params``: the estimator's clustering parameters (``min_cluster_size``, ``min_samples``,
    ``cluster_selection_method``, ``cluster_selection_epsilon``, ``allow_single_cluster``,
    ``max_cluster_size``; ``metric`` and ``metric_params``: the index's), checked by the engine as
    :meth:`gpu_core.HDBSCAN.fit` checks them. ``labels``: keep the training points' labels and
    probabilities (an ``hdbscan`` job's answer), else only what prediction reads.
    """

    def __init__(self, index: Any, params: dict[str, Any], *, labels: bool = False) -> None:
        from gpu_core._clustering.model import check_options, fit_model
        from gpu_core._clustering.prediction import prediction_data

        started = time.perf_counter()

        def options(n: int) -> Any:
            return check_options(
                n,
                params.get("min_cluster_size", 5),
                params.get("min_samples"),
                params.get("cluster_selection_method", "eom"),
                params.get("cluster_selection_epsilon", 0.0),
                params.get("allow_single_cluster", False),
                params.get("max_cluster_size"),
            )

        model = fit_model(
            index,
            options,
            metric=params.get("metric", "euclidean"),
            metric_params=params.get("metric_params"),
        )
        self.index = index
        if labels:
            self.labels, self.probabilities = model.labels, model.probabilities
            return
        self.data = prediction_data(model)
        self.num_clusters = model.num_labels
        self.num_noise = int((model.labels < 0).sum())
        del model  # the tree, dendrogram and condensed tree: prediction reads none of them
        self.fit_ms = (time.perf_counter() - started) * 1e3

    @property
    def nbytes(self) -> int:
        """Bytes the model holds beside its point set's index: the prediction data and, once a
        membership request searched them, the exemplars' indexes (kept while the model lives)."""
        from gpu_core._clustering.prediction import exemplar_index_bytes

        return int(self.data.nbytes) + exemplar_index_bytes(self.data)

    def membership_build_bytes(self, queries: int) -> int:
        """Bytes membership vectors of ``queries`` points allocate beside :func:`predict_bytes`:
        the exemplars' indexes where this request is the first to search them, else 0."""
        from gpu_core._clustering.prediction import exemplar_index_build_bytes, searches_exemplars

        backend = self.index.backend
        if not searches_exemplars(self.data, queries, on_host=backend != "gpu"):
            return 0
        return exemplar_index_build_bytes(self.data, backend)

    @property
    def neighbours(self) -> int:
        """How many training points a query point looks at (the hdbscan library's ``2m``)."""
        m = self.data.min_samples - 1
        return int(min(max(2 * m, m + 1), self.index.n))

    def predict(self, points: Any, membership: bool) -> dict[str, np.ndarray[Any, Any]]:
        """``labels`` and ``probabilities`` of new points (``approximate_predict``) and, with
        ``membership``, their ``membership`` vectors (``membership_vector``: ``(q, clusters)``),
        on the host. ``points``: ``(q, d)`` coordinates, NumPy (moved to the device first on a
        GPU worker, where they are validated)."""
        from gpu_core._clustering.prediction import membership_vectors, predict_labels
        from gpu_core._points.neighbours import query_points

        if self.index.backend == "gpu" and points.dtype.kind in "fiu" and points.ndim == 2:
            import cupy  # (anything else is refused on the host, by the same validation)

            points = cupy.asarray(points)
        queries, _ = query_points(self.index, points)
        labels, probabilities = predict_labels(self.data, self.index, queries)
        out = {"labels": labels, "probabilities": probabilities}
        if membership:
            out["membership"] = membership_vectors(self.data, self.index, queries)
        return {name: on_host(array) for name, array in out.items()}
