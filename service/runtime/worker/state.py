"""The state of a worker process: its device and what is resident on it, shared by every task.

One :class:`Worker` per process (or Ray actor): the backend it resolved at start-up, the graphs
and point sets it holds, and what every task needs of them: the memory left
(:meth:`Worker.memory`, capped by ``MST_WORKER_MEMORY_BYTES``), the admission of a parsed
upload before it is built (:meth:`Worker.admit`: 413 when it can never fit, 507 when it does
not fit now, so the handle evicts idle graphs and asks again), result files written whole into
place. Errors leave the process through :func:`portable`.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ...errors import (
    GraphExceedsWorkerError,
    InsufficientMemoryError,
    PointSetExceedsWorkerError,
    ServiceError,
    WorkerInternalError,
    storage_error,
)
from ...storage import npzio
from .points import ResidentPoints
from .prediction import ResidentModel
from .protocol import WorkerConfig

if TYPE_CHECKING:  # the API process must not import gpu_core's backends at run time through here
    import gpu_core

log = logging.getLogger("service.worker")


class Worker:
    """One worker's device and the datasets resident on it."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.graphs: dict[str, gpu_core.Graph] = {}
        #: resident point sets (see :mod:`service.runtime.worker.points`)
        self.points: dict[str, ResidentPoints] = {}
        self.backend: Literal["gpu", "cpu"] = "cpu"
        self.tmp_dir = Path(config.tmp_dir)
        #: set once the warm-up is done, the kernels' parts included (:func:`.startup.start` may
        #: leave them running after ready); ``warm_up`` is then its report
        self.warmed = threading.Event()
        self.warm_up: dict[str, Any] = {}

    def memory(self) -> tuple[int, int]:
        """(free, total) bytes of the memory graphs live in: the device's, or the host's; with
        MST_WORKER_MEMORY_BYTES, no more than that cap less what the resident graphs hold."""
        if self.backend != "gpu":
            free, total = host_memory()
        else:
            import cupy

            device_free, device_total = cupy.cuda.runtime.memGetInfo()
            free = int(device_free) + int(cupy.get_default_memory_pool().free_bytes())
            total = int(device_total)
        cap = self.config.memory_bytes
        if not cap and self.config.memory_share > 1:
            cap = total // self.config.memory_share
        if cap:
            held = sum(g.nbytes for g in self.graphs.values()) + sum(p.nbytes for p in self.points.values())
            free, total = min(free, max(cap - held, 0)), min(cap, total)
        return free, total

    def admit(self, edges: Any, num_vertices: int | None) -> None:
        """Refuse a parsed graph that cannot be built here, before anything of its size is allocated:
        413 when it needs more than the worker has in all, 507 when more than is free now
        (its handle then evicts idle graphs and asks again)."""
        import numpy as np

        import gpu_core

        m = int(edges.weight.shape[0]) if edges.weight.shape[:1] else 0
        n = num_vertices
        if n is None:
            ids = [a for a in (edges.src, edges.dst) if a.dtype.kind in "iu" and a.size]
            n = max((int(a.max()) for a in ids), default=-1) + 1
        dtype = edges.weight.dtype if edges.weight.dtype in gpu_core.WEIGHT_DTYPES else np.dtype(np.float64)
        needed = gpu_core.estimate_device_bytes(max(n, 0), m, dtype, backend=self.backend).peak
        self.check_room(needed, f"the graph ({n} vertices, {m} edges, {dtype} weights)", "to build")

    def check_room(self, needed: int, what: str, purpose: str, *, point_set: bool = False) -> None:
        """Refuse ``needed`` bytes: 413 when the worker never has that much
        (:class:`GraphExceedsWorkerError`, or :class:`PointSetExceedsWorkerError` with
        ``point_set``), 507 when it has not now (:class:`InsufficientMemoryError`); the problem
        names ``what`` needs them ``purpose``, and the numbers."""
        free, total = self.memory()
        where = "device" if self.backend == "gpu" else "host"
        if needed > total:
            too_large = PointSetExceedsWorkerError if point_set else GraphExceedsWorkerError
            raise too_large(
                f"{what} needs about {needed} bytes of {where} memory {purpose}, more than worker "
                f"{self.config.index} has in all ({total} bytes).",
                needed=needed,
                capacity=total,
                field="body",
            )
        if needed > free:
            raise InsufficientMemoryError(
                f"{what} needs about {needed} bytes of {where} memory {purpose}; worker "
                f"{self.config.index} has {free} of {total} bytes free.",
                needed=needed,
                available=free,
                capacity=total,
            )

    def admit_points(self, num_points: int, dims: int) -> None:
        """Refuse a point set that cannot be held here, before its coordinates are copied: the
        worker's float64 copy and the spatial index its first job builds
        (:func:`gpu_core.estimate_point_set_bytes`' ``resident``); 413 or 507 as :meth:`admit`."""
        import gpu_core

        index = gpu_core.estimate_point_set_bytes(num_points, dims, backend=self.backend).resident
        self.check_room(
            8 * num_points * dims + index,
            f"the point set ({num_points} points of {dims} coordinates)",
            "to be held with its spatial index",
            point_set=True,
        )

    def admit_fit(self, points: ResidentPoints, params: dict[str, Any]) -> None:
        """Refuse a model fit that does not fit in memory (see :func:`.prediction.fit_bytes`)."""
        from .prediction import fit_bytes

        n, d = points.num_points, points.dims
        samples = params.get("min_samples")
        k = int(params.get("min_cluster_size", 5) if samples is None else samples)
        if not 1 <= k <= n:  # the engine refuses it with its own words
            return
        needed = fit_bytes(
            n, d, k, self.backend, points.index_built_for(params), str(params.get("metric", ""))
        )
        what = f"an HDBSCAN* model of min_samples={k} on {n} points of {d} coordinates"
        self.check_room(needed, what, "to be fitted", point_set=True)

    def admit_prediction(self, model: ResidentModel, queries: Any, membership: bool) -> None:
        """Refuse a prediction of ``queries`` points that does not fit in memory (see
        :func:`.prediction.predict_bytes`); malformed points pass, for the engine to refuse."""
        from .prediction import predict_bytes

        shape: tuple[int, ...] = getattr(queries, "shape", ())
        if len(shape) != 2:
            return
        q, d = int(shape[0]), int(shape[1])
        needed = predict_bytes(q, d, model.neighbours, model.num_clusters, membership)
        if membership:
            needed += model.membership_build_bytes(q)
        what = f"a prediction of {q} points" + (" with membership vectors" if membership else "")
        self.check_room(needed, what, "to be computed", point_set=True)

    def release_cached(self) -> None:
        """Give the memory pool's cached blocks back to the device (after an out-of-memory error)."""
        if self.backend == "gpu":
            import cupy

            gc.collect()
            cupy.get_default_memory_pool().free_all_blocks()

    def resident_graph(self, graph_id: str) -> gpu_core.Graph:
        graph = self.graphs.get(graph_id)
        if graph is None:
            raise WorkerInternalError(f"graph {graph_id} is not resident on worker {self.config.index}.")
        return graph

    def graph_summary(self, graph: gpu_core.Graph) -> dict[str, Any]:
        free, total = self.memory()
        return {
            "num_vertices": graph.num_vertices,
            "num_edges": graph.num_edges,
            "weight_dtype": str(graph.weight_dtype),
            "device_bytes": graph.nbytes,
            "free_bytes": free,
            "total_bytes": total,
        }

    def write_result(self, forest: Any, result_path: str, write_out: bool = True) -> None:
        self.write_arrays({"edge_ids": forest.edge_ids, "weights": forest.weights}, result_path, write_out)

    def write_arrays(self, arrays: dict[str, Any], result_path: str, write_out: bool = True) -> None:
        """A result file, written out to the disk at once (``write_out``: see
        :func:`npzio.write_npz_file`); a one-shot's, read once and removed, is not. Its part file
        lies beside it (``MST_RESULT_DIR`` may be another file system than the spool's tmp folder,
        and a rename across them is not atomic); the result cap counts result names only."""
        folder, name = os.path.split(result_path)
        tmp = Path(folder) / f".{name}.{os.getpid()}.part"
        try:
            npzio.write_npz_file(tmp, arrays, write_out=write_out)
            os.replace(tmp, result_path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def portable(exc: BaseException, *, for_operator: bool = False) -> BaseException:
    """The exception itself when it pickles with its fields, else a WorkerInternalError naming its
    type. An unexpected error's own text (a path on the server, say) is for the service's log,
    written here with its traceback, not for the client's answer. ``for_operator``: a failed start,
    whose cause (a setting, a driver) the operator must read: the text stays, and goes to the
    service's log, ``/readyz``'s ``last_error`` and the 503s of requests waiting for the worker."""
    from gpu_core.errors import MSTError

    if isinstance(exc, (MSTError, ServiceError)):
        return exc
    storage = storage_error(exc)  # the spool's file system full or read-only: 507/503, not a bug
    if storage is not None:
        return storage
    if for_operator:
        return WorkerInternalError(f"{type(exc).__name__}: {exc}")
    log.error("worker process %d: unexpected %s", os.getpid(), type(exc).__name__, exc_info=exc)
    return WorkerInternalError(
        f"the worker failed with an unexpected {type(exc).__name__} (a bug in the service; its details "
        "are in the service's log)"
    )


def host_memory() -> tuple[int, int]:
    """(available, total) bytes of host memory, from /proc/meminfo where there is one."""
    try:
        values = {}
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                values[key] = int(rest.split()[0]) * 1024
        return values["MemAvailable"], values["MemTotal"]
    except (OSError, KeyError, ValueError, IndexError):
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return pages, pages
