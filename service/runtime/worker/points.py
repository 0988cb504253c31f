"""Point sets resident in a worker, and the tasks on them: ``emst``, ``hdbscan``, ``single_linkage``.

Runs in the worker process (it imports :mod:`gpu_core`). A resident point set keeps, besides its
coordinates, the trees computed on it by ``min_samples`` and their single-linkage hierarchies, so
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


def read_points(path: str, fmt: str, max_inflated_bytes: int, max_ratio: float) -> np.ndarray[Any, Any]:
    """The ``(n, d)`` coordinates of a spool file: ``points.npy``, or ``points.npz`` with a ``points``
    array (read with the upload caps, never unpickled)."""
    from gpu_core.formats import npz_arrays

    try:
        if fmt == "points.npy":
            array: np.ndarray[Any, Any] = np.load(path, mmap_mode="r", allow_pickle=False)
            return array
        arrays = npz_arrays(
            Path(path).read_bytes(), max_inflated_bytes=max_inflated_bytes, max_ratio=max_ratio
        )
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


def _on_host(array: Any) -> Any:
    """A result array in host memory (a device array comes through pinned memory)."""
    if isinstance(array, np.ndarray):
        return array
    from gpu_core._backend.staging import to_pinned

    return to_pinned(array)


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
        self._trees: dict[int, Any] = {}
        self._linkages: dict[int, np.ndarray[Any, Any]] = {}
        self._index: Any = None  # gpu_core.PointIndex, built on first need

    @property
    def num_points(self) -> int:
        return int(self.coords.shape[0])

    @property
    def dims(self) -> int:
        return int(self.coords.shape[1])

    @property
    def nbytes(self) -> int:
        trees = sum(t.src.nbytes + t.dst.nbytes + t.weights.nbytes for t in self._trees.values())
        index = 0 if self._index is None else int(self._index.nbytes)
        return int(self.coords.nbytes + trees + sum(z.nbytes for z in self._linkages.values()) + index)

    def index(self) -> tuple[Any, bool]:
        """The spatial index (built now if no job has needed it yet), and whether it was built before."""
        import gpu_core

        if self._index is not None:
            return self._index, True
        coords = self.coords
        if self.backend == "gpu":  # an index of device points: trees, dendrograms and labels stay there
            import cupy

            coords = cupy.asarray(coords)
        self._index = gpu_core.build_point_index(coords, backend=self.backend)  # type: ignore[arg-type]
        return self._index, False

    def tree(self, min_samples: int) -> tuple[Any, bool, bool]:
        """The (mutual-reachability) tree of ``min_samples``; whether it was computed before; whether
        no index had to be built for it (the tree, or the index it is computed on, was there)."""
        import gpu_core

        known = self._trees.get(min_samples)
        if known is not None:
            return known, True, True
        index, reused_index = self.index()
        tree = gpu_core.euclidean_mst(index, min_samples=min_samples)
        self._trees[min_samples] = tree
        return tree, False, reused_index

    def linkage(self, min_samples: int) -> tuple[np.ndarray[Any, Any], bool, bool]:
        """The single-linkage hierarchy of that tree, with :meth:`tree`'s two flags."""
        import gpu_core

        tree, reused, reused_index = self.tree(min_samples)
        linkage = self._linkages.get(min_samples)
        if linkage is None:
            linkage = gpu_core.single_linkage(tree)
            self._linkages[min_samples] = linkage
        return linkage, reused, reused_index

    def run(self, task: str, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(summary, result arrays) of a task on this point set."""
        from gpu_core._clustering.hdbscan import labels_from_tree
        from gpu_core.errors import ClusteringParameterError

        started = time.perf_counter()
        n = self.num_points
        if task == "emst":
            tree, reused, reused_index = self.tree(int(params.get("min_samples", 1)))
            arrays: dict[str, Any] = {"src": tree.src, "dst": tree.dst, "weights": tree.weights}
            if tree.core_distances is not None:
                arrays["core_distances"] = tree.core_distances
            summary: dict[str, Any] = {"num_edges": tree.num_edges, "total_weight": tree.total_weight,
                                       "num_components": 1}  # fmt: skip
        elif task == "single_linkage":
            if n < 2:
                raise ClusteringParameterError("a dendrogram needs at least 2 points.", field="points")
            linkage, reused, reused_index = self.linkage(1)
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
            else:
                linkage, reused, reused_index = self.linkage(k)
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
        arrays = {name: _on_host(a) for name, a in arrays.items()}
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
#: ``min_samples`` of :func:`warm_up`: none (1: a Euclidean tree), a few, more than the lists hold
WARM_UP_MIN_SAMPLES = (1, 5, 40)


def warm_up(backend: str) -> None:
    """Run every point-set task once end to end (EMST of each :data:`WARM_UP_MIN_SAMPLES`, HDBSCAN* by
    excess of mass and by leaves with an epsilon, single linkage) on small sets of each
    :data:`WARM_UP_DIMENSIONS`, so that no request meets a first time: what the tasks import and
    the kernels and CuPy specializations around the engine's (those of every size class are
    ``gpu_core._points.warm_up``'s, run by the worker after this). One coordinate dtype does for
    both: the points are validated into float64 before anything computes on them. The compiled
    host passes (Numba) are the worker's to load (``gpu_core._clustering.hdbscan.warm_up_compiled``)."""
    rng = np.random.default_rng(0)
    for dims in WARM_UP_DIMENSIONS:
        points = ResidentPoints(rng.random((WARM_UP_POINTS, dims)).astype(np.float32), backend)
        for k in WARM_UP_MIN_SAMPLES:
            points.run("emst", {"min_samples": k})
        points.run("single_linkage", {})
        for method, epsilon in (("eom", 0.0), ("leaf", 0.5)):
            params = {"min_cluster_size": 5, "cluster_selection_method": method,
                      "cluster_selection_epsilon": epsilon}  # fmt: skip
            points.run("hdbscan", params)
