"""The public graph type and the ``minimum_spanning_forest`` entry point."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .._backend.arrays import to_host
from .._backend.resolve import Backend, resolve_backend
from ..errors import GraphValidationError
from .clusters import forest_components, kept_for_clusters
from .cpu import CpuGraph
from .forest import SpanningForest, make_forest
from .order import Objective, check_objective, edge_ids_argument, new_weights_argument
from .validate import validate_edges


class _Prepared(Protocol):
    backend: str
    num_vertices: int
    num_edges: int
    weight: Any
    weight_bound: int | None

    @property
    def nbytes(self) -> int: ...

    @property
    def xp(self) -> Any: ...

    def prepare(self, objective: Objective = "min") -> None: ...

    def launch(self, objective: Objective = "min") -> bool: ...

    def compute(self, objective: Objective = "min", exclude: Any = None) -> tuple[Any, Any, float]: ...

    def set_weights(self, weight: Any, edge_ids: Any = None) -> None: ...

    def endpoints(self, edge_ids: Any) -> tuple[Any, Any]: ...

    def to_host(self, *arrays: Any) -> list[np.ndarray[Any, Any]]: ...


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
            from .gpu import GpuGraph

            self._impl = GpuGraph(src, dst, weight, num_vertices)
        else:
            host_weight = to_host(weight)
            edges = validate_edges(np, to_host(src), to_host(dst), host_weight, num_vertices)
            self._impl = CpuGraph(edges, host_weight)
        self._weights_version = 0

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

    def weights(self) -> np.ndarray[Any, Any]:
        """The current weights, in edge-id order, as a host array of their own."""
        return np.array(self._impl.to_host(self._impl.weight)[0], copy=True)

    @property
    def weights_version(self) -> int:
        """How many times the weights were changed since the graph was built (0 at first)."""
        return self._weights_version

    def prepare(self, objective: str = "min") -> None:
        """Do now the one-time work of a first computation of ``objective``'s forest.

        On the GPU: rank the edges in that order when the graph holds the other one (the run's
        CUDA graph is built with the graph and serves both). The CPU backend ranks its edges.
        """
        self._impl.prepare(check_objective(objective))

    def _forest_arrays(self, objective: str, exclude: Any) -> tuple[Any, Any, float]:
        """The forest where it was computed: (edge ids ascending, weights, milliseconds)."""
        chosen = check_objective(objective)
        xp = self._impl.xp
        skip = None if exclude is None else edge_ids_argument(xp, exclude, self.num_edges, "exclude")
        return self._impl.compute(chosen, skip)

    def minimum_spanning_forest(self, *, objective: str = "min", exclude: Any = None) -> SpanningForest:
        """The minimum (or, with ``objective="max"``, maximum) spanning forest.

        ``objective="max"`` orders edges by ``(-weight, edge_id)``: heavier first, ties by the
        lower edge id. ``exclude``: edge ids to leave out of this computation only (a what-if:
        failed links), the graph itself unchanged.
        """
        ids, weights, elapsed_ms = self._forest_arrays(objective, exclude)
        ids_host, weights_host = self._impl.to_host(ids, weights)
        bound = self._impl.weight_bound
        return make_forest(ids_host, weights_host, self.num_vertices, self.backend, elapsed_ms, bound)

    def maximum_spanning_forest(self, *, exclude: Any = None) -> SpanningForest:
        """The maximum spanning forest: ``minimum_spanning_forest(objective="max")``."""
        return self.minimum_spanning_forest(objective="max", exclude=exclude)

    def launch_forest(self, *, objective: str = "min") -> bool:
        """Start computing the forest on the device and return at once; whether a run started.

        The next :meth:`minimum_spanning_forest` of ``objective`` with nothing excluded collects
        that run: the forests of several graphs launched one after another are computed side by
        side, each on its graph's own stream. Nothing starts on the CPU backend, or when the graph
        is ranked for the other objective (then the forest is computed when asked for, as always).
        """
        return self._impl.launch(check_objective(objective))

    def set_weights(self, weight: Any) -> None:
        """Replace every weight (same length; any supported dtype, which becomes the graph's).

        The topology stays where it is (on the device for the GPU backend); only what
        depends on the order of the edges is rebuilt.
        """
        xp = self._impl.xp
        new = new_weights_argument(xp, weight, None, self.num_edges, "weight")
        self._impl.set_weights(new)
        self._weights_version += 1

    def update_weights(self, edge_ids: Any, weights: Any) -> None:
        """Replace the weights of the given edges; the values must be exact in the graph's dtype."""
        xp = self._impl.xp
        ids = edge_ids_argument(xp, edge_ids, self.num_edges, "edge_ids")
        new = new_weights_argument(xp, weights, self.weight_dtype, int(ids.shape[0]), "weights")
        self._impl.set_weights(new, ids)
        self._weights_version += 1

    def component_labels(self, *, exclude: Any = None) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Connected-component label of every vertex (``0, 1, ...`` by each component's smallest
        vertex, as SciPy's ``connected_components`` numbers them); ``exclude`` as for the forest."""
        ids, _, _ = self._forest_arrays("min", exclude)
        u, v = self._impl.endpoints(ids)
        labels = forest_components(self._impl.xp, self.num_vertices, u, v)
        return self._impl.to_host(labels)[0].copy()

    def cluster_labels(
        self, *, k: int | None = None, threshold: float | None = None
    ) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Cluster label of every vertex after cutting the minimum spanning forest.

        ``k``: into ``k`` clusters, removing the heaviest forest edges (by ``(weight, edge_id)``;
        a graph of ``c`` components has ``c`` clusters before any cut, so ``k >= c``). ``threshold``:
        removing the forest edges heavier than it. Labels are numbered as in :meth:`component_labels`.
        """
        xp = self._impl.xp
        ids, weights, _ = self._forest_arrays("min", None)
        keep = kept_for_clusters(xp, self.num_vertices, weights, k=k, threshold=threshold)
        u, v = self._impl.endpoints(ids[keep])
        labels = forest_components(xp, self.num_vertices, u, v)
        return self._impl.to_host(labels)[0].copy()

    def single_linkage(self) -> np.ndarray[Any, np.dtype[np.float64]]:
        """The single-linkage dendrogram of a connected graph, as a SciPy linkage matrix.

        ``(n - 1) x 4`` float64 rows ``[cluster a, cluster b, height, size]``, merges in the
        ``(weight, edge_id)`` order of the minimum spanning tree, clusters numbered as SciPy
        numbers them (``n + i`` for the cluster the ``i``-th merge makes); heights are the
        weights as float64. The format ``scipy.cluster.hierarchy.fcluster`` and ``dendrogram`` take.
        """
        from .._dendrogram.cpu import linkage_from_sorted_edges

        xp = self._impl.xp
        ids, weights, _ = self._forest_arrays("min", None)
        n = self.num_vertices
        if n < 2 or int(ids.shape[0]) != n - 1:
            raise GraphValidationError(
                f"a single-linkage dendrogram needs a connected graph of at least 2 vertices; this one has "
                f"{n} vertices in {n - int(ids.shape[0])} components (cut it with cluster_labels instead).",
                field="graph",
            )
        order = xp.argsort(weights, kind="stable") if xp is np else xp.argsort(weights)
        u, v = self._impl.endpoints(ids[order])
        u_h, v_h, w_h = self._impl.to_host(u, v, weights[order])
        return linkage_from_sorted_edges(n, u_h, v_h, np.asarray(w_h, dtype=np.float64))

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
    objective: str = "min",
    exclude: Any = None,
) -> SpanningForest:
    """Minimum spanning forest of an undirected graph, exact under the ``(weight, edge_id)`` order.

    Pass a :class:`Graph`, or ``src, dst, weight`` arrays (then the graph is
    built on ``backend`` for this one call). Self-loops never enter the
    forest; parallel edges and negative weights are allowed. ``objective="max"``
    gives the maximum spanning forest (order ``(-weight, edge_id)``); ``exclude``
    leaves the given edge ids out.
    """
    if isinstance(graph_or_src, Graph):
        if dst is not None or weight is not None or num_vertices is not None:
            raise TypeError("dst, weight and num_vertices are taken from the Graph; do not pass them.")
        if backend != "auto" and resolve_backend(backend) != graph_or_src.backend:
            raise ValueError(
                f"the graph lives on the {graph_or_src.backend} backend but backend={backend!r} "
                "was requested; build the Graph with that backend instead."
            )
        return graph_or_src.minimum_spanning_forest(objective=objective, exclude=exclude)
    if dst is None or weight is None:
        raise TypeError("minimum_spanning_forest(src, dst, weight) needs all three edge arrays.")
    check_objective(objective)
    graph = Graph(graph_or_src, dst, weight, num_vertices, backend=backend)
    return graph.minimum_spanning_forest(objective=objective, exclude=exclude)


def maximum_spanning_forest(
    graph_or_src: Graph | Any,
    dst: Any = None,
    weight: Any = None,
    *,
    num_vertices: int | None = None,
    backend: Backend = "auto",
    exclude: Any = None,
) -> SpanningForest:
    """Maximum spanning forest, exact under the ``(-weight, edge_id)`` order (see
    :func:`minimum_spanning_forest`, of which this is ``objective="max"``)."""
    return minimum_spanning_forest(
        graph_or_src,
        dst,
        weight,
        num_vertices=num_vertices,
        backend=backend,
        objective="max",
        exclude=exclude,
    )
