"""Precomputed distances (``metric="precomputed"``): a dense ``n x n`` matrix or a sparse one, as
scikit-learn's HDBSCAN takes them, on either backend.

Validation (:func:`validate_matrix`), with scikit-learn's messages: square, no NaN, no negative
entry, symmetric within ``rtol=1e-7, atol=1e-9`` (scikit-learn's check); a dense matrix may hold
``+inf`` for a missing distance, a sparse one only finite stored entries.

Semantics (both backends, the same bits): the distance of ``i`` and ``j`` is the lighter of the two
entries ``(i, j)`` and ``(j, i)`` (for a sparse matrix: of those stored); the core distance of a
point with ``min_samples = k`` is the k-th smallest entry of its row (dense: the diagonal counted,
as scikit-learn; sparse: of its stored entries, and a row needs at least ``k`` of them); an edge
weighs ``max(core_i, core_j, D(i, j))``, edges ordered by ``(weight, min(i, j), max(i, j))``. A
sparse matrix must connect every point (scikit-learn's rule). Entries are read as ``v + 0.0``:
``-0.0`` is ``0.0``.

Dense: the host runs Prim's algorithm on the rows (any algorithm gives the one tree of a strict
order); the device finds each row's k-th entry by radix select and runs Borůvka rounds over the
rows (``kernels/precomputed.cu``, with ``emst.cu``'s linking). Sparse: the edges of the stored
entries, numbered in ``(min, max)`` order so that the graph engine's ``(weight, edge_id)`` order
is the tie rule, and the engine's minimum spanning forest.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .._backend.arrays import is_cupy, to_host
from ..errors import MetricError
from .tree import EuclideanTree, finish_tree

Array = Any
#: scikit-learn's tolerance for a symmetric matrix (``_allclose_dense_sparse``)
SYMMETRY_RTOL, SYMMETRY_ATOL = 1e-7, 1e-9
BLOCK = 256


def is_sparse(matrix: Any) -> bool:
    """A SciPy or CuPy sparse matrix (told by its module, importing neither)."""
    module = type(matrix).__module__
    return module.startswith("scipy.sparse") or module.startswith("cupyx.scipy.sparse")


def _shape_error(shape: tuple[int, ...]) -> MetricError:
    return MetricError(
        "metric='precomputed': The precomputed distance matrix is expected to be symmetric, however it "
        f"has shape {shape}. Pass the n x n matrix of distances (or another metric for coordinates).",
        field="points",
    )


def _asymmetric_error() -> MetricError:
    return MetricError(
        "metric='precomputed': The precomputed distance matrix is expected to be symmetric, however its "
        f"values appear to be asymmetric (beyond rtol={SYMMETRY_RTOL}, atol={SYMMETRY_ATOL}). Please verify "
        "that the distance matrix was constructed correctly.",
        field="points",
    )


def validate_matrix(matrix: Any, *, on_device: bool) -> Any:
    """A checked float64 matrix: dense (NumPy, or CuPy with ``on_device``) or SciPy CSR."""
    if is_sparse(matrix):
        return _validate_sparse(matrix)
    if is_cupy(matrix) and on_device:
        import cupy

        xp, array = cupy, matrix
    else:
        xp, array = np, np.asarray(to_host(matrix))
    if array.dtype.kind not in "fiub":
        raise MetricError(
            f"metric='precomputed': the matrix has dtype {array.dtype}; distances are numbers.",
            field="points",
        )
    array = xp.ascontiguousarray(array, dtype=xp.float64)
    if array.ndim != 2:
        raise MetricError(
            f"metric='precomputed' takes an n x n matrix; got {array.ndim} dimension(s).", field="points"
        )
    nan = xp.isnan(array)
    if bool(nan.any()):
        row = int(xp.flatnonzero(nan.any(axis=1))[0])
        raise MetricError(
            f"metric='precomputed': np.nan values found in precomputed-dense (the first in row {row}); "
            "a missing distance is +inf.",
            field="points",
            index=row,
        )
    del nan
    if array.shape[0] != array.shape[1] or array.shape[0] < 1:
        raise _shape_error(tuple(int(v) for v in array.shape))
    negative = array < 0
    if bool(negative.any()):
        row = int(xp.flatnonzero(negative.any(axis=1))[0])
        raise MetricError(
            f"metric='precomputed': row {row} holds a negative distance; distances are >= 0.",
            field="points",
            index=row,
        )
    del negative
    if not bool((array == array.T).all()) and not _close(xp, array, array.T):
        raise _asymmetric_error()
    return array


def _close(xp: Any, a: Any, b: Any) -> bool:
    """``allclose`` that takes equal infinities as equal (scikit-learn's check, chunked on the host)."""
    n = int(a.shape[0])
    step = max(1, (1 << 24) // max(n, 1))
    for lo in range(0, n, step):
        x, y = a[lo : lo + step], b[lo : lo + step]
        if not bool(xp.allclose(x, y, rtol=SYMMETRY_RTOL, atol=SYMMETRY_ATOL, equal_nan=False)):
            return False
    return True


def _validate_sparse(matrix: Any) -> Any:
    import scipy.sparse

    host = matrix.get() if type(matrix).__module__.startswith("cupyx") else matrix
    csr = scipy.sparse.csr_matrix(host, dtype=np.float64, copy=True)
    csr.sum_duplicates()
    if csr.shape[0] != csr.shape[1] or csr.shape[0] < 1:
        raise _shape_error(tuple(int(v) for v in csr.shape))
    data = csr.data
    if not bool(np.isfinite(data).all()):
        row = int(np.searchsorted(csr.indptr, int(np.flatnonzero(~np.isfinite(data))[0]), side="right") - 1)
        raise MetricError(
            f"metric='precomputed': row {row} of the sparse matrix stores a NaN or infinite distance; "
            "leave a missing distance out instead.",
            field="points",
            index=row,
        )
    if bool((data < 0).any()):
        row = int(np.searchsorted(csr.indptr, int(np.flatnonzero(data < 0)[0]), side="right") - 1)
        raise MetricError(
            f"metric='precomputed': row {row} holds a negative distance; distances are >= 0.",
            field="points",
            index=row,
        )
    transposed = csr.T.tocsr()
    transposed.sum_duplicates()
    same = (
        np.array_equal(csr.indptr, transposed.indptr)
        and np.array_equal(csr.indices, transposed.indices)
        and bool(np.allclose(csr.data, transposed.data, rtol=SYMMETRY_RTOL, atol=SYMMETRY_ATOL))
    )
    if not same:
        raise _asymmetric_error()
    return csr


class PrecomputedIndex:
    """The "index" of a precomputed matrix: the checked matrix on its backend (dense: NumPy or
    CuPy; sparse: SciPy CSR on the host, its trees on either backend)."""

    def __init__(self, matrix: Any, backend: str, *, owns: bool) -> None:
        started = time.perf_counter()
        self.sparse = is_sparse(matrix)
        self.backend = backend
        if backend == "gpu" and not self.sparse and not is_cupy(matrix):
            import cupy

            matrix, owns = cupy.asarray(matrix), True
        self.matrix = matrix
        self.n = int(matrix.shape[0])
        self.d = self.n
        self._owns = owns
        self.symmetric: bool | None = None
        self._build_ms = (time.perf_counter() - started) * 1e3

    @property
    def nbytes(self) -> int:
        if not self._owns:
            return 0
        m = self.matrix
        return int(m.data.nbytes + m.indices.nbytes + m.indptr.nbytes) if self.sparse else int(m.nbytes)

    def build_ms(self) -> float:
        return self._build_ms

    def tree(
        self, min_samples: int, started: float, fresh: bool, on_device: bool, *, keys: bool = False,
        core_scale: float = 1.0,
    ) -> EuclideanTree:  # fmt: skip
        del keys  # keys are distances here
        timings: dict[str, float] = {"index_ms": self._build_ms if fresh else 0.0}
        k, n = min_samples, self.n
        if n == 1:
            empty = np.empty(0, dtype=np.int64)
            tree = finish_tree(
                empty, empty, np.empty(0), n=1, d=1, min_samples=k, backend=self.backend,
                core2=np.zeros(1) if k > 1 else None, started=started, timings_ms=timings, keys=True,
            )  # fmt: skip
            return _placed(tree, on_device)
        if self.sparse:
            lo, hi, w, core = sparse_tree(self.matrix, k, core_scale, self.backend)
        elif self.backend == "gpu":
            lo, hi, w, core = self._device_dense(k, core_scale, timings)
        else:
            lo, hi, w, core = host_dense_tree(self.matrix, k, core_scale)
        tree = finish_tree(
            to_host(lo), to_host(hi), to_host(w), n=n, d=n, min_samples=k,
            core2=None if k == 1 else to_host(core), backend=self.backend, started=started,
            timings_ms=timings, keys=True,
        )  # fmt: skip
        return _placed(tree, on_device and self.backend == "gpu")

    def _device_dense(self, k: int, core_scale: float, timings: dict[str, float]) -> tuple[Array, ...]:
        from .precomputed_gpu import device_dense_tree

        if self.symmetric is None:  # once: the rows alone say every distance
            self.symmetric = bool((self.matrix == self.matrix.T).all())
        return device_dense_tree(self.matrix, k, core_scale, self.symmetric, timings)


def _placed(tree: EuclideanTree, on_device: bool) -> EuclideanTree:
    if not on_device:
        return tree
    import dataclasses

    import cupy

    core = None if tree.core_distances is None else cupy.asarray(tree.core_distances)
    return dataclasses.replace(
        tree, src=cupy.asarray(tree.src), dst=cupy.asarray(tree.dst), weights=cupy.asarray(tree.weights),
        core_distances=core,
    )  # fmt: skip


def dense_core(matrix: np.ndarray[Any, Any], k: int) -> np.ndarray[Any, Any]:
    """Each row's k-th smallest entry (``+ 0.0``), in blocks of rows."""
    n = int(matrix.shape[0])
    out = np.empty(n)
    step = max(1, (1 << 22) // n)
    for lo in range(0, n, step):
        out[lo : lo + step] = np.partition(matrix[lo : lo + step], k - 1, axis=1)[:, k - 1] + 0.0
    return out


def host_dense_tree(matrix: np.ndarray[Any, Any], k: int, core_scale: float) -> tuple[Array, ...]:
    """Prim's algorithm on the rows under the ``(weight, min, max)`` order: ``(lo, hi, weight, core)``."""
    n = int(matrix.shape[0])
    core = dense_core(matrix, k) if k > 1 else np.zeros(n)
    scaled = core if core_scale == 1.0 else core * core_scale

    symmetric = bool(np.array_equal(matrix, matrix.T))

    def row(v: int) -> np.ndarray[Any, Any]:
        entries = (matrix[v] if symmetric else np.minimum(matrix[v], matrix[:, v])) + 0.0
        out: np.ndarray[Any, Any] = np.maximum(np.maximum(scaled[v], scaled), entries)
        return out

    ids = np.arange(n)
    outside = np.ones(n, dtype=bool)
    outside[0] = False
    best_w = row(0)
    best_from = np.zeros(n, dtype=np.int64)
    lo = np.empty(n - 1, dtype=np.int64)
    hi = np.empty(n - 1, dtype=np.int64)
    w = np.empty(n - 1)
    for step in range(n - 1):
        cand = ids[outside]
        m = best_w[cand].min()
        ties = cand[best_w[cand] == m]
        a, b = np.minimum(best_from[ties], ties), np.maximum(best_from[ties], ties)
        pick = int(np.lexsort((b, a))[0])
        v = int(ties[pick])
        lo[step], hi[step], w[step] = a[pick], b[pick], m
        outside[v] = False
        new = row(v)
        pair_new = np.minimum(v, ids) * n + np.maximum(v, ids)
        pair_old = np.minimum(best_from, ids) * n + np.maximum(best_from, ids)
        better = outside & ((new < best_w) | ((new == best_w) & (pair_new < pair_old)))
        best_w[better] = new[better]
        best_from[better] = v
    return lo, hi, w, core


def sparse_tree(csr: Any, k: int, core_scale: float, backend: str) -> tuple[Array, ...]:
    """The tree of a sparse matrix's stored entries: ``(lo, hi, weight, core)`` (NumPy)."""
    from .._graphs.graph import minimum_spanning_forest

    n = int(csr.shape[0])
    counts = np.diff(csr.indptr)
    short = np.flatnonzero(counts < k)
    if short.size:
        row = int(short[0])
        raise MetricError(
            f"metric='precomputed': There exists points with fewer than {k} neighbors: row {row} stores "
            f"{int(counts[row])} distance(s), and min_samples={k} needs at least {k} per row. Ensure your "
            f"distance matrix has values for at least `min_sample`={k} neighbors for each point (a k-nn "
            "graph).",
            field="points",
            index=row,
        )
    rows = np.repeat(np.arange(n), counts)
    data = csr.data + 0.0
    core = np.empty(n)
    order = np.lexsort((data, rows))  # each row's entries ascending
    core[:] = data[order][csr.indptr[:-1] + k - 1]
    scaled = core if core_scale == 1.0 else core * core_scale
    cols = csr.indices.astype(np.int64)
    weight = np.maximum(np.maximum(scaled[rows], scaled[cols]), data)
    lo, hi = np.minimum(rows, cols), np.maximum(rows, cols)
    keep = lo != hi
    lo, hi, weight = lo[keep], hi[keep], weight[keep]
    by = np.lexsort((weight, hi, lo))  # per pair, the lighter orientation first
    lo, hi, weight = lo[by], hi[by], weight[by]
    first = np.ones(lo.size, dtype=bool)
    first[1:] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])
    lo, hi, weight = lo[first], hi[first], weight[first]
    forest = minimum_spanning_forest(lo, hi, weight, num_vertices=n, backend=backend)  # type: ignore[arg-type]
    if forest.num_components > 1:
        raise MetricError(
            f"metric='precomputed': Sparse mutual reachability matrix has {forest.num_components} connected "
            "components. HDBSCAN cannot be performed on a disconnected graph. Ensure that the sparse "
            "distance matrix has only one connected component.",
            field="points",
        )
    ids = forest.edge_ids
    return lo[ids], hi[ids], weight[ids], core
