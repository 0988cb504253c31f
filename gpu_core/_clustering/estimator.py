"""``gpu_core.HDBSCAN``: HDBSCAN* as a scikit-learn estimator, on the GPU where there is one.

The scikit-learn API (``get_params``/``set_params``, ``fit``/``fit_predict``/``predict``, tags,
``clone``) without a scikit-learn base class: importing ``gpu_core`` must not import scikit-learn
(seconds), so the estimator protocol is written out here (scikit-learn's ``check_estimator`` passes,
tests/gpu_core/clustering/test_hdbscan_estimator.py). ``__init__`` stores the parameters unchanged;
``fit`` validates them with scikit-learn's ``_parameter_constraints`` (``sklearn_compat``) and the
engine's checks. Every parameter of ``sklearn.cluster.HDBSCAN`` is taken with its meaning, and its
own test module passes against this class (tests/gpu_core/clustering/test_sklearn_suite.py).
Clustering is ``gpu_core.hdbscan``'s (scikit-learn's semantics: ``min_samples`` counts the point
itself); the attributes and the prediction follow the hdbscan library.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .._backend.resolve import BACKENDS, Backend, resolve_backend
from .._points.index import PointIndex, build_point_index
from .._points.metrics import resolve_metric
from .._points.neighbours import index_coordinates, query_points
from .._points.precomputed import is_sparse
from .model import Model, check_options, fit_model, glosh_scores
from .params import EstimatorParams
from .prediction import (
    PredictionData,
    all_points_vectors,
    membership_vectors,
    predict_labels,
    prediction_data,
)
from .sklearn_compat import (
    INFINITE_LABEL,
    MISSING_LABEL,
    ConstraintsDescriptor,
    Outliers,
    centers,
    check_algorithm,
    hierarchy,
    labels_at_cut,
    place,
    place_labels,
    split_non_finite,
    validate_parameters,
)
from .trees import CondensedTree, MinimumSpanningTree, SingleLinkageTree, condensed_rows

Array = np.ndarray[Any, Any]


class NotFittedError(ValueError, AttributeError):
    """The model is used before ``fit``; call ``fit`` first. Where scikit-learn is installed the
    error raised is also a ``sklearn.exceptions.NotFittedError``."""


@functools.cache
def _not_fitted_class() -> type[NotFittedError]:
    """:class:`NotFittedError`, also scikit-learn's where that is installed (imported only here,
    on the error's path: importing scikit-learn takes seconds)."""
    try:
        from sklearn.exceptions import NotFittedError as SklearnNotFitted
    except ImportError:
        return NotFittedError
    return type("NotFittedError", (NotFittedError, SklearnNotFitted), {"__module__": __name__})


class _Lazy:
    """What a fitted estimator computes on first use (prediction data, GLOSH scores, the model
    again after unpickling), kept apart from its ``__dict__``: scikit-learn requires that
    ``predict`` leaves that unchanged. ``points``: what was fitted (the finite rows, or the
    distance matrix); ``outliers``: where the rows set apart were."""

    def __init__(self) -> None:
        self.model: Model | None = None
        self.index: PointIndex | None = None
        self.prediction: PredictionData | None = None
        self.outlier_scores: Array | None = None
        self.points: Any = None
        self.outliers: Outliers | None = None


def _host(array: Any) -> Array:
    return array.get() if type(array).__module__.split(".")[0] == "cupy" else np.asarray(array)


def _is_cupy(value: Any) -> bool:
    return type(value).__module__.split(".")[0] == "cupy"


