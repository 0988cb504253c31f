"""The models' part of the warm-up: HDBSCAN*'s estimator end to end on the GPU, so that a library
user's first model after :func:`gpu_core.warm_up` loads no kernel.

The hierarchy's and brute force's searches are the point sets' warm-up's; what a model adds on top
(its prediction data, the selection's and the predictions' CuPy kernels, the membership vectors'
reductions, the neighbour lists of a prediction in every list width) does not depend on the number
of coordinates but on the list width and, for CuPy's reductions, on the size class of the points
and the clusters: so two-blob sets of 47 and 700 points in 2-D, every list width that fits, from
CuPy and from NumPy, and each selection once (after the point sets' warm-up, a first model and a
first one of wide lists on more points each still load modules of their own).

A membership vector has one entry per cluster, and CuPy's CUB reductions over a row compile a
kernel per block size, which follows the row's width: the two-blob models have few clusters, so the
rows of every width class are reduced on their own (a model of a few hundred clusters reduces
rows wider than the two-blob models' ever are).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from .estimator import HDBSCAN, all_points_membership_vectors, approximate_predict, membership_vector
from .sklearn_compat import load_validation

#: (points, min_samples) of the models' sets: each list width class that fits in each size
MODEL_SETS: tuple[tuple[int, int], ...] = tuple(
    (n, k) for n in (47, 700) for k in (1, 2, 5, 10, 20, 60, 120, 240) if k < n
)
#: row widths, one in each class CuPy's CUB reductions compile a kernel for: a block of clp2(width /
#: 4) threads, at least 32 and at most 512 (cupy/_core/_cub_reduction.pyx, _get_cub_block_specs)
ROW_WIDTHS: tuple[int, ...] = (100, 200, 400, 800, 1100)

#: the selections the estimator can make: by excess of mass on the device (the defaults), by
#: leaves with an epsilon, the root allowed, a largest size
SELECTIONS: tuple[dict[str, Any], ...] = (
    {},
    {"cluster_selection_method": "leaf", "cluster_selection_epsilon": 0.5},
    {"allow_single_cluster": True, "cluster_selection_epsilon": 0.5},
    {"max_cluster_size": 30},
)

#: a named piece of the warm-up
Part = tuple[str, Callable[[], object]]


def model_parts() -> list[Part]:
    """The models' warm-up in named parts (each independent of the others): a model of each
    :data:`MODEL_SETS` fitted from CuPy and from NumPy points, each of :data:`SELECTIONS` on the
    first, and a one-blob set whose selection takes the root. Imports what the estimator's fits
    import (scikit-learn's parameter validation) now, on the caller's thread: the parts may run
    beside it after ready, while requests run."""
    load_validation()
    parts: list[Part] = []
    for i, (n, k) in enumerate(MODEL_SETS):
        selections = SELECTIONS if i == 0 else SELECTIONS[:1]
        parts.append((f"models n={n} min_samples={k}", partial(_models, n, k, selections)))
    parts.append(("models: one blob, the root selected", _one_blob))
    parts.append(("models: membership reductions of every row width", _row_reductions))
    return parts


def _two_blobs(n: int) -> np.ndarray[Any, Any]:
    points = np.random.default_rng(n).random((n, 2))
    points[: n // 2] += 3.0
    return points


def _fit_and_predict(points: Any, queries: Any, k: int, params: dict[str, Any]) -> None:
    model = HDBSCAN(min_cluster_size=5, min_samples=k, prediction_data=True, backend="gpu", **params)
    model.fit(points)
    approximate_predict(model, queries)
    membership_vector(model, queries)
    all_points_membership_vectors(model)
    model.outlier_scores_  # noqa: B018 (GLOSH, computed on first access)


def _models(n: int, k: int, selections: tuple[dict[str, Any], ...]) -> None:
    import cupy

    points = _two_blobs(n)
    queries = np.concatenate([points[:7] + 0.01, points[:3] + 100.0])
    for move in (cupy.asarray, np.asarray):
        for params in selections:
            _fit_and_predict(move(points), move(queries), k, params)


def _one_blob() -> None:
    import cupy

    points = np.random.default_rng(3).random((40, 3))
    _fit_and_predict(cupy.asarray(points), cupy.asarray(points[:7] + 0.01), 5, SELECTIONS[2])


def _row_reductions() -> None:
    """The reductions ``gpu_core._clustering.prediction`` makes over rows of one entry per cluster
    (or per exemplar slot), float64, on one row and on several, for each of :data:`ROW_WIDTHS`."""
    import cupy

    for width in ROW_WIDTHS:
        for rows in (1, 9):
            values = cupy.asarray(np.random.default_rng(width).random((rows, width)))
            values.sum(axis=1, keepdims=True)
            values.max(axis=1)
            values.min(axis=1)
            cupy.nanmax(values, axis=1, keepdims=True)
            cupy.nanmax(values)
            cupy.argmax(values, axis=1)
            cupy.argmin(values, axis=1)
            values[:, None, :].min(axis=2)  # each query against each cluster's exemplar slots
