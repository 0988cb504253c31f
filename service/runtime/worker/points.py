"""Point sets resident in a worker, and the tasks on them: ``emst``, ``hdbscan``, ``single_linkage``.

Runs in the worker process (it imports :mod:`gpu_core`). Every task and model takes a ``metric``
(and ``metric_params``; Euclidean by default): a point set keeps one index per metric it was asked
for, and its trees and hierarchies by metric and ``min_samples``. A resident point set keeps, besides
its coordinates, the trees computed on it by ``min_samples`` and their single-linkage hierarchies, so
``hdbscan`` with another ``min_cluster_size`` (or the same ``min_samples`` again) and
``single_linkage`` reuse them (``reused_tree`` in the job's result) instead of computing the tree
again. It also keeps its spatial index (:class:`gpu_core.PointIndex`: on the GPU the Morton-ordered
points and boxes on the device, on the CPU the k-d tree), built by the first job that computes a
tree, so a tree of another ``min_samples`` (or an ``emst`` after an ``hdbscan``) is computed on it
(``reused_index`` in the job's result). Trees are deterministic, so a reused tree or index gives
what a new computation would give; all of it goes with the point set when it is dropped.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidUploadError
from .prediction import ResidentModel, on_host

#: a metric as the point set keys its indexes and trees: (scikit-learn's name, its sorted parameters)
MetricKey = tuple[str, tuple[tuple[str, float], ...]]


def metric_key(params: dict[str, Any]) -> MetricKey:
    """``params``' metric, resolved (aliases to names, Minkowski's p 1, 2, inf to their metrics'
    keys): equal keys answer with the same index and trees."""
    from gpu_core._points.metrics import resolve_metric

    metric = resolve_metric(params.get("metric", "euclidean"), params.get("metric_params"))
    return metric.name, tuple(sorted(metric.params.items()))


def read_points(path: str, fmt: str, max_inflated_bytes: int, max_ratio: float) -> np.ndarray[Any, Any]:
    """The ``(n, d)`` coordinates of a spool file: ``points.npy`` (mapped, not read), or any format
    :func:`parse_points` reads."""
    if fmt == "points.npy":
        try:
            array: np.ndarray[Any, Any] = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise InvalidUploadError(f"the body cannot be read as npy: {exc}", field="body") from None
        return _npy_array(array)
    return parse_points(Path(path).read_bytes(), fmt, max_inflated_bytes, max_ratio)


def parse_points(data: bytes, fmt: str, max_inflated_bytes: int, max_ratio: float) -> np.ndarray[Any, Any]:
    """The ``(n, d)`` coordinates of a body: ``points.npy``, ``points.npz`` with a ``points`` array
    (read with the upload caps, never unpickled), or ``points.arrow`` (:func:`arrow_points`).
    Uploads and the points of a prediction are read here alike."""
    import io

    from gpu_core.formats import npz_arrays

    try:
        if fmt == "points.npy":
            return _npy_array(np.load(io.BytesIO(data), allow_pickle=False))
        if fmt == "points.arrow":
            return arrow_points(data)
        arrays = npz_arrays(data, max_inflated_bytes=max_inflated_bytes, max_ratio=max_ratio)
    except (ValueError, OSError, EOFError) as exc:  # gpu_core's validation errors are ValueErrors
        raise InvalidUploadError(
            f"the body cannot be read as {fmt.split('.')[1]}: {exc}", field="body"
        ) from None
    if "points" not in arrays:
        raise InvalidUploadError(
            f"an npz of points holds a 'points' array of shape (n, d); this one holds {sorted(arrays)}.",
            field="points",
        )
    return arrays["points"]


def _npy_array(loaded: Any) -> np.ndarray[Any, Any]:
    """``np.load``'s answer for an npy body: a zip archive (an npz) loads as something else."""
    if not isinstance(loaded, np.ndarray):
        raise InvalidUploadError(
            "the body is an npz archive, not an npy array; send it with ?format=npz.", field="body"
        )
    return loaded


