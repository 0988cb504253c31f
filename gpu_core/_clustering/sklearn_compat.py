"""What :class:`gpu_core.HDBSCAN` does as ``sklearn.cluster.HDBSCAN`` does it, beside the clustering.

Its parameters declared as scikit-learn declares them (:func:`parameter_constraints`, built on first
use: importing ``gpu_core`` must not import scikit-learn) and validated by scikit-learn's own
validator where it is installed; ``algorithm`` checked against the metric as scikit-learn checks it
(its KD-tree and ball-tree metric lists); rows with non-finite coordinates set apart and labelled as
its ``_OUTLIER_ENCODING`` (infinite -2 with probability 0, missing -3 with NaN, told apart by the
row's sum as scikit-learn tells them); ``store_centers`` (weighted centroids, medoids under the
metric); ``dbscan_clustering`` (a cut of the tree); the single-linkage tree as its structured array.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._points.metrics import ALIASES, Metric

Array = Any  # a NumPy or a CuPy array

#: scikit-learn's labels and probabilities of rows it sets apart (``_OUTLIER_ENCODING``)
INFINITE_LABEL, MISSING_LABEL = -2, -3
#: scikit-learn's KDTree.valid_metrics and BallTree.valid_metrics (1.9), where it is not installed
KD_TREE_METRICS = (
    "euclidean",
    "l2",
    "minkowski",
    "p",
    "manhattan",
    "cityblock",
    "l1",
    "chebyshev",
    "infinity",
)
BALL_TREE_METRICS = (
    *KD_TREE_METRICS, "braycurtis", "canberra", "dice", "hamming", "haversine", "jaccard", "mahalanobis",
    "pyfunc", "rogerstanimoto", "russellrao", "seuclidean", "sokalmichener", "sokalsneath",
)  # fmt: skip


@functools.cache
def parameter_constraints() -> dict[str, list[Any]]:
    """``HDBSCAN._parameter_constraints``: scikit-learn's for its parameters (``metric``: the
    engine's names), and this estimator's ``prediction_data`` and ``backend``."""
    from numbers import Integral, Real

    from sklearn.utils._param_validation import Interval, StrOptions

    return {
        "min_cluster_size": [Interval(Integral, left=2, right=None, closed="left")],
        "min_samples": [Interval(Integral, left=1, right=None, closed="left"), None],
        "cluster_selection_epsilon": [Interval(Real, left=0, right=None, closed="left")],
        # 0: no limit (the hdbscan library's default), beside None
        "max_cluster_size": [None, Interval(Integral, left=0, right=None, closed="left")],
        "metric": [StrOptions(set(ALIASES)), callable],
        "metric_params": [dict, None],
        "alpha": [Interval(Real, left=0, right=None, closed="neither")],
        "algorithm": [StrOptions({"auto", "brute", "kd_tree", "ball_tree"})],
        "leaf_size": [Interval(Integral, left=1, right=None, closed="left")],
        "n_jobs": [Integral, None],
        "cluster_selection_method": [StrOptions({"eom", "leaf"})],
        "allow_single_cluster": ["boolean"],
        "store_centers": [None, StrOptions({"centroid", "medoid", "both"})],
        "copy": ["boolean"],
        "prediction_data": ["boolean"],
        "backend": [StrOptions({"auto", "gpu", "cpu"})],
    }


def load_validation() -> None:
    """Import what the estimator's checks import from scikit-learn (its parameter validation, its
    trees' metrics) now, where it is installed: a worker's warm-up calls this before it says it is
    ready, so no fit imports it while requests run."""
    with contextlib.suppress(ImportError):
        parameter_constraints()
    tree_metrics()


class ConstraintsDescriptor:
    """``_parameter_constraints`` as a class attribute built on first read (scikit-learn imported then)."""

    def __get__(self, obj: Any, owner: Any = None) -> dict[str, list[Any]]:
        return parameter_constraints()


def validate_parameters(params: dict[str, Any], caller: str) -> bool:
    """scikit-learn's validation of ``params`` against :func:`parameter_constraints` (its
    ``InvalidParameterError``, a ``ValueError``); False where scikit-learn is not installed (the
    engine's own checks then apply)."""
    try:
        from sklearn.utils._param_validation import validate_parameter_constraints
    except ImportError:
        return False
    validate_parameter_constraints(parameter_constraints(), params, caller_name=caller)
    return True


@functools.cache
def tree_metrics() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(KDTree's, BallTree's valid metrics): the installed scikit-learn's, else 1.9's."""
    try:
        from sklearn.neighbors import BallTree, KDTree
    except ImportError:
        return KD_TREE_METRICS, BALL_TREE_METRICS
    return tuple(KDTree.valid_metrics), tuple(BallTree.valid_metrics)


def check_algorithm(algorithm: str, metric: Any, sparse: bool) -> None:
    """scikit-learn's refusals of ``algorithm`` (which only chooses its CPU method: a hint here)."""
    kd, ball = tree_metrics()
    if algorithm == "kd_tree" and metric not in kd:
        raise ValueError(
            f"{metric} is not a valid metric for a KDTree-based algorithm. Please select a different metric."
        )
    if algorithm == "ball_tree" and metric not in ball:
        raise ValueError(
            f"{metric} is not a valid metric for a BallTree-based algorithm. Please select a different "
            "metric."
        )
    if sparse and metric != "precomputed" and algorithm not in ("auto", "brute"):
        raise ValueError("Sparse data matrices only support algorithm `brute`.")


@dataclass(frozen=True)
class Outliers:
    """Rows set apart before clustering: their positions in the input of ``n`` rows."""

    n: int
    finite: Array  # int64 positions of the rows clustered
    infinite: Array
    missing: Array


def split_non_finite(points: Array) -> tuple[Array, Outliers | None]:
    """The rows of finite coordinates, and where the others were (None: all finite). A row is
    missing when its sum is NaN, infinite when it is +-inf (scikit-learn's rule)."""
    xp = _module_of(points)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf and overflows: told apart below
        total = points.sum(axis=1)
    finite = xp.isfinite(total)
    if bool(finite.all()):
        return points, None
    out = Outliers(
        n=int(points.shape[0]),
        finite=xp.flatnonzero(finite),
        infinite=xp.flatnonzero(xp.isinf(total)),
        missing=xp.flatnonzero(xp.isnan(total)),
    )
    return xp.ascontiguousarray(points[out.finite]), out


def place(values: Array, outliers: Outliers | None, infinite: Any, missing: Any) -> Array:
    """Per-row ``values`` of the finite rows spread over all rows, the others set to the fills."""
    if outliers is None:
        return values
    out = np.empty((outliers.n, *values.shape[1:]), dtype=np.result_type(values.dtype, np.asarray(missing)))
    out[_host(outliers.finite)] = values
    out[_host(outliers.infinite)] = infinite
    out[_host(outliers.missing)] = missing
    return out


def place_labels(labels: Array, probabilities: Array, outliers: Outliers | None) -> tuple[Array, Array]:
    return (
        place(labels, outliers, INFINITE_LABEL, MISSING_LABEL),
        place(probabilities, outliers, 0.0, np.nan),
    )


def hierarchy(linkage: np.ndarray[Any, Any], outliers: Outliers | None) -> np.ndarray[Any, Any]:
    """The single-linkage tree as scikit-learn's ``_single_linkage_tree_`` (``HIERARCHY_dtype``):
    with rows set apart, point ids mapped back, merge ids shifted past them, and each set-apart row
    merged in last at an infinite distance (``remap_single_linkage_tree``)."""
    dtype = np.dtype(
        [("left_node", np.intp), ("right_node", np.intp), ("value", np.float64), ("cluster_size", np.intp)]
    )
    merges = int(linkage.shape[0])
    out = np.empty(merges, dtype=dtype)
    left, right = linkage[:, 0].astype(np.intp), linkage[:, 1].astype(np.intp)
    out["value"], out["cluster_size"] = linkage[:, 2], linkage[:, 3].astype(np.intp)
    if outliers is None:
        out["left_node"], out["right_node"] = left, right
        return out
    finite = _host(outliers.finite)
    count = merges + 1
    extra = np.union1d(_host(outliers.infinite), _host(outliers.missing))
    for field, ids in (("left_node", left), ("right_node", right)):
        out[field] = np.where(ids < count, finite[np.minimum(ids, count - 1)], ids + extra.size)
    tail = np.empty(extra.size, dtype=dtype)
    last = max(int(out["left_node"][-1]), int(out["right_node"][-1])) if merges else count - 1
    tail["left_node"] = extra
    tail["right_node"] = last + 1 + np.arange(extra.size)
    tail["value"] = np.inf
    tail["cluster_size"] = (int(out["cluster_size"][-1]) if merges else 1) + 1 + np.arange(extra.size)
    return np.concatenate([out, tail])


def labels_at_cut(
    n: int, src: Array, dst: Array, weights: Array, cut: float, min_cluster_size: int
) -> np.ndarray[Any, Any]:
    """DBSCAN* at ``cut``: the components of the tree's edges lighter than ``cut``, numbered in the
    order of their smallest point; components smaller than ``min_cluster_size`` are noise (-1)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    keep = _host(weights) < cut
    u, v = _host(src)[keep], _host(dst)[keep]
    graph = coo_matrix((np.ones(u.size), (u, v)), shape=(n, n))
    _, comp = connected_components(graph, directed=False)
    sizes = np.bincount(comp, minlength=n)
    big = sizes >= min_cluster_size
    numbers = np.full(sizes.size, -1, dtype=np.int64)
    numbers[big] = np.arange(int(big.sum()))
    labels: np.ndarray[Any, Any] = numbers[comp]
    return labels


def centers(
    points: Array, search: Array, labels: Array, probabilities: Array, metric: Metric, which: str
) -> dict[str, Array]:
    """``centroids_`` (the probability-weighted mean of each cluster's points) and/or ``medoids_``
    (the point minimising the probability-weighted sum of its distances, under ``metric``, to the
    cluster's points), in label order, as scikit-learn's ``_weighted_cluster_center``."""
    xp = _module_of(points)
    count = int(labels.max(initial=-1)) + 1
    d = int(points.shape[1])
    out: dict[str, Array] = {}
    if which in ("centroid", "both"):
        out["centroids_"] = xp.empty((count, d))
    if which in ("medoid", "both"):
        out["medoids_"] = xp.empty((count, d))
    labels_x = xp.asarray(labels)
    strength = xp.asarray(probabilities)
    for label in range(count):
        mask = labels_x == label
        data, weight = points[mask], strength[mask]
        if "centroids_" in out:
            out["centroids_"][label] = (data * weight[:, None]).sum(axis=0) / weight.sum()
        if "medoids_" in out:
            out["medoids_"][label] = data[_medoid(search[mask], weight, metric)]
    return out


def _medoid(search: Array, weight: Array, metric: Metric, rows: int = 512) -> int:
    """The row minimising ``sum_j d(i, j) w_j`` (first on ties), in chunks of rows."""
    xp = _module_of(search)
    space = metric.space
    assert space is not None
    totals = xp.empty(int(search.shape[0]))
    for lo in range(0, int(search.shape[0]), rows):
        keys = space.cross_keys(search[lo : lo + rows], search)
        totals[lo : lo + rows] = (metric.distances(keys).reshape(keys.shape) * weight[None, :]).sum(axis=1)
    return int(xp.argmin(totals))


def _module_of(array: Any) -> Any:
    if type(array).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def _host(array: Any) -> np.ndarray[Any, Any]:
    return array.get() if type(array).__module__.split(".")[0] == "cupy" else np.asarray(array)
