"""The client's conversions: SciPy sparse matrices and NetworkX graphs to edge arrays, forests back.

A :class:`GraphSource` remembers how a graph became edge arrays, so that a forest (edge ids) can
be turned back into the caller's kind of object:

* **SciPy sparse** (any format, N x N): every stored entry ``(i, j)`` is an edge, in CSR order
  (COO duplicates summed), explicit zeros included (zero-weight edges, as in
  ``scipy.sparse.csgraph``); both ``(i, j)`` and ``(j, i)`` may be stored, and the lighter is
  chosen, as :func:`scipy.sparse.csgraph.minimum_spanning_tree` does. Weights keep their dtype
  when the service takes it (int32, int64, float32, float64); narrower ones widen exactly.
* **NetworkX** (``Graph`` or ``MultiGraph``): edges in ``G.edges(keys=True, data=True)`` order,
  the weight attribute read with default 1 (as NetworkX does), so ties resolve as NetworkX's
  Kruskal resolves them. Weights must be int or float (NaN and inf are refused).

A forest goes back as a NetworkX graph of the same class (nodes and their attributes, the chosen
edges with their keys and attribute dicts) or as an N x N ``csr_array`` of the chosen entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

_SERVICE_DTYPES = ("int32", "int64", "float32", "float64")
_WIDEN = {"bool": "int32", "int8": "int32", "int16": "int32", "uint8": "int32", "uint16": "int32",
          "uint32": "int64", "float16": "float32"}  # fmt: skip


@dataclass
class GraphSource:
    """Edge arrays as uploaded, and what is needed to turn a forest back into the caller's object."""

    src: np.ndarray[Any, Any]
    dst: np.ndarray[Any, Any]
    weight: np.ndarray[Any, Any]
    num_vertices: int
    #: the NetworkX graph the arrays came from, and its edges in edge-id order
    nx_graph: Any = None
    nx_edges: list[tuple[Any, ...]] | None = None
    nodes: list[Any] | None = None

    def to_scipy(self, edge_ids: np.ndarray[Any, Any], weights: np.ndarray[Any, Any]) -> Any:
        """The forest as an N x N ``csr_array`` (entries at ``(src, dst)`` of the chosen edges)."""
        import scipy.sparse as sp

        ids = np.asarray(edge_ids, dtype=np.int64)
        n = self.num_vertices
        return sp.csr_array((np.asarray(weights), (self.src[ids], self.dst[ids])), shape=(n, n))

    def to_networkx(self, edge_ids: np.ndarray[Any, Any], weights: np.ndarray[Any, Any]) -> Any:
        """The forest as a NetworkX graph (of the uploaded graph's class, its attributes kept)."""
        import networkx as nx

        ids = np.asarray(edge_ids, dtype=np.int64).tolist()
        if self.nx_graph is None or self.nx_edges is None:
            forest = nx.Graph()
            forest.add_nodes_from(range(self.num_vertices))
            values = np.asarray(weights).tolist()
            forest.add_weighted_edges_from(
                (int(self.src[i]), int(self.dst[i]), w) for i, w in zip(ids, values, strict=True)
            )
            return forest
        graph = self.nx_graph
        forest = graph.__class__()
        forest.graph.update(graph.graph)
        forest.add_nodes_from(graph.nodes.items())
        forest.add_edges_from(self.nx_edges[i] for i in ids)
        return forest


def is_scipy_sparse(obj: Any) -> bool:
    module = type(obj).__module__
    if not module.startswith("scipy.sparse"):
        return False
    import scipy.sparse as sp

    return bool(sp.issparse(obj))


def is_networkx(obj: Any) -> bool:
    return type(obj).__module__.startswith("networkx") and hasattr(obj, "is_multigraph")


def _service_weights(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    name = str(values.dtype)
    if name in _SERVICE_DTYPES:
        return values
    if name in _WIDEN:
        return values.astype(_WIDEN[name])
    raise ValueError(f"weights of dtype {name} cannot be sent exactly; use int32, int64, float32 or float64.")


def from_scipy(matrix: Any) -> GraphSource:
    """Edge arrays of a SciPy sparse matrix or array (see the module's notes)."""
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"the matrix must be square (N, N); got shape {matrix.shape}.")
    csr = matrix.tocsr()  # what scipy.sparse.csgraph reads: COO duplicates summed
    indptr = np.asarray(csr.indptr)
    n = int(csr.shape[0])
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    dst = np.asarray(csr.indices, dtype=np.int64)
    return GraphSource(src, dst, _service_weights(np.asarray(csr.data)), n)


def from_networkx(graph: Any, weight: str = "weight") -> GraphSource:
    """Edge arrays of a NetworkX ``Graph`` or ``MultiGraph`` (see the module's notes)."""
    from gpu_core._interop.nx_backend import _edge_list

    if graph.is_directed():
        raise ValueError("minimum spanning forests are for undirected graphs; pass G.to_undirected().")
    edges = _edge_list(graph, weight, ignore_nan=False)
    if isinstance(edges, str):
        raise ValueError(f"the graph's weights cannot be sent exactly: {edges}.")
    if edges.nan_edge is not None:
        raise ValueError(f"NaN found as an edge weight. Edge {edges.nan_edge}")
    multigraph = graph.is_multigraph()
    as_added = [(e[0], e[1], e[2], e[3]) if multigraph else (e[0], e[1], e[2]) for e in edges.edges]
    return GraphSource(edges.src, edges.dst, edges.weight, edges.num_vertices, graph, as_added, list(graph))


def graph_source(obj: Any, weight: str = "weight") -> GraphSource:
    """A :class:`GraphSource` of a SciPy sparse matrix or a NetworkX graph."""
    if is_scipy_sparse(obj):
        return from_scipy(obj)
    if is_networkx(obj):
        return from_networkx(obj, weight)
    raise TypeError(
        f"expected a SciPy sparse matrix or array or a NetworkX graph, got {type(obj).__name__}; "
        "use upload_arrays(src, dst, weight) for edge arrays."
    )