def arrow_points(data: bytes) -> np.ndarray[Any, Any]:
    """The points of an Arrow IPC stream (or file): one column of fixed-size lists (a point each,
    e.g. ``pa.FixedSizeListArray.from_arrays(flat, d)``), or one numeric column per coordinate,
    in order. Float32 columns stay float32; any other numbers become float64. Nulls are refused."""
    import pyarrow as pa
    import pyarrow.ipc

    try:
        source = pa.py_buffer(data)
        reader = pyarrow.ipc.open_file if data[:6] == b"ARROW1" else pyarrow.ipc.open_stream
        table = reader(source).read_all()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise InvalidUploadError(f"the body cannot be read as arrow: {exc}", field="body") from None
    if table.num_columns == 0:
        raise InvalidUploadError("the Arrow table has no column; send one per coordinate.", field="points")
    for name, column in zip(table.column_names, table.columns, strict=True):
        if column.null_count:
            first = next(i for i, v in enumerate(column.is_null().to_pylist()) if v)
            raise InvalidUploadError(
                f"column {name!r} has null values (the first at row {first}); every coordinate is a number.",
                field="points",
                index=first,
            )
    first = table.column(0)
    if table.num_columns == 1 and pa.types.is_fixed_size_list(first.type):
        width = first.type.list_size
        values = first.combine_chunks().flatten()
        if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
            raise InvalidUploadError(
                f"column {table.column_names[0]!r} holds lists of {values.type}; coordinates are numbers.",
                field="points",
            )
        if values.null_count:
            raise InvalidUploadError("the points' lists hold null values; every coordinate is a number.",
                                     field="points")  # fmt: skip
        flat: np.ndarray[Any, Any] = values.to_numpy(zero_copy_only=False)
        return flat.reshape(len(first), width) if width else flat.reshape(len(first), 0)
    columns = []
    for name, column in zip(table.column_names, table.columns, strict=True):
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
            raise InvalidUploadError(
                f"column {name!r} has type {column.type}; each column is one coordinate (numbers), or "
                "one column of fixed-size lists holds the points.",
                field="points",
            )
        columns.append(column.to_numpy())
    dtype = np.float32 if all(c.dtype == np.float32 for c in columns) else np.float64
    return np.column_stack([c.astype(dtype, copy=False) for c in columns])


