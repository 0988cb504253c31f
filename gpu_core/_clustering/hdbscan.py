"""HDBSCAN* flat clustering from the mutual-reachability tree, with scikit-learn's semantics.

The tree comes from :func:`euclidean_mst` on either backend. On the GPU backend the tree stays on
the device and so do its dendrogram (``_dendrogram.gpu``), condensed tree, stabilities, selection
(``eom_paths``; with ``cluster_selection_epsilon``, the selection over the (few) condensed
clusters runs on the host) and labels (``dendrogram_labels``). On the CPU backend the condensed tree,
the cluster stabilities and the selection (excess of mass or leaves, optionally merged below
``cluster_selection_epsilon``) run on the host: compiled by Numba where it is installed
(``compiled``: two sequential passes, no linkage matrix), else in NumPy (the linkage
matrix, then ``dendrogram_labels.labels_from_dendrogram``: the condensed tree, stabilities and labels
of ``condense``, vectorized with pointer jumping, the same code that runs on the device with
CuPy; only the selection, which visits the (few) condensed clusters, is a Python loop). All give
the same bits; the NumPy path is the reference. Stabilities are float sums: their order is
``condense``'s (chunks of points).

Follows ``sklearn.cluster.HDBSCAN`` (``_tree.pyx``): clusters are numbered differently
(the partition and the probabilities are the same).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._backend.arrays import is_cupy, to_host
from .._backend.resolve import Backend
from .._dendrogram.cpu import check_tree, linkage_from_sorted_edges, not_a_tree
from .._points.emst import _check_index_metric
from .._points.index import (
    PointIndex,
    build_index,
    check_alpha,
    check_index_backend,
    tree_on_index,
    validated,
)
from .._points.metrics import resolve_metric
from .._points.validate import check_min_samples
from .dendrogram_labels import labels_from_dendrogram
from .model import check_method, check_min_cluster_size, finite_epsilon
from .passes import COMPILED_FROM, compiled_passes, passes_for, plain

Array = np.ndarray[Any, Any]


@dataclass(frozen=True, eq=False)
class HDBSCANResult:
    """Cluster labels (``-1``: noise) and membership probabilities, per point."""

    labels: np.ndarray[Any, np.dtype[np.int64]]
    probabilities: np.ndarray[Any, np.dtype[np.float64]]
    num_clusters: int
    backend: str
    compute_ms: float
    timings_ms: dict[str, float]


def _columns(linkage: Array) -> tuple[Array, Array, Array, Array]:
    """A linkage matrix's left and right child ids, sizes and distances."""
    return linkage[:, 0], linkage[:, 1], linkage[:, 3], linkage[:, 2]


def labels_from_tree(
    linkage: Array,
    min_cluster_size: int,
    method: str = "eom",
    epsilon: float = 0.0,
    *,
    compiled: bool | None = None,
) -> tuple[Array, Array]:
    """Labels and probabilities of HDBSCAN*'s flat clustering of a single-linkage hierarchy.

    A CuPy ``linkage`` (the device dendrogram) is labelled on the device: CuPy arrays back.
    ``compiled`` as for :func:`labels_from_edges` (None: compiled for more than
    :data:`COMPILED_FROM` points where Numba is installed).
    """
    n = linkage.shape[0] + 1
    if is_cupy(linkage) and n >= 2:  # a dendrogram on the device: labelled there, CuPy arrays back
        z = linkage
        return labels_from_dendrogram(
            z[:, 0], z[:, 1], z[:, 3], z[:, 2], min_cluster_size, method, epsilon, compiled=compiled
        )
    passes = passes_for(compiled, n)
    if n < 2:  # one point: noise
        return np.full(n, -1, dtype=np.int64), np.zeros(n)
    if passes is None:
        return _labels_from_tree_numpy(linkage, min_cluster_size, method, epsilon)
    linkage = plain(linkage, np.float64)
    outputs = _PrefaultedOutputs(n)
    with _reused_work_arrays(n) as (_, aux, p_lam):
        segments = passes.condense_linkage(linkage, min_cluster_size, aux, p_lam)
        return _select_and_label(passes, segments, aux, p_lam, method, epsilon, outputs.result())


