"""The spatial index of a point set (:class:`PointIndex`), built once by either backend and reused.

The index (GPU: the Morton-ordered points and the boxes of their hierarchy, ``gpu``; CPU: SciPy's
k-d tree, ``cpu``) does not depend on ``min_samples``: :func:`build_point_index` builds it once and
every tree computed on it reuses it. Validation happens once, where the points enter the engine.
Points of more coordinates than :data:`SPATIAL_MAX_DIMENSIONS` allows the backend get the
brute-force index instead (``brute_cpu``, ``brute_gpu``; ``brute_exact`` for Minkowski keys): a
spatial index prunes little there. An index is of one metric (``metrics``): cosine and haversine
points are indexed as their unit vectors (Euclidean trees, weights mapped), manhattan, chebyshev and
minkowski with their keys (the k-d tree with SciPy's ``p``, the device's hierarchy in its minkowski
build), precomputed distances as the matrix itself (``precomputed``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any, Literal, Protocol

import numpy as np

from .._backend.arrays import is_cupy
from .._backend.resolve import BACKENDS, Backend, resolve_backend
from ..errors import MetricError, PointIndexBackendError, PointSetShapeError
from .metrics import EUCLIDEAN, Metric, pairwise_callable
from .tree import EuclideanTree
from .validate import validate_points

#: the most coordinates a backend's spatial index is used for; above, the brute-force path. CPU:
#: where the k-d tree and brute force meet on one core; GPU: the hierarchy's kernels hold at most 32
#: coordinates, the whole range it had before brute force existed
SPATIAL_MAX_DIMENSIONS: dict[str, int] = {"cpu": 12, "gpu": 32}
#: the most coordinates the GPU's hierarchy can hold (kMaxDims in kernels/emst.cu)
GPU_SPATIAL_LIMIT = 32
#: how the index is searched: "auto" (by SPATIAL_MAX_DIMENSIONS), "spatial" or "brute"
Search = Literal["auto", "spatial", "brute"]


class _IndexState(Protocol):
    """What a backend's index provides (``cpu.CpuIndex``, ``gpu.GpuIndex``)."""

    @property
    def nbytes(self) -> int: ...

    def build_ms(self) -> float: ...

    def tree(
        self,
        min_samples: int,
        started: float,
        fresh: bool,
        on_device: bool,
        *,
        keys: bool = ...,
        core_scale: float = ...,
    ) -> EuclideanTree: ...


class PointIndex:
    """The spatial index of a point set, built once by :func:`build_point_index` and reused.

    Pass it to :func:`euclidean_mst`, :func:`hdbscan` or :func:`single_linkage` in place of the
    points, with any ``min_samples``: the points are not validated, copied or indexed again, and
    the answers are the same arrays the points themselves give. On the GPU backend it lives on the
    device (the points in Morton order, their permutation and the boxes of the hierarchy, CuPy
    arrays); on the CPU backend it is SciPy's k-d tree over the float64 coordinates. It never
    changes once built (each computation allocates its own scratch), so any number of
    computations may use it in turn. ``on_device``: the GPU index was built from CuPy points, and
    its trees are CuPy arrays too. A CPU index of C-contiguous float64 NumPy points refers to that
    array instead of copying it: leave it unchanged while the index is in use. ``metric``: the
    metric its trees and searches are of (:func:`build_point_index`'s ``metric``).
    """

    __slots__ = ("_backend", "_dimensions", "_metric", "_n", "_on_device", "_state")

    def __init__(
        self,
        state: _IndexState,
        *,
        n: int,
        dimensions: int,
        backend: Literal["gpu", "cpu"],
        on_device: bool,
        metric: Metric = EUCLIDEAN,
    ) -> None:
        self._state = state
        self._n = n
        self._dimensions = dimensions
        self._backend = backend
        self._on_device = on_device
        self._metric = metric

    @property
    def n(self) -> int:
        """The number of points."""
        return self._n

    @property
    def dimensions(self) -> int:
        return self._dimensions

    @property
    def backend(self) -> Literal["gpu", "cpu"]:
        return self._backend

    @property
    def on_device(self) -> bool:
        return self._on_device

    @property
    def metric(self) -> str:
        """The metric's scikit-learn name (``"callable"`` for a callable)."""
        return self._metric.name

    @property
    def metric_params(self) -> dict[str, Any]:
        """The metric's parameters as resolved (Minkowski's ``{"p": p}``, else empty)."""
        return self._metric.params

    @property
    def nbytes(self) -> int:
        """Bytes the index holds (device memory on the GPU backend), the caller's own points not
        counted: on the GPU its Morton-ordered copy of the points is counted; on the CPU the
        float64 coordinates only when they are a copy the index made (e.g. of float32 points)."""
        return self._state.nbytes

    @property
    def build_ms(self) -> float:
        """Milliseconds the build took (on the GPU, device time; reading it waits for the build)."""
        return self._state.build_ms()

    def __repr__(self) -> str:
        return (
            f"PointIndex(n={self._n}, dimensions={self._dimensions}, backend={self._backend!r}, "
            f"metric={self.metric!r}, on_device={self._on_device}, nbytes={self.nbytes})"
        )