class HDBSCAN(EstimatorParams):
    """HDBSCAN* clustering: a drop-in for ``sklearn.cluster.HDBSCAN``, with the hdbscan library's
    prediction, soft clustering, GLOSH outlier scores and trees, on the GPU where there is one.

    Parameters
    ----------
    min_cluster_size : int, default=5
        The smallest size of a cluster; smaller groups are noise.
    min_samples : int, default=None
        Core distance = the distance to the ``min_samples``-th nearest point, the point itself
        counted (scikit-learn's convention: the hdbscan library's ``k`` is ``k + 1`` here). None:
        ``min_cluster_size``.
    cluster_selection_epsilon : float, default=0.0
        Clusters split below this distance are merged.
    max_cluster_size : int, default=None
        The largest cluster excess of mass may select; None or 0 (the hdbscan library's default):
        no limit.
    metric : str or callable, default="euclidean"
        ``"euclidean"``, ``"manhattan"`` (``"l1"``, ``"cityblock"``), ``"chebyshev"``
        (``"infinity"``), ``"minkowski"`` (``"p"``), ``"cosine"``, ``"haversine"`` (latitude,
        longitude in radians), ``"precomputed"`` (``X`` is a distance matrix, dense or sparse), or
        a callable of two points (evaluated on every pair, on the host).
    metric_params : dict, default=None
        ``{"p": p}`` (p >= 1) for minkowski; the other metrics take none.
    alpha : float, default=1.0
        Edges weigh ``max(core_i, core_j, d(i, j) / alpha)`` (robust single linkage's scale).
    algorithm : {"auto", "brute", "kd_tree", "ball_tree"}, default="auto"
        scikit-learn's choice of CPU method: accepted and validated as scikit-learn validates it
        (a metric its tree cannot take, sparse input with a tree), else a hint; the engine's
        index is chosen by the dimension.
    leaf_size : int, default=40
        A hint (scikit-learn's trees' leaf size), validated.
    n_jobs : int, default=None
        A hint (scikit-learn's processes), validated.
    cluster_selection_method : {"eom", "leaf"}, default="eom"
        Excess of mass, or the leaves of the condensed tree.
    allow_single_cluster : bool, default=False
        Whether the root may be the one cluster.
    store_centers : {None, "centroid", "medoid", "both"}, default=None
        Store ``centroids_`` (probability-weighted means) and/or ``medoids_`` (under the metric).
    copy : bool, default=False
        Accepted for scikit-learn's signature: the engine never writes into ``X``.
    prediction_data : bool, default=False
        Compute what prediction needs during ``fit`` (otherwise on first use).
    backend : {"auto", "gpu", "cpu"}, default="auto"
        Where to compute (the GPU where CuPy sees one); both give the same labels bit for bit.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Cluster labels; -1 noise, -2 rows with an infinite coordinate, -3 rows with a missing one.
    probabilities_ : ndarray of shape (n_samples,)
        Membership strengths (0 for noise and infinite rows, NaN for missing rows).
    n_features_in_ : int
        The number of features (columns) of ``X``.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        The column names of a DataFrame ``X`` whose names are all strings.
    centroids_, medoids_ : ndarray of shape (n_clusters, n_features)
        With ``store_centers``.
    cluster_persistence_, outlier_scores_, exemplars_, prediction_data_ : the hdbscan library's.
    condensed_tree_, single_linkage_tree_, minimum_spanning_tree_ : the hdbscan library's trees.
    """

    _parameter_constraints = ConstraintsDescriptor()

    def __init__(
        self,
        min_cluster_size: int = 5,
        min_samples: int | None = None,
        cluster_selection_epsilon: float = 0.0,
        max_cluster_size: int | None = None,
        metric: Any = "euclidean",
        metric_params: dict[str, Any] | None = None,
        alpha: float = 1.0,
        algorithm: str = "auto",
        leaf_size: int = 40,
        n_jobs: int | None = None,
        cluster_selection_method: str = "eom",
        allow_single_cluster: bool = False,
        store_centers: str | None = None,
        copy: bool = False,
        prediction_data: bool = False,
        backend: Backend = "auto",
    ) -> None:
        self.min_cluster_size = min_cluster_size
        self.min_samples = min_samples
        self.cluster_selection_epsilon = cluster_selection_epsilon
        self.max_cluster_size = max_cluster_size
        self.metric = metric
        self.metric_params = metric_params
        self.alpha = alpha
        self.algorithm = algorithm
        self.leaf_size = leaf_size
        self.n_jobs = n_jobs
        self.cluster_selection_method = cluster_selection_method
        self.allow_single_cluster = allow_single_cluster
        self.store_centers = store_centers
        self.copy = copy
        self.prediction_data = prediction_data
        self.backend = backend

    # --- scikit-learn's estimator protocol: EstimatorParams (get_params, set_params, repr) ---

    def __sklearn_tags__(self) -> Any:
        from sklearn.utils import InputTags, Tags, TargetTags

        return Tags(
            estimator_type="clusterer",
            target_tags=TargetTags(required=False),
            transformer_tags=None,
            regressor_tags=None,
            classifier_tags=None,
            input_tags=InputTags(allow_nan=self.metric != "precomputed", sparse=True),
        )

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "labels_")

    def __getstate__(self) -> dict[str, Any]:
        """The fitted attributes, the prediction data and the points fitted (the finite rows, or
        the distance matrix), on the host; the model (index, trees) is made again on first use
        after unpickling, the same bits (prediction needs only the index)."""
        state = dict(self.__dict__)
        lazy: _Lazy | None = state.pop("_lazy", None)
        if lazy is not None:
            state["_points"] = _host(lazy.points) if not is_sparse(lazy.points) else lazy.points
            if lazy.prediction is not None:
                state["_prediction"] = lazy.prediction.to_module(np)
            state["_outlier_scores"] = lazy.outlier_scores
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        points = state.pop("_points", None)
        prediction = state.pop("_prediction", None)
        scores = state.pop("_outlier_scores", None)
        self.__dict__.update(state)
        if points is not None:
            lazy = _Lazy()
            lazy.prediction, lazy.outlier_scores, lazy.points = prediction, scores, points
            self._lazy = lazy

    # --- fitting ---------------------------------------------------------------------------------

    def fit(self, X: Any, y: Any = None) -> HDBSCAN:
        """Cluster ``X``: an ``(n_samples, n_features)`` array-like, NumPy, CuPy or SciPy sparse
        (densified), or with ``metric="precomputed"`` an ``(n_samples, n_samples)`` distance matrix
        (dense, or sparse as scikit-learn takes it). ``y`` is ignored."""
        del y
        if not isinstance(X, PointIndex):  # first, so its message names the metric a tree refuses
            check_algorithm(self.algorithm, self.metric, is_sparse(X))
        self._check_parameters()
        if self.metric == "precomputed" and self.store_centers is not None:
            raise ValueError("Cannot store centers when using a precomputed distance matrix.")
        metric = resolve_metric(self.metric, self.metric_params)
        outliers: Outliers | None = None
        if isinstance(X, PointIndex):
            data: Any = X
        else:
            data = self._check_input(X, fitting=True)
            if not metric.precomputed or metric.func is not None:
                data, outliers = split_non_finite(data)
            self._check_size(int(data.shape[0]))
        model = fit_model(data, self._options, self.backend, metric=metric)
        lazy = _Lazy()
        lazy.model, lazy.index = model, model.index
        lazy.points = (
            data if not isinstance(data, PointIndex) else _points_of(data, self.__dict__.get("_lazy"))
        )
        lazy.outliers = outliers
        self._lazy = lazy
        self.labels_, self.probabilities_ = place_labels(model.labels, model.probabilities, outliers)
        self.cluster_persistence_ = _persistence(model)
        self.n_features_in_ = model.index.dimensions
        for name in ("centroids_", "medoids_"):
            self.__dict__.pop(name, None)
        if self.store_centers is not None and not isinstance(data, PointIndex):
            self._store_centers(model, data, metric)
        if self.prediction_data:
            lazy.prediction = prediction_data(model)
        return self

    def _options(self, n: int) -> Any:
        return check_options(
            n, self.min_cluster_size, self.min_samples, self.cluster_selection_method,
            self.cluster_selection_epsilon, self.allow_single_cluster, self.max_cluster_size, self.alpha,
        )  # fmt: skip

    def _check_parameters(self) -> None:
        """scikit-learn's validation of every parameter where it is installed (else the engine's
        checks of the clustering's during the fit, and these)."""
        if validate_parameters(self.get_params(), type(self).__name__):
            return
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {self.backend!r}.")
        for name in ("prediction_data", "copy"):
            if not isinstance(getattr(self, name), bool | np.bool_):
                raise ValueError(f"{name} must be True or False; got {getattr(self, name)!r}.")

    def _check_size(self, n: int) -> None:
        """scikit-learn's refusals of a set too small for the parameters, in its words."""
        if n == 1:
            raise ValueError("n_samples=1 while HDBSCAN requires more than one sample")
        k = self.min_cluster_size if self.min_samples is None else self.min_samples
        if isinstance(k, int | np.integer) and k > n:
            raise ValueError(f"min_samples ({k}) must be at most the number of samples in X ({n})")

    def _store_centers(self, model: Model, points: Any, metric: Any) -> None:
        if metric.precomputed:
            raise ValueError("Cannot store centers when using a precomputed distance matrix.")
        search = index_coordinates(model.index)
        if not _is_cupy(points):
            search = _host(search)
        found = centers(points, search, model.labels, model.probabilities, metric, str(self.store_centers))
        for name, value in found.items():
            setattr(self, name, _host(value) if not _is_cupy(points) else value)

    def fit_predict(self, X: Any, y: Any = None) -> Array:
        """``fit(X).labels_``."""
        labels: Array = self.fit(X, y).labels_
        return labels

    def predict(self, X: Any) -> Any:
        """The labels of new points by ``approximate_predict`` (NumPy, or CuPy for CuPy points on
        a GPU model)."""
        labels, _ = approximate_predict(self, X)
        return labels

    def dbscan_clustering(self, cut_distance: float, min_cluster_size: int = 5) -> Array:
        """DBSCAN* at ``cut_distance`` (scikit-learn's ``dbscan_clustering``): the clusters of the
        mutual-reachability tree's edges lighter than the cut, of at least ``min_cluster_size``
        points (else noise, -1), numbered by their smallest point; rows set apart keep -2 and -3."""
        model = self._require_model()
        lazy = self._require_fitted()
        t = model.tree
        labels = labels_at_cut(model.n, t.src, t.dst, t.weights, float(cut_distance), int(min_cluster_size))
        placed: Array = place(labels, lazy.outliers, INFINITE_LABEL, MISSING_LABEL)
        return placed

    @property
    def _single_linkage_tree_(self) -> Array:
        """The single-linkage tree as scikit-learn's structured array (``HIERARCHY_dtype``)."""
        return hierarchy(_host(self._require_model().linkage), self._require_fitted().outliers)

    def _check_input(self, X: Any, *, fitting: bool) -> Any:
        """``X`` as the engine takes it: CuPy or a NumPy array (sparse coordinates densified; a
        sparse distance matrix as it is); the feature names of a DataFrame."""
        if _is_cupy(X) or isinstance(X, PointIndex):
            return X
        if is_sparse(X):
            if fitting and self.metric == "precomputed":
                self.n_features_in_ = int(X.shape[1])
                return X
            return self._check_input(X.toarray(), fitting=fitting)
        names = getattr(X, "columns", None)
        array = np.asarray(X)
        if array.dtype.kind == "c":
            raise ValueError("Complex data not supported; pass real coordinates.")
        if array.dtype == object:
            array = array.astype(np.float64)
        # scikit-learn's messages, which its estimator checks look for
        if array.ndim == 1:
            raise ValueError(
                f"Expected a 2-dimensional array, got a 1-dimensional one of shape {array.shape}: "
                "Reshape your data either using array.reshape(-1, 1) if your data has a single "
                "feature or array.reshape(1, -1) if it contains a single sample."
            )
        if array.ndim == 2 and 0 in array.shape:
            what = "sample(s)" if array.shape[0] == 0 else "feature(s)"
            raise ValueError(
                f"Found array with 0 {what} (shape={array.shape}) while a minimum of 1 is required."
            )
        string_names = names is not None and all(isinstance(c, str) for c in names)
        if fitting:
            if string_names:
                self.feature_names_in_: Array = np.array([str(c) for c in names or ()], dtype=object)
            else:
                self.__dict__.pop("feature_names_in_", None)
        else:
            _check_feature_names(self, names if string_names else None)
            if array.ndim == 2 and array.shape[1] != self.n_features_in_:
                raise ValueError(
                    f"X has {array.shape[1]} features, but {type(self).__name__} is expecting "
                    f"{self.n_features_in_} features as input."
                )
        return array

    # --- the model, made again after unpickling --------------------------------------------------

    def _require_fitted(self) -> _Lazy:
        lazy: _Lazy | None = self.__dict__.get("_lazy")
        if lazy is None or not self.__sklearn_is_fitted__():
            raise _not_fitted_class()(
                f"This {type(self).__name__} instance is not fitted yet; call 'fit' with appropriate "
                "arguments before using this estimator."
            )
        return lazy

    def _require_model(self) -> Model:
        lazy = self._require_fitted()
        if lazy.model is None:  # unpickled: the same fit again, on this host's backend
            params = self.get_params()
            params.update(backend=self._index_of().backend, store_centers=None, prediction_data=False)
            refit = HDBSCAN(**params)
            refit._lazy = lazy
            lazy.model = refit.fit(self._index_of())._require_fitted().model
        assert lazy.model is not None
        return lazy.model

    def _index_of(self) -> PointIndex:
        lazy = self._require_fitted()
        if lazy.index is None:
            lazy.index = build_point_index(
                lazy.points, metric=self.metric, metric_params=self.metric_params,
                backend=resolve_backend(self.backend),
            )  # fmt: skip
        return lazy.index

    def _prediction_of(self) -> PredictionData:
        """The prediction data (made on first use), in the index's array module."""
        lazy = self._require_fitted()
        data = lazy.prediction
        if data is None:
            data = prediction_data(self._require_model())
        if self._index_of().backend == "gpu" and _host_module(data.point_lam):
            import cupy

            data = data.to_module(cupy)
        lazy.prediction = data
        return data

    # --- fitted attributes of the hdbscan library -------------------------------------------------

    @property
    def prediction_data_(self) -> PredictionData:
        """What prediction and soft clustering read (computed on first use)."""
        return self._prediction_of()

    @property
    def outlier_scores_(self) -> Array:
        """GLOSH outlier scores (the hdbscan library's definition), computed on first use; NaN for
        rows set apart (non-finite coordinates)."""
        lazy = self._require_fitted()
        if lazy.outlier_scores is None:
            scores = _host(glosh_scores(self._require_model())).astype(np.float64)
            lazy.outlier_scores = place(scores, lazy.outliers, np.nan, np.nan)
        return lazy.outlier_scores

    @property
    def condensed_tree_(self) -> CondensedTree:
        model = self._require_model()
        c = model.clusters
        n = model.n
        arrays = (c.parent, c.birth, c.size, c.point_cluster, c.point_lam)
        rows = condensed_rows(n, *(_host(a) for a in arrays))
        return CondensedTree(rows, model.labels, n + _host(model.selected_clusters()))

    @property
    def single_linkage_tree_(self) -> SingleLinkageTree:
        return SingleLinkageTree(_host(self._require_model().linkage))

    @property
    def minimum_spanning_tree_(self) -> MinimumSpanningTree:
        """The tree over the points fitted (their coordinates as given: the finite rows, or
        positions on a line for a distance matrix)."""
        model = self._require_model()
        t = model.tree
        edges = np.column_stack((_host(t.src).astype(np.float64), _host(t.dst).astype(np.float64),
                                 _host(t.weights)))  # fmt: skip
        points = self._require_fitted().points
        if model.index._metric.precomputed:
            points = np.column_stack((np.arange(model.n, dtype=np.float64), np.zeros(model.n)))
        return MinimumSpanningTree(edges, _host(points))

    @property
    def exemplars_(self) -> list[Array]:
        """Per label, the coordinates of its exemplars (the points of its leaf clusters that
        leave last), as the hdbscan library's prediction data has them."""
        data = self._prediction_of()
        points = _host(self._require_fitted().points)
        labels, index = _host(data.exemplar_label), _host(data.exemplar_index)
        return [points[index[labels == j]] for j in range(data.num_labels)]