class ResidentPoints:
    """A point set on a worker's backend, with the trees (by ``min_samples``) computed on it so far.

    On the GPU backend the index is built from a device copy of the points, so the trees and their
    dendrograms stay on the device, where HDBSCAN*'s labels are made too; results come to the host
    only to be written.
    """

    def __init__(self, points: Any, backend: str) -> None:
        from gpu_core._points.validate import validate_points

        self.coords = validate_points(points)
        self.dtype = "float32" if np.asarray(points).dtype == np.float32 else "float64"
        self.backend = backend
        #: by (metric, its parameters) and min_samples
        self._trees: dict[tuple[MetricKey, int], Any] = {}
        self._linkages: dict[tuple[MetricKey, int], np.ndarray[Any, Any]] = {}
        self._indexes: dict[MetricKey, Any] = {}  # gpu_core.PointIndex per metric, built on first need
        #: HDBSCAN* models fitted on it, by model id (see :mod:`.prediction`)
        self.models: dict[str, ResidentModel] = {}

    @property
    def num_points(self) -> int:
        return int(self.coords.shape[0])

    @property
    def dims(self) -> int:
        return int(self.coords.shape[1])

    @property
    def nbytes(self) -> int:
        trees = sum(t.src.nbytes + t.dst.nbytes + t.weights.nbytes for t in self._trees.values())
        indexes = sum(int(index.nbytes) for index in self._indexes.values())
        models = sum(m.nbytes for m in self.models.values())
        linkages = sum(z.nbytes for z in self._linkages.values())
        return int(self.coords.nbytes + trees + linkages + indexes + models)

    @property
    def index_built(self) -> bool:
        """Whether the Euclidean index is built (the one every point set's first job used to build)."""
        return metric_key({}) in self._indexes

    def index_built_for(self, params: dict[str, Any]) -> bool:
        """Whether the index of ``params``' metric is built."""
        return metric_key(params) in self._indexes

    def index(self, params: dict[str, Any] | None = None) -> tuple[Any, bool]:
        """The spatial index of ``params``' metric (built now if no job has needed it yet), and
        whether it was built before."""
        import gpu_core

        key = metric_key(params or {})
        known = self._indexes.get(key)
        if known is not None:
            return known, True
        coords = self.coords
        if self.backend == "gpu":  # an index of device points: trees, dendrograms and labels stay there
            import cupy

            coords = cupy.asarray(coords)
        metric, metric_params = key
        index = gpu_core.build_point_index(
            coords, metric=metric, metric_params=dict(metric_params) or None,
            backend=self.backend,  # type: ignore[arg-type]
        )  # fmt: skip
        self._indexes[key] = index
        return index, False

    def fit(self, model_id: str, params: dict[str, Any]) -> ResidentModel:
        """Fit an HDBSCAN* model of ``params`` on this point set's index of its metric and keep it
        as ``model_id``."""
        index, _ = self.index(params)
        model = ResidentModel(index, params)
        self.models[model_id] = model
        return model

    def tree(self, min_samples: int, params: dict[str, Any] | None = None) -> tuple[Any, bool, bool]:
        """The (mutual-reachability) tree of ``min_samples`` under ``params``' metric; whether it was
        computed before; whether no index had to be built for it (the tree, or the index it is
        computed on, was there)."""
        import gpu_core

        key = (metric_key(params or {}), min_samples)
        known = self._trees.get(key)
        if known is not None:
            return known, True, True
        index, reused_index = self.index(params)
        tree = gpu_core.metric_mst(index, min_samples=min_samples)
        self._trees[key] = tree
        return tree, False, reused_index

    def linkage(
        self, min_samples: int, params: dict[str, Any] | None = None
    ) -> tuple[np.ndarray[Any, Any], bool, bool]:
        """The single-linkage hierarchy of that tree, with :meth:`tree`'s two flags."""
        import gpu_core

        tree, reused, reused_index = self.tree(min_samples, params)
        key = (metric_key(params or {}), min_samples)
        linkage = self._linkages.get(key)
        if linkage is None:
            linkage = gpu_core.single_linkage(tree)
            self._linkages[key] = linkage
        return linkage, reused, reused_index

    def run(self, task: str, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(summary, result arrays) of a task on this point set."""
        from gpu_core._clustering.hdbscan import labels_from_tree
        from gpu_core.errors import ClusteringParameterError

        started = time.perf_counter()
        n = self.num_points
        if task == "emst":
            tree, reused, reused_index = self.tree(int(params.get("min_samples", 1)), params)
            arrays: dict[str, Any] = {"src": tree.src, "dst": tree.dst, "weights": tree.weights}
            if tree.core_distances is not None:
                arrays["core_distances"] = tree.core_distances
            summary: dict[str, Any] = {"num_edges": tree.num_edges, "total_weight": tree.total_weight,
                                       "num_components": 1}  # fmt: skip
        elif task == "single_linkage":
            if n < 2:
                raise ClusteringParameterError("a dendrogram needs at least 2 points.", field="points")
            linkage, reused, reused_index = self.linkage(1, params)
            arrays = {"linkage": linkage}
            summary = {"num_edges": n - 1, "total_weight": None, "num_components": 1}
        elif task == "hdbscan":
            min_cluster_size = int(params.get("min_cluster_size", 5))
            samples = params.get("min_samples")
            k = min_cluster_size if samples is None else int(samples)
            if k > n:
                raise ClusteringParameterError(
                    f"min_samples = {k} is more than the {n} points of the set.", field="min_samples"
                )
            if n < 2:  # no tree, no index: nothing to compute or reuse
                labels, probabilities = np.full(1, -1, dtype=np.int64), np.zeros(1)
                reused, reused_index = False, False
            elif params.get("allow_single_cluster") or params.get("max_cluster_size"):
                # the selection of a model: its fit, on the index of the metric (the same labels)
                reused_index = self.index_built_for(params)
                model = ResidentModel(self.index(params)[0], params, labels=True)
                labels, probabilities, reused = model.labels, model.probabilities, False
            else:
                linkage, reused, reused_index = self.linkage(k, params)
                labels, probabilities = labels_from_tree(
                    linkage,
                    min_cluster_size,
                    params.get("cluster_selection_method", "eom"),
                    float(params.get("cluster_selection_epsilon", 0.0)),
                )
            arrays = {"labels": labels, "probabilities": probabilities}
            clusters = int(labels.max()) + 1 if labels.size else 0
            summary = {"num_edges": n - 1, "total_weight": None, "num_components": clusters}
        else:
            raise InvalidUploadError(f"point sets have no task {task!r}.", field="task")
        arrays = {name: on_host(a) for name, a in arrays.items()}
        if task == "emst":
            # NumPy's sum of the host copy, as the CPU backend sums: a device sum may differ by an ulp
            summary["total_weight"] = float(arrays["weights"].sum())
        summary.update(reused_tree=reused, reused_index=reused_index)
        summary["compute_ms"] = (time.perf_counter() - started) * 1e3
        return summary, arrays


#: points of :func:`warm_up`'s sets
WARM_UP_POINTS = 40
#: coordinates of :func:`warm_up`'s sets, one of each path: the GPU hierarchy's packed boxes (1 to
#: 3), its general search, past either backend's spatial index (more than 32: brute force). Each
#: dimension and ``min_samples`` bucket of the GPU's kernels is gpu_core's warm-up's (every size
#: class); these sets make the tasks' own first run (imports, the service's paths) before ready.
WARM_UP_DIMENSIONS = (3, 5, 40)
#: the dimensions of :func:`warm_up`'s one-blob sets: a model whose selection chooses the root
#: (``allow_single_cluster``) with points in it (3) and with every point noise (20)
SINGLE_CLUSTER_DIMENSIONS = (3, 20)
#: ``min_samples`` of :func:`warm_up`: none (1: a Euclidean tree), a few, more than the lists hold
WARM_UP_MIN_SAMPLES = (1, 5, 40)
#: parameters of the models :func:`warm_up` fits: the selection on the device (the defaults) and
#: on the host (an epsilon, a single cluster allowed, a largest size), by excess of mass and leaves
WARM_UP_MODELS: tuple[dict[str, Any], ...] = (
    {"min_cluster_size": 5},
    {"min_cluster_size": 5, "min_samples": 3, "cluster_selection_method": "leaf"},
    {"min_cluster_size": 5, "cluster_selection_epsilon": 0.5, "allow_single_cluster": True},
    {"min_cluster_size": 4, "max_cluster_size": 10},
)


def warm_up(backend: str, dimensions: tuple[int, ...] = WARM_UP_DIMENSIONS, single: bool = True) -> None:
    """Run every point-set task once end to end (EMST of each :data:`WARM_UP_MIN_SAMPLES`, HDBSCAN* by
    excess of mass and by leaves with an epsilon, single linkage) on small sets of each
    :data:`WARM_UP_DIMENSIONS`, so that no request meets a first time: what the tasks import and
    the kernels and CuPy specializations around the engine's (those of every size class are
    ``gpu_core._points.warm_up``'s, run by the worker after this). One coordinate dtype does for
    both: the points are validated into float64 before anything computes on them. The compiled
    host passes (Numba) are the worker's to load (``gpu_core._clustering.hdbscan.warm_up_compiled``).
    ``dimensions``, ``single``: which sets (the worker runs some after ready, :mod:`.startup`)."""
    rng = np.random.default_rng(0)
    for dims in dimensions:
        coords = rng.random((WARM_UP_POINTS, dims))
        coords[: WARM_UP_POINTS // 2] += 3.0  # two blobs: models with clusters to predict into
        points = ResidentPoints(coords.astype(np.float32), backend)
        # a model's selection and prediction data are the same code in any dimension; the searches
        # of its core distances and predictions are not: every model on the first set, one on the
        # others (each fit lengthens the worker's start)
        models = WARM_UP_MODELS if dims == WARM_UP_DIMENSIONS[0] else WARM_UP_MODELS[:1]
        for i, params in enumerate(models):  # fits, predictions, membership vectors
            model = points.fit(f"warm-up-{i}", params)
            for queries in (coords[:7], coords[:1].astype(np.float32), coords[:3] + 100.0):
                model.predict(queries, membership=True)
            model.predict(coords[:2], membership=False)
        for k in WARM_UP_MIN_SAMPLES:
            points.run("emst", {"min_samples": k})
        points.run("single_linkage", {})
        for method, epsilon in (("eom", 0.0), ("leaf", 0.5)):
            params = {"min_cluster_size": 5, "cluster_selection_method": method,
                      "cluster_selection_epsilon": epsilon}  # fmt: skip
            points.run("hdbscan", params)
    for dims in SINGLE_CLUSTER_DIMENSIONS if single else ():  # the root chosen: its own labelling
        coords = rng.random((WARM_UP_POINTS, dims))
        model = ResidentPoints(coords.astype(np.float32), backend).fit("warm-up-single", WARM_UP_MODELS[2])
        model.predict(coords[:7] + 0.01, membership=True)
        model.predict(coords[:2], membership=False)
