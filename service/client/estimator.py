"""``RemoteHDBSCAN``: ``gpu_core.HDBSCAN``'s constructor plus a service's URL and key, computing on the
service's GPU host while the caller (a laptop, BERTopic) holds only arrays.

``fit(X)`` uploads the points (one npz body), runs an ``hdbscan`` job on them for ``labels_`` and
``probabilities_`` and fits a resident model for prediction (its record: ``model_``); ``predict``,
``approximate_predict`` and ``membership_vector`` ask that model (one request each). The clustering is
the service's engine's, ``gpu_core``'s, so the answers are ``gpu_core.HDBSCAN``'s with the same
parameters. scikit-learn's estimator protocol (``get_params``/``set_params``, ``clone``) is
``gpu_core.HDBSCAN``'s (:class:`gpu_core._clustering.params.EstimatorParams`): no scikit-learn import.

Parameters the service does not take are refused rather than ignored: ``alpha`` other than 1,
``store_centers``, ``backend`` other than ``"auto"`` (the service chooses), ``metric="precomputed"``
or a callable (a point set holds coordinates). ``algorithm``, ``leaf_size``, ``n_jobs``, ``copy``
and ``prediction_data`` are scikit-learn's hints and are accepted (a model always keeps its
prediction data).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_core._clustering.params import EstimatorParams

from .client import Client

Array = np.ndarray[Any, Any]
#: the parameters a model (and an hdbscan job) of the service takes
SERVICE_PARAMS = (
    "min_cluster_size", "min_samples", "cluster_selection_method", "cluster_selection_epsilon",
    "allow_single_cluster", "max_cluster_size", "metric", "metric_params",
)  # fmt: skip


class RemoteHDBSCAN(EstimatorParams):
    """HDBSCAN* on a service: ``gpu_core.HDBSCAN``'s parameters, plus ``url``, ``api_key`` and
    ``timeout`` (seconds a job may take). Fitted attributes: ``labels_``, ``probabilities_``,
    ``n_features_in_``, ``points_id_`` and ``model_`` (the service's records of the uploaded points
    and of the model)."""

    def __init__(
        self,
        url: str = "http://127.0.0.1:8000",
        api_key: str | None = None,
        min_cluster_size: int = 5,
        min_samples: int | None = None,
        cluster_selection_epsilon: float = 0.0,
        max_cluster_size: int | None = None,
        metric: str = "euclidean",
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
        backend: str = "auto",
        timeout: float = 600.0,
    ) -> None:
        self.url = url
        self.api_key = api_key
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
        self.timeout = timeout

    # --- scikit-learn's estimator protocol: EstimatorParams (get_params, set_params, repr) ---

    def __sklearn_tags__(self) -> Any:
        from sklearn.utils import InputTags, Tags, TargetTags

        return Tags(
            estimator_type="clusterer", target_tags=TargetTags(required=False), transformer_tags=None,
            regressor_tags=None, classifier_tags=None, input_tags=InputTags(allow_nan=False, sparse=False),
        )  # fmt: skip

    # --- fitting and prediction -------------------------------------------------------------------

    def _service_params(self) -> dict[str, Any]:
        """The parameters sent, after refusing those the service cannot honour."""
        if self.alpha != 1.0:
            raise ValueError(f"alpha={self.alpha!r}: the service clusters with alpha=1 only.")
        if self.store_centers is not None:
            raise ValueError(
                "store_centers: the service does not compute centers; fit gpu_core.HDBSCAN locally."
            )
        if self.backend != "auto":
            raise ValueError(f"backend={self.backend!r}: the service chooses its own; leave backend='auto'.")
        if not isinstance(self.metric, str) or self.metric == "precomputed":
            raise ValueError(
                f"metric={self.metric!r}: a service's point set holds coordinates; pass a metric of them."
            )
        params = {name: getattr(self, name) for name in SERVICE_PARAMS}
        return {k: v for k, v in params.items() if v is not None}

    def _client(self) -> Client:
        return Client(self.url, api_key=self.api_key, timeout=self.timeout)

    def fit(self, X: Any, y: Any = None) -> RemoteHDBSCAN:
        """Upload ``X`` (an ``(n, d)`` array-like), cluster it and fit a resident model of it."""
        del y
        params = self._service_params()
        points = np.asarray(X)
        if points.dtype.kind not in "fiu" or points.ndim != 2:
            raise ValueError(
                f"X must be an (n, d) array of numbers; got {points.dtype} of shape {points.shape}."
            )
        if points.dtype not in (np.float32, np.float64):
            points = points.astype(np.float64)
        with self._client() as client:
            record = client.upload_points(points)
            result = client.hdbscan(record["id"], wait=self.timeout, **params)
            model = client.fit_model(record["id"], **params)
        self.points_id_: str = record["id"]
        self.model_: dict[str, Any] = model
        self.labels_: Array = np.asarray(result["labels"], dtype=np.int64)
        self.probabilities_: Array = np.asarray(result["probabilities"], dtype=np.float64)
        self.n_features_in_: int = int(points.shape[1])
        return self

    def fit_predict(self, X: Any, y: Any = None) -> Array:
        return self.fit(X, y).labels_

    def _ask(self, X: Any, membership: bool) -> dict[str, Array]:
        if not hasattr(self, "model_"):
            raise AttributeError("This RemoteHDBSCAN instance is not fitted yet; call 'fit' first.")
        points = np.asarray(X, dtype=np.float64)
        if points.ndim != 2 or points.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has shape {points.shape}, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input."
            )
        with self._client() as client:
            return client.predict(self.points_id_, self.model_["id"], points, membership=membership)

    def predict(self, X: Any) -> Array:
        """The labels of new points (``approximate_predict``'s)."""
        return self._ask(X, False)["labels"]

    def approximate_predict(self, X: Any) -> tuple[Array, Array]:
        """Labels and probabilities of new points, as ``gpu_core.approximate_predict``."""
        answer = self._ask(X, False)
        return answer["labels"], answer["probabilities"]

    def membership_vector(self, X: Any) -> Array:
        """Soft cluster membership of new points, ``(q, clusters)``, as ``gpu_core.membership_vector``."""
        return self._ask(X, True)["membership"]

    def delete(self) -> None:
        """Delete the uploaded point set (its model with it) from the service."""
        if hasattr(self, "points_id_"):
            with self._client() as client:
                client.delete_points(self.points_id_)