def _points_of(index: PointIndex, earlier: _Lazy | None) -> Any:
    """What a fit on an index keeps as its points: an earlier fit's (a model made again after
    unpickling), else the index's own coordinates or matrix."""
    if earlier is not None and earlier.points is not None:
        return earlier.points
    if index._metric.precomputed:
        return index._state.matrix  # type: ignore[attr-defined]
    return index_coordinates(index)


def _host_module(array: Any) -> bool:
    return isinstance(array, np.ndarray)


def _check_feature_names(estimator: HDBSCAN, names: Any) -> None:
    fitted = getattr(estimator, "feature_names_in_", None)
    if fitted is None and names is None:
        return
    if fitted is None:
        import warnings

        warnings.warn(
            f"X has feature names, but {type(estimator).__name__} was fitted without feature names",
            UserWarning,
            stacklevel=3,
        )
        return
    if names is None:
        import warnings

        warnings.warn(
            f"X does not have valid feature names, but {type(estimator).__name__} was fitted with "
            "feature names",
            UserWarning,
            stacklevel=3,
        )
        return
    if list(names) != list(fitted):
        raise ValueError(
            "The feature names should match those that were passed during fit.\n"
            f"Fitted with: {list(fitted)}\nGot: {list(names)}"
        )


def _persistence(model: Model) -> Array:
    """The hdbscan library's ``cluster_persistence_``: per label, the selected cluster's stability
    over (its points x the largest lambda of the tree); 1 where that lambda is 0 or infinite."""
    count = model.num_labels
    if count == 0:
        return np.zeros(0)
    stab = _host(model.persistence_stability[model.selected_clusters()])
    c = model.clusters
    lams = [float(_host(c.point_lam).max())]
    if int(c.birth.shape[0]) > 1:
        lams.append(float(_host(c.birth).max()))
    top = max(lams)
    sizes = np.bincount(model.labels[model.labels >= 0], minlength=count)
    if not np.isfinite(top) or top == 0.0:
        return np.ones(count)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sizes == 0, 1.0, stab / (sizes * top))


