"""The public graph type and the ``minimum_spanning_forest`` entry point."""

from __future__ import annotations

import functools
from typing import Any, Literal, Protocol

import numpy as np

from ._cpu import CpuGraph
from ._forest import SpanningForest
from ._validate import validate_edges
from .errors import BackendUnavailableError

Backend = Literal["auto", "gpu", "cpu"]
BACKENDS: tuple[str, ...] = ("auto", "gpu", "cpu")


class _Prepared(Protocol):
    backend: str
    num_vertices: int
    num_edges: int
    weight: Any

    @property
    def nbytes(self) -> int: ...

    def prepare(self) -> None: ...

    def minimum_spanning_forest(self) -> SpanningForest: ...


@functools.cache
def _gpu_probe() -> str | None:
    """None when CuPy sees a CUDA device, else the reason it does not."""
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed (install the 'gpu' extra, e.g. pip install 'mst-service[gpu]')"
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDA raises its own error types for a missing driver
        return f"CUDA is not usable: {exc}"
    return None if count > 0 else "no CUDA device is visible"


def gpu_available() -> bool:
    """True when CuPy is importable and sees at least one CUDA device."""
    return _gpu_probe() is None


def resolve_backend(backend: str) -> Literal["gpu", "cpu"]:
    """Turn ``"auto"`` into ``"gpu"`` or ``"cpu"``; refuse ``"gpu"`` where there is none."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}.")
    if backend == "cpu":
        return "cpu"
    reason = _gpu_probe()
    if reason is None:
        return "gpu"
    if backend == "gpu":
        raise BackendUnavailableError(f"backend='gpu' was requested but {reason}.")
    return "cpu"


def _to_host(value: Any) -> Any:
    if type(value).__module__.split(".")[0] == "cupy":
        return value.get()
    return value


class Graph:
    """An undirected, weighted graph prepared for minimum-spanning-forest computations.

    The edge id of an edge is its 0-based position in the given lists. On the GPU
    backend the graph is built and kept **on the device** (CSR of both
    directions, edge ranks, the map back to edge ids), so repeated computations
    upload nothing. CuPy arrays are accepted as input by both backends.
    """

    def __init__(
        self,
        src: Any,
        dst: Any,
        weight: Any,
        num_vertices: int | None = None,
        *,
        backend: Backend = "auto",
    ) -> None:
        chosen = resolve_backend(backend)
        self._impl: _Prepared
        if chosen == "gpu":
            from ._gpu import GpuGraph

            self._impl = GpuGraph(src, dst, weight, num_vertices)
        else:
            host_weight = _to_host(weight)
            edges = validate_edges(np, _to_host(src), _to_host(dst), host_weight, num_vertices)
            self._impl = CpuGraph(edges, host_weight)

    @property
    def backend(self) -> str:
        """``"gpu"`` or ``"cpu"``: where the graph lives and is computed on."""
        return self._impl.backend

    @property
    def num_vertices(self) -> int:
        return self._impl.num_vertices

    @property
    def num_edges(self) -> int:
        """Number of edges as uploaded (self-loops and parallel edges included)."""
        return self._impl.num_edges

    @property
    def weight_dtype(self) -> np.dtype[Any]:
        dtype: np.dtype[Any] = np.dtype(self._impl.weight.dtype)
        return dtype

    @property
    def nbytes(self) -> int:
        """Bytes the prepared graph holds (device memory on the GPU backend)."""
        return self._impl.nbytes

    def prepare(self) -> None:
        """Do now the one-time work of the first computation.

        On the GPU the first computation reads the worklist sizes back every two
        iterations to learn how many iterations the graph takes, and the second
        one captures the whole run as a CUDA graph; later computations replay it
        with a single read-back. ``prepare`` does both, so that no request pays
        for them. The CPU backend has nothing to prepare.
        """
        self._impl.prepare()

    def minimum_spanning_forest(self) -> SpanningForest:
        """Compute the minimum spanning forest (see :func:`minimum_spanning_forest`)."""
        return self._impl.minimum_spanning_forest()

    def __repr__(self) -> str:
        return (
            f"Graph(num_vertices={self.num_vertices}, num_edges={self.num_edges}, "
            f"weight_dtype={self.weight_dtype}, backend={self.backend!r})"
        )


def minimum_spanning_forest(
    graph_or_src: Graph | Any,
    dst: Any = None,
    weight: Any = None,
    *,
    num_vertices: int | None = None,
    backend: Backend = "auto",
) -> SpanningForest:
    """Minimum spanning forest of an undirected graph, exact under the ``(weight, edge_id)`` order.

    Pass a :class:`Graph`, or ``src, dst, weight`` arrays (then the graph is
    built on ``backend`` for this one call). Self-loops never enter the
    forest; parallel edges and negative weights are allowed.
    """
    if isinstance(graph_or_src, Graph):
        if dst is not None or weight is not None or num_vertices is not None:
            raise TypeError("dst, weight and num_vertices are taken from the Graph; do not pass them.")
        if backend != "auto" and resolve_backend(backend) != graph_or_src.backend:
            raise ValueError(
                f"the graph lives on the {graph_or_src.backend} backend but backend={backend!r} "
                "was requested; build the Graph with that backend instead."
            )
        return graph_or_src.minimum_spanning_forest()
    if dst is None or weight is None:
        raise TypeError("minimum_spanning_forest(src, dst, weight) needs all three edge arrays.")
    return Graph(graph_or_src, dst, weight, num_vertices, backend=backend).minimum_spanning_forest()


def warm_up(backend: Backend = "auto") -> str:
    """Compile the kernels and run a tiny graph, so no request pays for compilation.

    Returns the backend that was warmed up.
    """
    chosen = resolve_backend(backend)
    src = np.array([0, 1, 2, 0, 3], dtype=np.int64)
    dst = np.array([1, 2, 0, 3, 3], dtype=np.int64)
    for dtype in (np.int32, np.int64, np.float32, np.float64):
        weight = np.array([3, 1, 2, 5, 4], dtype=dtype)
        Graph(src, dst, weight, 6, backend=chosen).minimum_spanning_forest()
    return chosen