def validated(
    points: Any, backend: Backend, metric: Metric = EUCLIDEAN
) -> tuple[Any, Literal["gpu", "cpu"], bool]:
    """(the validated coordinates, or a precomputed matrix; the backend chosen; whether the points
    were CuPy's). A callable metric's matrix is computed here, on the host."""
    chosen = resolve_backend(backend)
    on_device = chosen == "gpu"
    if metric.precomputed and metric.func is None:
        from .precomputed import validate_matrix

        return validate_matrix(points, on_device=on_device), chosen, is_cupy(points)
    # on the GPU backend CuPy points stay on the device (validated there)
    coords = validate_points(points, on_device=on_device)
    if metric.func is not None:
        matrix = pairwise_callable(metric.func, np.asarray(coords.get() if is_cupy(coords) else coords))
        from .precomputed import validate_matrix

        coords = validate_matrix(matrix, on_device=False)
    return coords, chosen, is_cupy(points)


def build_index(
    points: Any,
    coords: Any,
    backend: Literal["gpu", "cpu"],
    from_cupy: bool,
    search: Search = "auto",
    *,
    metric: Metric = EUCLIDEAN,
    **engine: Any,
) -> PointIndex:
    """The index of validated ``coords`` (``points``: what the caller passed, to know what is a copy)
    under ``metric`` (``coords``: :func:`validated`'s, of that metric). ``search``: the spatial index
    or brute force (``"auto"``: by :data:`SPATIAL_MAX_DIMENSIONS`; a caller may force either);
    ``engine``: the brute-force searches' options (the filter's precision, tile sizes:
    ``brute_cpu.HostEngine``, ``brute_exact.ExactEngine``)."""
    if metric.precomputed:
        from .precomputed import PrecomputedIndex

        owns = metric.func is not None or _copied(coords, points)
        state: _IndexState = PrecomputedIndex(coords, backend, owns=owns)
        n = int(coords.shape[0])
        return PointIndex(state, n=n, dimensions=n, backend=backend, on_device=backend == "gpu" and from_cupy,
                          metric=metric)  # fmt: skip
    n, given_d = (int(v) for v in coords.shape)
    if metric.transforms:  # searched as unit vectors: a copy the index owns
        coords = metric.prepare(coords)
        points = None
    else:
        metric.prepare(coords)  # the metric's own checks
    d = int(coords.shape[1])
    brute = search == "brute" or (search == "auto" and d > SPATIAL_MAX_DIMENSIONS[backend])
    if backend == "gpu" and not brute and d > GPU_SPATIAL_LIMIT:
        raise PointSetShapeError(
            f"the GPU's spatial index holds at most {GPU_SPATIAL_LIMIT} coordinates per point; got d={d}.",
            field="points",
        )
    owns = backend == "cpu" and not np.may_share_memory(coords, _host_view(points))
    assert metric.space is not None
    if metric.space.kind != "l2":
        state = _minkowski_state(coords, metric, backend, brute, owns, engine)
    elif backend == "gpu" and brute:
        from .brute_gpu import BruteGpuIndex

        state = BruteGpuIndex(coords, **engine)
    elif backend == "gpu":
        from .gpu import GpuIndex

        state = GpuIndex(coords)
    elif brute:
        from .brute_cpu import BruteCpuIndex

        state = BruteCpuIndex(coords, owns_coords=owns, **engine)
    else:
        from .cpu import CpuIndex

        state = CpuIndex(coords, owns_coords=owns)
    on_device = backend == "gpu" and from_cupy
    return PointIndex(state, n=n, dimensions=given_d, backend=backend, on_device=on_device, metric=metric)


def _minkowski_state(
    coords: Any, metric: Metric, backend: str, brute: bool, owns: bool, engine: dict[str, Any]
) -> _IndexState:
    """The index of manhattan, chebyshev or minkowski keys: the k-d tree or the device's hierarchy
    (its minkowski build) in low dimension, exact brute force above."""
    assert metric.space is not None
    if brute:
        from .brute_exact import ExactIndex

        data = coords
        if backend == "gpu" and not is_cupy(coords):
            import cupy

            data = cupy.asarray(coords)
        return ExactIndex(data, metric.space, owns_coords=owns, **engine)
    if backend == "gpu":
        from .gpu import GpuIndex

        return GpuIndex(coords, metric.space)
    from .cpu import CpuIndex

    return CpuIndex(coords, owns_coords=owns, space=metric.space)


def _copied(array: Any, points: Any) -> bool:
    """Whether a validated ``array`` (dense, CuPy or sparse) is a copy of the caller's ``points``."""
    if array is points:
        return False
    if is_cupy(array):
        return not (is_cupy(points) and array.data.ptr == points.data.ptr)
    if not isinstance(array, np.ndarray):  # a sparse matrix: validation copies it
        return True
    return not np.may_share_memory(array, _host_view(points))