# --- the module functions, as the hdbscan library's prediction.py has them --------------------------


def _prediction_inputs(
    clusterer: HDBSCAN, points: Any
) -> tuple[PredictionData, PointIndex, Any, bool, Outliers | None]:
    """The model's prediction data and index, the finite query rows as the index searches them,
    whether they came as CuPy, and where the rows set apart (non-finite coordinates) were."""
    data = clusterer._prediction_of()
    index = clusterer._index_of()
    if not _is_cupy(points):
        points = clusterer._check_input(points, fitting=False)
    outliers: Outliers | None = None
    if getattr(points, "ndim", 0) == 2 and points.shape[0] and points.dtype.kind == "f":
        points, outliers = split_non_finite(points)
    if outliers is not None and not outliers.finite.size:
        return data, index, None, _is_cupy(points), outliers
    queries, from_cupy = query_points(index, points)
    return data, index, queries, from_cupy, outliers


def _out(array: Any, from_cupy: bool) -> Any:
    return array if from_cupy else _host(array)


def _placed(array: Any, outliers: Outliers | None, from_cupy: bool, infinite: Any, missing: Any) -> Any:
    """A per-row answer of the finite rows, placed among the rows set apart (on the host)."""
    if outliers is None:
        return _out(array, from_cupy)
    return place(_host(array), outliers, infinite, missing)