def _work_arrays(n: int, wide: bool | None = None) -> tuple[Array, Array, Array]:
    """The compiled passes' per-point arrays: parents, and the points' records as ints (4 per
    point: link, segment, two unused) and as float64 (the lambda, after the ints' first 8 bytes):
    two views of one buffer, so a record is one cache line. Allocated by NumPy, which asks the
    kernel for huge pages for large arrays (fewer TLB misses and page faults)."""
    if wide is None:
        wide = n >= 2**31 - 1
    ids, slots = (np.int64, 4) if wide else (np.int32, 2)
    records = np.empty(slots * n)
    return np.empty(n, dtype=ids), records.view(ids), records


_kept_lock = threading.Lock()
_kept: list[tuple[Array, Array]] = []  # the last call's parents and records (float64), for reuse


@contextlib.contextmanager
def _reused_work_arrays(n: int) -> Iterator[tuple[Array, Array, Array]]:
    """:func:`_work_arrays`, reusing the last call's buffers where they are large enough: a new
    20 bytes per point costs page faults, a large part of a big call's time. Holds them after
    the call (the largest so far); a second thread meanwhile gets its own."""
    if not _kept_lock.acquire(blocking=False):
        yield _work_arrays(n)
        return
    try:
        wide = n >= 2**31 - 1
        fits = bool(_kept) and _kept[0][0].shape[0] >= n and (_kept[0][0].dtype == np.int64) == wide
        if not fits:
            _kept.clear()  # free the old ones first
            parent, _, records = _work_arrays(n)
            _kept.append((parent, records))
        parent, records = _kept[0]
        slots = records.shape[0] // parent.shape[0]
        head = records[: slots * n]
        yield parent[:n], head.view(parent.dtype), head
    finally:
        _kept_lock.release()


