"""``gpu_core.HDBSCAN``: HDBSCAN* as a scikit-learn estimator, on the GPU where there is one.

The scikit-learn API (``get_params``/``set_params``, ``fit``/``fit_predict``/``predict``, tags,
``clone``) without a scikit-learn base class: importing ``gpu_core`` must not import scikit-learn
(2 s), so the estimator protocol is written out here (scikit-learn's ``check_estimator`` passes,
tests/gpu_core/clustering/test_hdbscan_estimator.py). ``__init__`` stores the parameters unchanged; ``fit``
checks them. Clustering is ``gpu_core.hdbscan``'s (scikit-learn's semantics: ``min_samples``
counts the point itself); the attributes and the prediction follow the hdbscan library.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import numpy as np

from .._backend.resolve import BACKENDS, Backend, resolve_backend
from .._points.index import PointIndex, build_point_index
from .._points.neighbours import index_coordinates, query_points
from .model import Model, check_options, fit_model, glosh_scores
from .prediction import (
    PredictionData,
    all_points_vectors,
    membership_vectors,
    predict_labels,
    prediction_data,
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
    ``predict`` leaves that unchanged."""

    def __init__(self) -> None:
        self.model: Model | None = None
        self.index: PointIndex | None = None
        self.prediction: PredictionData | None = None
        self.outlier_scores: Array | None = None


def _host(array: Any) -> Array:
    return array.get() if type(array).__module__.split(".")[0] == "cupy" else np.asarray(array)


def _is_cupy(value: Any) -> bool:
    return type(value).__module__.split(".")[0] == "cupy"


class HDBSCAN:
    """HDBSCAN* clustering (scikit-learn's semantics), with the hdbscan library's prediction, soft
    clustering, GLOSH outlier scores and trees.

    ``min_samples`` counts the point itself, as in ``sklearn.cluster.HDBSCAN``: the hdbscan
    library's ``min_samples=k`` is ``min_samples=k + 1`` here (with its
    ``approx_min_span_tree=False``); ``None`` means ``min_cluster_size``. ``max_cluster_size``:
    None or 0 (the library's default) for no limit. ``prediction_data``: compute what prediction
    needs during ``fit``; otherwise ``predict`` and the module functions compute it on first use.
    ``backend``: ``"auto"`` (the GPU where CuPy sees one), ``"gpu"`` or ``"cpu"``; the two give
    the same labels bit for bit.
    """

    def __init__(
        self,
        min_cluster_size: int = 5,
        min_samples: int | None = None,
        cluster_selection_method: str = "eom",
        cluster_selection_epsilon: float = 0.0,
        allow_single_cluster: bool = False,
        max_cluster_size: int | None = None,
        prediction_data: bool = False,
        backend: Backend = "auto",
    ) -> None:
        self.min_cluster_size = min_cluster_size
        self.min_samples = min_samples
        self.cluster_selection_method = cluster_selection_method
        self.cluster_selection_epsilon = cluster_selection_epsilon
        self.allow_single_cluster = allow_single_cluster
        self.max_cluster_size = max_cluster_size
        self.prediction_data = prediction_data
        self.backend = backend

    # --- scikit-learn's estimator protocol ------------------------------------------------------

    @classmethod
    def _get_param_names(cls) -> list[str]:
        return [p for p in inspect.signature(cls.__init__).parameters if p != "self"]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        del deep  # no parameter is an estimator
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params: Any) -> HDBSCAN:
        valid = self._get_param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(
                    f"Invalid parameter {name!r} for estimator {type(self).__name__}. "
                    f"Valid parameters are: {sorted(valid)!r}."
                )
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = {name: p.default for name, p in inspect.signature(type(self).__init__).parameters.items()}
        changed = [f"{k}={v!r}" for k, v in self.get_params().items() if not _same(v, defaults[k])]
        return f"{type(self).__name__}({', '.join(changed)})"

    def __sklearn_tags__(self) -> Any:
        from sklearn.utils import InputTags, Tags, TargetTags

        return Tags(
            estimator_type="clusterer",
            target_tags=TargetTags(required=False),
            transformer_tags=None,
            regressor_tags=None,
            classifier_tags=None,
            input_tags=InputTags(allow_nan=False, sparse=False),
        )

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "labels_")

    def __getstate__(self) -> dict[str, Any]:
        """The fitted attributes, the prediction data and the training points, on the host; the
        model (index, trees) is made again on first use after unpickling, the same bits
        (prediction needs only the index)."""
        state = dict(self.__dict__)
        lazy: _Lazy | None = state.pop("_lazy", None)
        if lazy is not None:
            index = lazy.index
            assert index is not None
            if index.n > 1:
                state["_points"] = _host(index_coordinates(index))
            else:  # a GPU index of one point keeps no coordinates; one point predicts nothing
                state["_points"] = np.zeros((1, index.dimensions))
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
            lazy.prediction, lazy.outlier_scores = prediction, scores
            self._lazy = lazy
            self._points = points

    # --- fitting ---------------------------------------------------------------------------------

    def fit(self, X: Any, y: Any = None) -> HDBSCAN:
        """Cluster ``X`` (an ``(n, d)`` array-like, NumPy or CuPy); ``y`` is ignored."""
        del y
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {self.backend!r}.")
        if not isinstance(self.prediction_data, bool | np.bool_):
            raise ValueError(f"prediction_data must be True or False; got {self.prediction_data!r}.")
        points = self._check_input(X, fitting=True)
        self.__dict__.pop("_points", None)

        def options(n: int) -> Any:
            return check_options(
                n, self.min_cluster_size, self.min_samples, self.cluster_selection_method,
                self.cluster_selection_epsilon, self.allow_single_cluster, self.max_cluster_size,
            )  # fmt: skip

        model = fit_model(points, options, self.backend)
        lazy = _Lazy()
        lazy.model, lazy.index = model, model.index
        self._lazy = lazy
        self.labels_ = model.labels
        self.probabilities_ = model.probabilities
        self.cluster_persistence_ = _persistence(model)
        self.n_features_in_ = model.index.dimensions
        if self.prediction_data:
            lazy.prediction = prediction_data(model)
        return self

    def fit_predict(self, X: Any, y: Any = None) -> Array:
        """``fit(X).labels_``."""
        return self.fit(X, y).labels_

    def predict(self, X: Any) -> Any:
        """The labels of new points by ``approximate_predict`` (NumPy, or CuPy for CuPy points on
        a GPU model)."""
        labels, _ = approximate_predict(self, X)
        return labels

    def _check_input(self, X: Any, *, fitting: bool) -> Any:
        """``X`` as the engine takes it: CuPy or a NumPy array; the feature names of a DataFrame."""
        if _is_cupy(X) or isinstance(X, PointIndex):
            return X
        if hasattr(X, "toarray") or type(X).__module__.startswith("scipy.sparse"):
            raise TypeError(f"{type(self).__name__} does not take sparse input; pass a dense array.")
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
            params["backend"] = self._index_of().backend
            refit = HDBSCAN(**params).fit(self._index_of())
            lazy.model = refit._require_fitted().model
        assert lazy.model is not None
        return lazy.model

    def _index_of(self) -> PointIndex:
        lazy = self._require_fitted()
        if lazy.index is None:
            lazy.index = build_point_index(self.__dict__["_points"], backend=resolve_backend(self.backend))
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
        """GLOSH outlier scores (the hdbscan library's definition), computed on first use."""
        lazy = self._require_fitted()
        if lazy.outlier_scores is None:
            lazy.outlier_scores = _host(glosh_scores(self._require_model())).astype(np.float64)
        return lazy.outlier_scores

    @property
    def condensed_tree_(self) -> CondensedTree:
        model = self._require_model()
        c = model.clusters
        n = model.n
        arrays = (c.parent, c.birth, c.size, c.point_cluster, c.point_lam)
        rows = condensed_rows(n, *(_host(a) for a in arrays))
        return CondensedTree(rows, self.labels_, n + _host(model.selected_clusters()))

    @property
    def single_linkage_tree_(self) -> SingleLinkageTree:
        return SingleLinkageTree(_host(self._require_model().linkage))

    @property
    def minimum_spanning_tree_(self) -> MinimumSpanningTree:
        model = self._require_model()
        t = model.tree
        edges = np.column_stack((_host(t.src).astype(np.float64), _host(t.dst).astype(np.float64),
                                 _host(t.weights)))  # fmt: skip
        return MinimumSpanningTree(edges, _host(index_coordinates(model.index)))

    @property
    def exemplars_(self) -> list[Array]:
        """Per label, the coordinates of its exemplars (the points of its leaf clusters that
        leave last), as the hdbscan library's prediction data has them."""
        data = self._prediction_of()
        labels, exemplars = _host(data.exemplar_label), _host(data.exemplars)
        return [exemplars[labels == j] for j in range(data.num_labels)]


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except (TypeError, ValueError):
        return a is b


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