def approximate_predict(clusterer: HDBSCAN, points_to_predict: Any) -> tuple[Any, Any]:
    """Labels and probabilities of new points in ``clusterer``'s clustering (the hdbscan
    library's ``approximate_predict``): NumPy arrays, or CuPy ones for CuPy points on a GPU model
    (nothing then leaves the device). Rows with an infinite coordinate get -2 (probability 0),
    rows with a missing one -3 (NaN), as ``fit`` labels them."""
    data, index, queries, from_cupy, outliers = _prediction_inputs(clusterer, points_to_predict)
    if queries is None:
        labels, probabilities = np.empty(0, dtype=np.int64), np.empty(0)
    else:
        labels, probabilities = predict_labels(data, index, queries)
    return (
        _placed(labels, outliers, from_cupy, INFINITE_LABEL, MISSING_LABEL),
        _placed(probabilities, outliers, from_cupy, 0.0, np.nan),
    )


def membership_vector(clusterer: HDBSCAN, points_to_predict: Any) -> Any:
    """Soft cluster membership of new points (the hdbscan library's ``membership_vector``):
    ``(q, L)``, column ``j`` the label ``j``; NaN rows for rows of non-finite coordinates."""
    data, index, queries, from_cupy, outliers = _prediction_inputs(clusterer, points_to_predict)
    if queries is None:
        vectors: Any = np.empty((0, data.num_labels))
    else:
        vectors = membership_vectors(data, index, queries)
    return _placed(vectors, outliers, from_cupy, np.nan, np.nan)


def all_points_membership_vectors(clusterer: HDBSCAN) -> Any:
    """Soft cluster membership of the training points (the hdbscan library's
    ``all_points_membership_vectors``): ``(n, L)``; CuPy on a model fitted on CuPy points."""
    data = clusterer._prediction_of()
    index = clusterer._index_of()
    vectors = all_points_vectors(data, index)
    outliers = clusterer._require_fitted().outliers
    if outliers is not None:  # rows set apart (non-finite coordinates): NaN rows
        vectors = place(_host(vectors), outliers, np.nan, np.nan)
        return _out(vectors, False)
    return _out(vectors, index.on_device)