def _point_fields(aux: Array, p_lam: Array) -> tuple[Array, Array]:
    """Each point's segment and lambda, from the records of :func:`_work_arrays`."""
    slots = p_lam.shape[0] * 4 // aux.shape[0]
    return aux[1::4], p_lam[slots // 2 :: slots]


def _select_and_label(
    passes: Any,
    segments: tuple[Any, ...],
    aux: Array,
    p_lam: Array,
    method: str,
    epsilon: float,
    outputs: tuple[Array, Array] | None = None,
) -> tuple[Array, Array]:
    n = aux.shape[0] // 4
    labels, probabilities = outputs or (np.empty(n, dtype=np.int64), np.empty(n))
    passes.select_and_label(*segments, aux, p_lam, method == "leaf", float(epsilon), labels, probabilities)
    return labels, probabilities


class _PrefaultedOutputs(threading.Thread):
    """The labels and probabilities arrays, allocated and written once by a helper thread while
    the (GIL-free) first pass runs: their page faults (16 bytes a point) then cost no pass
    time."""

    def __init__(self, n: int) -> None:
        super().__init__(name="hdbscan-outputs", daemon=True)
        self.n = n
        self.arrays: tuple[Array, Array] | None = None
        if n >= 100_000:  # smaller: not worth a thread
            self.start()
        else:
            self.run()

    def run(self) -> None:
        labels, probabilities = np.empty(self.n, dtype=np.int64), np.empty(self.n)
        labels.fill(-1)
        probabilities.fill(0.0)
        self.arrays = labels, probabilities

    def join(self, timeout: float | None = None) -> None:
        if self.ident is not None:  # started
            super().join(timeout)

    def result(self) -> tuple[Array, Array] | None:
        self.join()
        return self.arrays


def _labels_from_tree_numpy(
    linkage: Array, min_cluster_size: int, method: str, epsilon: float
) -> tuple[Array, Array]:
    left, right, sizes, distances = _columns(linkage)
    return labels_from_dendrogram(
        left, right, sizes, distances, min_cluster_size, method, epsilon, compiled=False
    )


def warm_up_compiled() -> bool:
    """Compile (or load from Numba's on-disk cache) every compiled host pass a request can run:
    HDBSCAN*'s passes from edges and from a linkage matrix (excess of mass, leaves, epsilon), the
    selection alone (the device path's, ``dendrogram_labels``) and the dendrogram's union-find. Called
    by :func:`gpu_core.warm_up`; False where Numba is absent."""
    if compiled_passes() is None:
        return False
    rng = np.random.default_rng(0)
    n = COMPILED_FROM + 1  # the union-find of linkage_from_sorted_edges compiles above that
    u = rng.permutation(n)
    v = u[rng.integers(0, np.arange(1, n))]  # vertex u[i + 1] under an earlier one: a tree
    w = np.sort(rng.integers(0, 50, n - 1).astype(np.float64))  # ties and zeros
    linkage = linkage_from_sorted_edges(n, u[1:], v, w)
    for method, epsilon in (("eom", 0.0), ("leaf", 0.0), ("eom", 10.0), ("leaf", 10.0)):
        labels_from_edges(n, u[1:], v, w, 3, method, epsilon, compiled=True)
        labels_from_tree(linkage, 3, method, epsilon, compiled=True)
        left, right, sizes, distances = _columns(linkage)
        labels_from_dendrogram(left, right, sizes, distances, 3, method, epsilon, compiled=True)
    return True


def labels_from_edges(
    n: int,
    u: Any,
    v: Any,
    w: Any,
    min_cluster_size: int,
    method: str = "eom",
    epsilon: float = 0.0,
    *,
    compiled: bool | None = None,
    timings: dict[str, float] | None = None,
) -> tuple[Array, Array]:
    """Labels and probabilities of HDBSCAN*'s flat clustering of a spanning tree in merge order.

    ``compiled``: None picks the compiled passes for trees of more than :data:`COMPILED_FROM`
    points where Numba is installed; True insists on them (an error without Numba); False takes
    the NumPy path (linkage matrix, then :func:`labels_from_tree`). Both give the same bits.
    ``timings`` gets ``linkage_ms`` (the dendrogram: the union-find, with the condensed tree on
    the compiled path) and ``selection_ms`` (the rest). Raises like
    :func:`linkage_from_sorted_edges` unless the edges form one tree.
    """
    t0 = time.perf_counter()
    passes = passes_for(compiled, n)
    if n < 2:  # one point (or none): noise, after the checks of the (empty) tree
        linkage_from_sorted_edges(n, u, v, w)
        t1 = time.perf_counter()
        labels, probabilities = np.full(max(n, 0), -1, dtype=np.int64), np.zeros(max(n, 0))
    elif passes is None:
        linkage = linkage_from_sorted_edges(n, u, v, w)
        t1 = time.perf_counter()
        labels, probabilities = _labels_from_tree_numpy(linkage, min_cluster_size, method, epsilon)
    else:
        u, v, w = plain(u, np.int64), plain(v, np.int64), plain(w, np.float64)
        check_tree(n, u, v, w)
        outputs = _PrefaultedOutputs(n)
        with _reused_work_arrays(n) as (parent, aux, p_lam):
            bad, *segments = passes.condense_edges(n, u, v, w, min_cluster_size, parent, aux, p_lam)
            if bad >= 0:  # an edge closed a cycle: n - 1 edges cannot span
                outputs.join()
                raise not_a_tree(n, u, v)
            t1 = time.perf_counter()
            labels, probabilities = _select_and_label(
                passes, tuple(segments), aux, p_lam, method, epsilon, outputs.result()
            )
    if timings is not None:
        timings["linkage_ms"] = (t1 - t0) * 1e3
        timings["selection_ms"] = (time.perf_counter() - t1) * 1e3
    return labels, probabilities


def _labels_on_device(
    tree: Any, min_cluster_size: int, method: str, epsilon: float, timings: dict[str, float]
) -> tuple[Array, Array, int]:
    """Labels and probabilities (NumPy) of a tree on the device, and the number of clusters: its
    dendrogram, condensed tree, stabilities, selection and labels are computed there (with an
    epsilon, the selection over the clusters on the host)."""
    from .._backend.staging import to_pinned
    from .._dendrogram.gpu import linkage_on_device

    t0 = time.perf_counter()
    z = linkage_on_device(tree.n, tree.src, tree.dst, tree.weights)
    t1 = time.perf_counter()
    labels, probabilities = labels_from_dendrogram(
        z[:, 0], z[:, 1], z[:, 3], z[:, 2], min_cluster_size, method, epsilon
    )
    del z
    count = int(labels.max()) + 1  # here, not over the host's copy (a 10^7 scan there takes ms)
    t2 = time.perf_counter()
    host = to_pinned(labels), to_pinned(probabilities)
    timings["linkage_ms"] = (t1 - t0) * 1e3
    timings["selection_ms"] = (t2 - t1) * 1e3
    timings["to_host_ms"] = (time.perf_counter() - t2) * 1e3
    return (*host, count)


def _labels_of_tree(
    tree: Any, n: int, min_cluster_size: int, method: str, epsilon: float, timings: dict[str, float]
) -> tuple[Array, Array, int]:
    """Labels, probabilities (NumPy) and the number of clusters of the mutual-reachability tree of
    ``n`` points, computed where the tree is."""
    if n == 1:
        return np.full(1, -1, dtype=np.int64), np.zeros(1), 0
    if is_cupy(tree.src):
        return _labels_on_device(tree, min_cluster_size, method, epsilon, timings)
    src, dst, weights = (to_host(a) for a in (tree.src, tree.dst, tree.weights))
    labels, probabilities = labels_from_edges(
        n, src, dst, weights, min_cluster_size, method, epsilon, timings=timings
    )
    return labels, probabilities, int(labels.max()) + 1


def hdbscan(
    points: Any,
    *,
    min_cluster_size: int = 5,
    min_samples: int | None = None,
    metric: Any = "euclidean",
    metric_params: dict[str, Any] | None = None,
    alpha: float = 1.0,
    cluster_selection_method: Literal["eom", "leaf"] = "eom",
    cluster_selection_epsilon: float = 0.0,
    backend: Backend = "auto",
) -> HDBSCANResult:
    """HDBSCAN* clustering of ``points`` with ``sklearn.cluster.HDBSCAN``'s semantics.

    ``points``: an ``(n, d)`` NumPy or CuPy array (an ``n x n`` distance matrix, dense or sparse,
    for ``metric="precomputed"``), or a :class:`PointIndex` (then any ``min_samples`` reuses it, on
    its own backend and metric). ``min_samples=None`` means ``min_cluster_size``. ``metric`` and
    ``metric_params``: scikit-learn's names (:func:`gpu_core.metric_mst` lists them); ``alpha``:
    edges weigh ``max(core_i, core_j, d(i, j) / alpha)`` (scikit-learn's tree-based algorithms and
    the hdbscan library). The mutual-reachability tree is computed on ``backend``; on the GPU
    backend its dendrogram, condensed tree, selection and labels too (with an epsilon, the
    selection over the clusters on the host). The labels and probabilities are NumPy arrays
    either way, the same bits.
    """
    started = time.perf_counter()
    index: PointIndex | None = None
    alpha = check_alpha(alpha)
    if isinstance(points, PointIndex):
        _check_index_metric(points, metric, metric_params)
        check_index_backend(points, backend)
        index, n = points, points.n
    else:  # validated here only (the tree's computation takes the index built from them)
        resolved = resolve_metric(metric, metric_params)
        coords, chosen, from_cupy = validated(points, backend, resolved)
        n = int(coords.shape[0])
    check_min_cluster_size(min_cluster_size)
    k = check_min_samples(min_cluster_size if min_samples is None else min_samples, n)
    check_method(cluster_selection_method)
    eps = finite_epsilon(cluster_selection_epsilon)
    fresh = index is None
    if index is None:
        index = build_index(points, coords, chosen, from_cupy, metric=resolved)
    # on the GPU backend the tree stays on the device: the dendrogram and the labels are made there
    tree = tree_on_index(index, k, started, fresh=fresh, on_device=index.backend == "gpu", alpha=alpha)
    t0 = time.perf_counter()
    timings = dict(tree.timings_ms)
    labels, probabilities, count = _labels_of_tree(
        tree, n, int(min_cluster_size), cluster_selection_method, eps, timings
    )
    return HDBSCANResult(
        labels=labels,
        probabilities=probabilities,
        num_clusters=count,
        backend=tree.backend,
        compute_ms=tree.compute_ms + (time.perf_counter() - t0) * 1e3,
        timings_ms=timings,
    )