def _prediction_inputs(clusterer: HDBSCAN, points: Any) -> tuple[PredictionData, PointIndex, Any, bool]:
    data = clusterer._prediction_of()
    index = clusterer._index_of()
    if not _is_cupy(points):
        points = clusterer._check_input(points, fitting=False)
    queries, from_cupy = query_points(index, points)
    return data, index, queries, from_cupy


def _out(array: Any, from_cupy: bool) -> Any:
    return array if from_cupy else _host(array)


def approximate_predict(clusterer: HDBSCAN, points_to_predict: Any) -> tuple[Any, Any]:
    """Labels and probabilities of new points in ``clusterer``'s clustering (the hdbscan
    library's ``approximate_predict``): NumPy arrays, or CuPy ones for CuPy points on a GPU model
    (nothing then leaves the device)."""
    data, index, queries, from_cupy = _prediction_inputs(clusterer, points_to_predict)
    labels, probabilities = predict_labels(data, index, queries)
    return _out(labels, from_cupy), _out(probabilities, from_cupy)


def membership_vector(clusterer: HDBSCAN, points_to_predict: Any) -> Any:
    """Soft cluster membership of new points (the hdbscan library's ``membership_vector``):
    ``(q, L)``, column ``j`` the label ``j``."""
    data, index, queries, from_cupy = _prediction_inputs(clusterer, points_to_predict)
    return _out(membership_vectors(data, index, queries), from_cupy)


def all_points_membership_vectors(clusterer: HDBSCAN) -> Any:
    """Soft cluster membership of the training points (the hdbscan library's
    ``all_points_membership_vectors``): ``(n, L)``; CuPy on a model fitted on CuPy points."""
    data = clusterer._prediction_of()
    index = clusterer._index_of()
    return _out(all_points_vectors(data, index), index.on_device)
