"""Point sets: the exact Euclidean minimum spanning tree and HDBSCAN*'s mutual-reachability tree.

Semantics shared by both backends (bit for bit):

* distances are compared as float64 squared distances ``Σ (a_k - b_k)²`` accumulated in
  dimension order without fused multiply-add (coordinates are converted to float64 first);
* with ``min_samples = k > 1`` the squared core distance of a point is the k-th smallest
  squared distance to all points, the point itself counted (scikit-learn's convention),
  and an edge weighs ``max(core_i², core_j², d²(i, j))`` squared;
* edges are ordered by ``(squared weight, min(i, j), max(i, j))``: under that strict total
  order the tree is unique, and the output lists it in that order;
* the output weights are the square roots of the float64 squared weights.

The spatial index (GPU: the Morton-ordered points and the boxes of their hierarchy; CPU: SciPy's
k-d tree) does not depend on ``min_samples``: :func:`build_point_index` builds it once and every
tree computed on it reuses it. Validation happens once, where the points enter the engine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from ._backend.arrays import is_cupy, to_host
from ._backend.resolve import BACKENDS, Backend, resolve_backend
from .errors import (
    ClusteringParameterError,
    NonFiniteCoordinateError,
    PointDtypeError,
    PointIndexBackendError,
    PointSetShapeError,
)

#: the largest number of coordinates per point the engine accepts
MAX_DIMENSIONS = 32


@dataclass(frozen=True, eq=False)
class EuclideanTree:
    """A Euclidean (or mutual-reachability) minimum spanning tree of ``n`` points.

    ``src[i] < dst[i]`` are point indices and ``weights[i]`` the edge's weight (float64),
    in the order ``(weight², src, dst)``. ``core_distances`` is set when ``min_samples > 1``.
    The arrays are NumPy arrays, or CuPy arrays when the GPU backend was given CuPy points
    (the tree then stays on the device, like the points).
    ``timings_ms`` splits ``compute_ms`` into its parts (index build, core distances,
    Borůvka rounds, host work).
    """

    src: np.ndarray[Any, np.dtype[np.int64]]
    dst: np.ndarray[Any, np.dtype[np.int64]]
    weights: np.ndarray[Any, np.dtype[np.float64]]
    total_weight: float
    n: int
    dimensions: int
    min_samples: int
    backend: str
    compute_ms: float
    core_distances: np.ndarray[Any, np.dtype[np.float64]] | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])


def validate_points(points: Any, *, on_device: bool = False) -> Any:
    """The points as a C-contiguous ``(n, d)`` float64 array, or a typed error.

    A NumPy array (CuPy input is copied to the host), or with ``on_device`` and CuPy input a
    CuPy array that never leaves the device (the checks run there, one synchronisation).
    """
    xp: Any = np
    if is_cupy(points) and on_device:
        import cupy

        xp, array = cupy, points
    else:
        try:
            array = np.asarray(to_host(points))
        except (TypeError, ValueError) as exc:
            raise PointDtypeError(f"'points' cannot be read as an array: {exc}", field="points") from None
    if array.dtype.kind not in "fiu":
        raise PointDtypeError(
            f"'points' has dtype {array.dtype}; coordinates must be float32, float64 or integers.",
            field="points",
        )
    if array.ndim != 2:
        raise PointSetShapeError(
            f"'points' must be a two-dimensional (n, d) array; got {array.ndim} dimension(s) "
            f"with shape {array.shape}.",
            field="points",
        )
    n, d = array.shape
    if n < 1:
        raise PointSetShapeError("'points' holds no point; pass at least one.", field="points")
    if not 1 <= d <= MAX_DIMENSIONS:
        raise PointSetShapeError(
            f"points must have between 1 and {MAX_DIMENSIONS} coordinates; got d={d}.", field="points"
        )
    coords = xp.ascontiguousarray(array, dtype=xp.float64)
    finite = xp.isfinite(coords).all(axis=1)
    if not bool(finite.all()):
        row = int(xp.flatnonzero(~finite)[0])
        raise NonFiniteCoordinateError(
            f"point {row} has a NaN or infinite coordinate ({coords[row].tolist()}); "
            "all coordinates must be finite.",
            field="points",
            index=row,
        )
    return coords


def check_min_samples(min_samples: Any, n: int) -> int:
    if isinstance(min_samples, bool) or not isinstance(min_samples, int | np.integer):
        raise ClusteringParameterError(
            f"min_samples must be an integer; got {min_samples!r}.", field="min_samples"
        )
    k = int(min_samples)
    if not 1 <= k <= n:
        raise ClusteringParameterError(
            f"min_samples must lie between 1 and the number of points ({n}); got {k}.",
            field="min_samples",
        )
    return k


def squared_distances(coords_t: np.ndarray[Any, Any], i: Any, j: Any) -> np.ndarray[Any, Any]:
    """Exact ``Σ (a_k - b_k)²`` in dimension order, one rounding per operation (no FMA).

    ``coords_t`` is the ``(d, n)`` float64 transpose; ``i`` and ``j`` broadcast together.
    """
    acc: np.ndarray[Any, Any] = np.zeros(np.broadcast_shapes(np.shape(i), np.shape(j)), dtype=np.float64)
    for column in coords_t:
        diff = column[i] - column[j]
        acc = acc + diff * diff
    return acc


def finish_tree(
    lo: np.ndarray[Any, Any],
    hi: np.ndarray[Any, Any],
    w2: np.ndarray[Any, Any],
    *,
    n: int,
    d: int,
    min_samples: int,
    core2: np.ndarray[Any, Any] | None,
    backend: str,
    started: float,
    timings_ms: dict[str, float],
    presorted: bool = False,
) -> EuclideanTree:
    """Sort the edges into the canonical order (unless ``presorted``) and take square roots."""
    t0 = time.perf_counter()
    order = np.arange(lo.shape[0]) if presorted else np.lexsort((hi, lo, w2))
    src = np.ascontiguousarray(lo[order], dtype=np.int64)
    dst = np.ascontiguousarray(hi[order], dtype=np.int64)
    weights = np.sqrt(np.asarray(w2[order], dtype=np.float64))
    core = None if core2 is None else np.sqrt(core2)
    timings_ms["host_ms"] = timings_ms.get("host_ms", 0.0) + (time.perf_counter() - t0) * 1e3
    return EuclideanTree(
        src=src,
        dst=dst,
        weights=weights,
        total_weight=float(weights.sum()),
        n=n,
        dimensions=d,
        min_samples=min_samples,
        backend=backend,
        compute_ms=(time.perf_counter() - started) * 1e3,
        core_distances=core,
        timings_ms=timings_ms,
    )


class _IndexState(Protocol):
    """What a backend's index provides (``_points_cpu.CpuIndex``, ``_points_gpu.GpuIndex``)."""

    @property
    def nbytes(self) -> int: ...

    def build_ms(self) -> float: ...

    def tree(self, min_samples: int, started: float, fresh: bool, on_device: bool) -> EuclideanTree: ...


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
    array instead of copying it: leave it unchanged while the index is in use.
    """

    __slots__ = ("_backend", "_dimensions", "_n", "_on_device", "_state")

    def __init__(
        self, state: _IndexState, *, n: int, dimensions: int, backend: Literal["gpu", "cpu"], on_device: bool
    ) -> None:
        self._state = state
        self._n = n
        self._dimensions = dimensions
        self._backend = backend
        self._on_device = on_device

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
            f"on_device={self._on_device}, nbytes={self.nbytes})"
        )


def _validated(points: Any, backend: Backend) -> tuple[Any, Literal["gpu", "cpu"], bool]:
    """(the validated coordinates, the backend chosen, whether the points were CuPy's)."""
    chosen = resolve_backend(backend)
    # on the GPU backend CuPy points stay on the device (validated there)
    return validate_points(points, on_device=chosen == "gpu"), chosen, is_cupy(points)


def _build_index(points: Any, coords: Any, backend: Literal["gpu", "cpu"], from_cupy: bool) -> PointIndex:
    """The index of validated ``coords`` (``points``: what the caller passed, to know what is a copy)."""
    state: _IndexState
    if backend == "gpu":
        from ._points_gpu import GpuIndex

        state = GpuIndex(coords)
    else:
        from ._points_cpu import CpuIndex

        state = CpuIndex(coords, owns_coords=not np.may_share_memory(coords, _host_view(points)))
    n, d = coords.shape
    on_device = backend == "gpu" and from_cupy
    return PointIndex(state, n=int(n), dimensions=int(d), backend=backend, on_device=on_device)


def _host_view(points: Any) -> Any:
    """The caller's points as a NumPy array when they are one (else something sharing nothing)."""
    return points if isinstance(points, np.ndarray) else np.empty(0)


def build_point_index(points: Any, *, backend: Backend = "auto") -> PointIndex:
    """The spatial index of ``points`` (an ``(n, d)`` NumPy or CuPy array), validated once.

    Every tree then computed on it, with any ``min_samples``, skips the validation, the copy to
    the device and the index build: ``euclidean_mst(index, min_samples=k)`` returns the same
    arrays as ``euclidean_mst(points, min_samples=k)``.
    """
    coords, chosen, from_cupy = _validated(points, backend)
    return _build_index(points, coords, chosen, from_cupy)


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
    index: PointIndex, min_samples: int, started: float, *, fresh: bool, on_device: bool | None = None
) -> EuclideanTree:
    """The tree of a checked ``min_samples`` on ``index``; ``fresh``: the index was built by this
    computation (its build time then counts in ``compute_ms`` and ``timings_ms["index_ms"]``).
    ``on_device``: leave the tree on the device (None: where the index's points were; True for
    the GPU backend's own further work on it, dendrograms and labels)."""
    keep = index.on_device if on_device is None else on_device
    return index._state.tree(min_samples, started, fresh, keep)