def _host_view(points: Any) -> Any:
    """The caller's points as a NumPy array when they are one (else something sharing nothing)."""
    return points if isinstance(points, np.ndarray) else np.empty(0)


def build_point_index(
    points: Any,
    *,
    metric: Any = "euclidean",
    metric_params: Any = None,
    backend: Backend = "auto",
    devices: Sequence[int] | None = None,
) -> PointIndex:
    """The spatial index of ``points`` (an ``(n, d)`` NumPy or CuPy array, or with
    ``metric="precomputed"`` an ``n x n`` distance matrix, dense or sparse) under ``metric``
    (:func:`metric_mst` lists them), validated once.

    Every tree then computed on it, with any ``min_samples``, skips the validation, the copy to
    the device and the index build: ``metric_mst(index, min_samples=k)`` returns the same arrays
    as ``metric_mst(points, metric=..., min_samples=k)``. ``devices``: GPU ids whose devices share
    the brute-force searches of points of more than ``SPATIAL_MAX_DIMENSIONS["gpu"]`` coordinates
    (the all-pairs passes split by rows; the same answer, bit for bit): distinct ids, the current
    device first (the index lives there).
    """
    from .metrics import resolve_metric

    resolved = resolve_metric(metric, metric_params)
    coords, chosen, from_cupy = validated(points, backend, resolved)
    if not devices:
        return build_index(points, coords, chosen, from_cupy, metric=resolved)
    ids = [int(i) for i in devices]
    wide = not resolved.precomputed and int(coords.shape[1]) > SPATIAL_MAX_DIMENSIONS["gpu"]
    if chosen != "gpu" or (len(ids) > 1 and not wide):
        raise PointSetShapeError(
            "devices= shares the GPU's brute-force searches, which points of more than "
            f"{SPATIAL_MAX_DIMENSIONS['gpu']} coordinates take on the GPU backend; got "
            f"{coords.shape[1]} coordinates on the {chosen} backend.",
            field="devices",
        )
    import cupy

    if ids[0] != cupy.cuda.Device().id or len(set(ids)) != len(ids):
        raise PointSetShapeError(
            f"devices= must list distinct GPUs, the current one ({cupy.cuda.Device().id}) first; got {ids}.",
            field="devices",
        )
    if not wide:
        return build_index(points, coords, chosen, from_cupy, metric=resolved)
    return build_index(points, coords, chosen, from_cupy, metric=resolved, devices=ids)


def check_index_backend(index: PointIndex, backend: Backend) -> None:
    """Refuse a backend the index was not built for (``"auto"`` means the index's own)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}.")
    if backend not in ("auto", index.backend):
        raise PointIndexBackendError(
            f"the index was built on the {index.backend} backend, so backend={backend!r} cannot use it; "
            f"pass backend='auto' or build the index with backend={backend!r}.",
            field="backend",
        )


def tree_on_index(
    index: PointIndex,
    min_samples: int,
    started: float,
    *,
    fresh: bool,
    on_device: bool | None = None,
    alpha: float = 1.0,
) -> EuclideanTree:
    """The tree of a checked ``min_samples`` on ``index``; ``fresh``: the index was built by this
    computation (its build time then counts in ``compute_ms`` and ``timings_ms["index_ms"]``).
    ``on_device``: leave the tree on the device (None: where the index's points were; True for
    the GPU backend's own further work on it, dendrograms and labels). ``alpha``: edges weigh
    ``max(core_i, core_j, d(i, j) / alpha)`` (robust single linkage's scale; 1: HDBSCAN*'s)."""
    keep = index.on_device if on_device is None else on_device
    metric = index._metric
    if metric.distance_map == 0 and alpha == 1.0:  # Euclidean: the backends' own square roots
        return index._state.tree(min_samples, started, fresh, keep)
    scale = metric.core_key_scale(alpha)
    tree = index._state.tree(min_samples, started, fresh, keep, keys=True, core_scale=scale)
    t0 = time.perf_counter()
    weights = metric.distances(tree.weights, alpha)
    core = None if tree.core_distances is None else metric.distances(tree.core_distances)
    timings = dict(tree.timings_ms)
    timings["host_ms"] = timings.get("host_ms", 0.0) + (time.perf_counter() - t0) * 1e3
    host = weights.get() if is_cupy(weights) else weights
    return dataclasses.replace(
        tree, weights=weights, core_distances=core, total_weight=float(np.sum(host)), metric=metric.name,
        timings_ms=timings, compute_ms=tree.compute_ms + (time.perf_counter() - t0) * 1e3,
    )  # fmt: skip


def check_alpha(alpha: Any) -> float:
    """``alpha`` as a positive finite float, or a :class:`MetricError`."""
    if isinstance(alpha, bool) or not isinstance(alpha, int | float | np.integer | np.floating):
        raise MetricError(f"alpha must be a positive number; got {alpha!r}.", field="alpha")
    value = float(alpha)
    if not np.isfinite(value) or value <= 0.0:
        raise MetricError(f"alpha must be a positive finite number; got {alpha!r}.", field="alpha")
    return value