def euclidean_mst(points: Any, *, min_samples: int = 1, backend: Backend = "auto") -> EuclideanTree:
    """Exact Euclidean minimum spanning tree of ``points`` (an ``(n, d)`` NumPy or CuPy array,
    or a :class:`PointIndex` built by :func:`build_point_index`).

    With ``min_samples = k > 1`` the tree of HDBSCAN*'s mutual-reachability distances
    ``max(core_i, core_j, d(i, j))``, where a core distance is the distance to the k-th
    nearest point, the point itself counted. Ties are broken by ``(weight², min(i, j),
    max(i, j))``, so the tree is unique and both backends return the same arrays. CuPy
    points on the GPU backend give a tree of CuPy arrays (nothing is copied to the host).
    A :class:`PointIndex` is computed on by its own backend (``backend`` must be ``"auto"``
    or that one); its ``timings_ms["index_ms"]`` is then 0.
    """
    started = time.perf_counter()
    if isinstance(points, PointIndex):
        check_index_backend(points, backend)
        return tree_on_index(points, check_min_samples(min_samples, points.n), started, fresh=False)
    coords, chosen, from_cupy = _validated(points, backend)
    k = check_min_samples(min_samples, int(coords.shape[0]))
    return tree_on_index(_build_index(points, coords, chosen, from_cupy), k, started, fresh=True)


def single_linkage(
    points_or_tree: Any, *, backend: Backend = "auto"
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Single-linkage dendrogram as a SciPy linkage matrix (``(n - 1) x 4``, float64).

    Takes points or a :class:`PointIndex` (then their Euclidean MST is computed on ``backend``)
    or an :class:`EuclideanTree` (a mutual-reachability tree gives HDBSCAN*'s hierarchy).
    Cluster ``n + i`` is formed by the i-th merge; merges follow the tree's order. On the GPU
    backend the merges are computed on the device, where the tree is: a tree of CuPy arrays, CuPy
    points or an index of them give a CuPy matrix (nothing is copied to the host); NumPy points
    (or their index) get the matrix copied back. A tree on the host is merged on the host. Both
    give the same matrix, bit for bit.
    """
    from ._dendrogram.cpu import linkage_from_sorted_edges

    started = time.perf_counter()
    if isinstance(points_or_tree, EuclideanTree):
        tree, keep_on_device = points_or_tree, True
    else:
        if isinstance(points_or_tree, PointIndex):
            check_index_backend(points_or_tree, backend)
            index, fresh = points_or_tree, False
        else:
            coords, chosen, from_cupy = _validated(points_or_tree, backend)
            index, fresh = _build_index(points_or_tree, coords, chosen, from_cupy), True
        # on the GPU backend the tree stays on the device for the merges
        tree = tree_on_index(
            index, check_min_samples(1, index.n), started, fresh=fresh, on_device=index.backend == "gpu"
        )
        keep_on_device = index.on_device
    if is_cupy(tree.src):
        from ._dendrogram.gpu import linkage_on_device

        linkage = linkage_on_device(tree.n, tree.src, tree.dst, tree.weights)
        return linkage if keep_on_device else linkage.get()  # type: ignore[no-any-return]
    return linkage_from_sorted_edges(tree.n, tree.src, tree.dst, tree.weights)
