"""A NetworkX dispatch backend, ``mst_service``: NetworkX's spanning-forest functions on this engine.

Registered through the entry points ``networkx.backends`` (:class:`BackendInterface`) and
``networkx.backend_info`` (:func:`get_info`) in pyproject.toml, so an installed package is found
by NetworkX itself::

    nx.minimum_spanning_tree(G, backend="mst_service")

It implements ``minimum_spanning_edges``, ``maximum_spanning_edges``, ``minimum_spanning_tree``
and ``maximum_spanning_tree`` for ``Graph`` and ``MultiGraph`` with NetworkX's own answers:

* The edge id of an edge is its position in ``G.edges(keys=True, data=True)`` (``data=True``
  for a ``Graph``), the order NetworkX's Kruskal sorts stably by weight, so the engine's
  ``(weight, edge_id)`` tie rule (``(-weight, edge_id)`` for the maximum) picks the very edges
  NetworkX's default ``algorithm="kruskal"`` picks, and they are yielded in Kruskal's order.
* A missing weight attribute counts 1. A NaN weight raises ``ValueError`` when the edges are
  iterated, or with ``ignore_nan=True`` the edge is left out, as NetworkX documents.
* ``algorithm="prim"`` or ``"boruvka"`` choose among equal weights differently; the backend
  runs them only when the graph has one spanning forest of least (greatest) weight, which every
  algorithm then returns (see :func:`_prepare`), and otherwise says it cannot.

``can_run`` answers False (with the reason) for what the engine cannot compute exactly:
weights that are not real numbers (strings, ``Decimal``, ``Fraction``, ``complex``), integers
beyond int64, integers beyond 2**53 next to float weights, infinite weights, and ``prim`` or
``boruvka`` where the forest is not unique. NetworkX then falls back to its own implementation (automatic
dispatch, or ``nx.config.fallback_to_nx``); with ``backend="mst_service"`` it raises.
Directed graphs and unknown algorithms raise the errors NetworkX raises.

The backend's graph type wraps the NetworkX graph without copying it; the computation builds
its edge arrays when it runs and uses the GPU where there is one (``backend="auto"``).
"""

from __future__ import annotations

import inspect
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np

from .._graphs.graph import minimum_spanning_forest

BACKEND_NAME = "mst_service"

#: NetworkX's names of its algorithms, and the ones that resolve ties as this engine does
_ALGORITHMS = ("kruskal", "prim", "boruvka", "borůvka")
_TIE_EXACT = ("kruskal",)
_INT64 = (-(2**63), 2**63 - 1)
_EXACT_FLOAT_INT = 2**53


class NxGraph:
    """The backend's graph: a NetworkX graph, wrapped without a copy (``__networkx_backend__``)."""

    __networkx_backend__ = BACKEND_NAME

    def __init__(self, graph: Any) -> None:
        self.graph = graph

    def __repr__(self) -> str:
        return f"NxGraph({self.graph!r})"


def _unwrap(graph: Any) -> Any:
    return graph.graph if isinstance(graph, NxGraph) else graph


@dataclass
class _Edges:
    """The edge list of a graph as the engine takes it; the edge id is the position in ``edges``."""

    edges: list[tuple[Any, ...]]
    values: list[Any]
    src: np.ndarray[Any, Any]
    dst: np.ndarray[Any, Any]
    weight: np.ndarray[Any, Any]
    num_vertices: int
    #: the first edge with a NaN weight (raised when the edges are iterated), unless ignored
    nan_edge: tuple[Any, ...] | None
    #: the forest's edge ids, when already computed
    forest: np.ndarray[Any, Any] | None = None


def _is_nan(value: Any) -> bool:
    try:
        return math.isnan(value)
    except TypeError:
        return False


def _weight_array(values: list[Any]) -> np.ndarray[Any, Any] | str:
    """The weights as int64 or float64 when that is exact, else the reason it is not."""
    has_float, big_int = False, False
    for value in values:
        if isinstance(value, (bool, int, np.integer)):
            as_int = int(value)
            if not _INT64[0] <= as_int <= _INT64[1]:
                return f"the weight {as_int} does not fit in int64"
            big_int = big_int or abs(as_int) > _EXACT_FLOAT_INT
        elif isinstance(value, (float, np.floating)) and np.dtype(type(value)).itemsize <= 8:
            if math.isinf(value):
                return "a weight is infinite; the engine computes with finite weights only"
            has_float = True
        else:
            return f"the weight {value!r} ({type(value).__name__}) is not an int or float of at most 64 bits"
    if has_float and big_int:
        return "an integer weight beyond 2**53 next to float weights cannot be converted exactly"
    return np.array(values, dtype=np.float64 if has_float else np.int64)


def _edge_list(graph: Any, weight: Any, ignore_nan: bool) -> _Edges | str:
    """Edges in NetworkX's iteration order with their weights, or why the engine cannot take them."""
    multigraph = graph.is_multigraph()
    index = {node: i for i, node in enumerate(graph)}
    edges: list[tuple[Any, ...]] = []
    values: list[Any] = []
    nan_edge = None
    for edge in graph.edges(keys=True, data=True) if multigraph else graph.edges(data=True):
        value = edge[-1].get(weight, 1)
        if _is_nan(value):
            if ignore_nan:
                continue
            if nan_edge is None:
                nan_edge = edge
            value = 0  # never computed with: the edges raise before the forest is computed
        edges.append(edge)
        values.append(value)
    weights = _weight_array(values)
    if isinstance(weights, str):
        return weights
    src = np.fromiter((index[e[0]] for e in edges), dtype=np.int64, count=len(edges))
    dst = np.fromiter((index[e[1]] for e in edges), dtype=np.int64, count=len(edges))
    return _Edges(edges, values, src, dst, weights, len(index), nan_edge)


def _forest_ids(prepared: _Edges, minimum: bool, reverse_ties: bool = False) -> np.ndarray[Any, Any]:
    """Edge ids of the forest under ``(weight, edge_id)`` (``(-weight, edge_id)`` for the maximum);
    with ``reverse_ties`` under ``(weight, -edge_id)``, computed on the reversed edge list."""
    src, dst, weight = prepared.src, prepared.dst, prepared.weight
    if reverse_ties:
        src, dst, weight = src[::-1].copy(), dst[::-1].copy(), weight[::-1].copy()
    forest = minimum_spanning_forest(
        src, dst, weight, num_vertices=prepared.num_vertices, objective="min" if minimum else "max"
    )
    if reverse_ties:
        return np.sort(len(prepared.edges) - 1 - forest.edge_ids)
    return forest.edge_ids


# ---------------------------------------------------------------------------------------------
# can_run hands its edge list to the call that follows it (same thread, no user code between)

_last = threading.local()


def _prepare(graph: Any, weight: Any, ignore_nan: bool, algorithm: str, minimum: bool) -> _Edges | str:
    """The edge list, and for prim and boruvka the forest, once it is known to be the only one.

    Kruskal under the ``(weight, edge_id)`` order and under ``(weight, -edge_id)`` pick the same
    forest exactly when the spanning forest is unique: were there another, some weight class
    would hold a cycle (after contracting the lighter edges), and the two orders then keep
    different edges of it (the greedy basis under an order and under its reverse coincide only
    in a matroid without circuits). Prim and Borůvka return that forest too.
    """
    prepared = _edge_list(graph, weight, ignore_nan)
    if isinstance(prepared, str) or algorithm in _TIE_EXACT or prepared.nan_edge is not None:
        return prepared
    first = _forest_ids(prepared, minimum)
    if not np.array_equal(first, _forest_ids(prepared, minimum, reverse_ties=True)):
        return (
            f"algorithm={algorithm!r} resolves ties among equal weights its own way, and this graph "
            "has more than one spanning forest of that weight; the backend runs it only when the "
            "forest is unique"
        )
    prepared.forest = first
    return prepared


def _take(graph: Any, weight: Any, ignore_nan: bool, algorithm: str, minimum: bool) -> _Edges:
    key = (id(graph), weight, ignore_nan, algorithm, minimum)
    stored = getattr(_last, "prepared", None)
    _last.prepared = None
    if stored is not None and stored[0] == key and stored[1] is graph:
        prepared: _Edges = stored[2]
        return prepared
    found = _prepare(graph, weight, ignore_nan, algorithm, minimum)
    if isinstance(found, str):
        raise NotImplementedError(f"{BACKEND_NAME} cannot compute this: {found}.")
    return found


def _check(graph: Any, algorithm: str) -> None:
    """The errors NetworkX raises before it looks at any edge."""
    if graph.is_directed():
        raise nx.NetworkXNotImplemented("not implemented for directed type")
    if algorithm not in _ALGORITHMS:
        raise ValueError(f"{algorithm} is not a valid choice for an algorithm.")
    if algorithm in ("boruvka", "borůvka") and graph.is_multigraph():
        raise nx.NetworkXNotImplemented("not implemented for multigraph type")


# ---------------------------------------------------------------------------------------------
# the functions


def _spanning_edges(
    G: Any, algorithm: str, weight: Any, keys: bool, data: bool, ignore_nan: bool, minimum: bool
) -> Iterator[tuple[Any, ...]]:
    graph = _unwrap(G)
    _check(graph, algorithm)
    prepared = _take(graph, weight, ignore_nan, algorithm, minimum)
    return _yield_forest(graph, prepared, keys, data, minimum)


def _yield_forest(
    graph: Any, prepared: _Edges, keys: bool, data: bool, minimum: bool
) -> Iterator[tuple[Any, ...]]:
    """The forest's edges in Kruskal's order; a NaN weight raises here, as NetworkX's generator does."""
    if prepared.nan_edge is not None:
        raise ValueError(f"NaN found as an edge weight. Edge {prepared.nan_edge}")
    if not prepared.edges:
        return
    forest = prepared.forest if prepared.forest is not None else _forest_ids(prepared, minimum)
    # Kruskal's order: a stable sort of the (ascending) edge ids by weight; reverse keeps it stable
    chosen = sorted(forest.tolist(), key=prepared.values.__getitem__, reverse=not minimum)
    multigraph = graph.is_multigraph()
    for edge_id in chosen:
        edge = prepared.edges[edge_id]
        u, v, d = edge[0], edge[1], edge[-1]
        if multigraph and keys:
            yield (u, v, edge[2], d) if data else (u, v, edge[2])
        else:
            yield (u, v, d) if data else (u, v)


def minimum_spanning_edges(
    G: Any,
    algorithm: str = "kruskal",
    weight: Any = "weight",
    keys: bool = True,
    data: bool = True,
    ignore_nan: bool = False,
) -> Iterator[tuple[Any, ...]]:
    """:func:`networkx.minimum_spanning_edges` on the engine."""
    return _spanning_edges(G, algorithm, weight, keys, data, ignore_nan, minimum=True)


def maximum_spanning_edges(
    G: Any,
    algorithm: str = "kruskal",
    weight: Any = "weight",
    keys: bool = True,
    data: bool = True,
    ignore_nan: bool = False,
) -> Iterator[tuple[Any, ...]]:
    """:func:`networkx.maximum_spanning_edges` on the engine."""
    return _spanning_edges(G, algorithm, weight, keys, data, ignore_nan, minimum=False)


def _tree(G: Any, weight: Any, algorithm: str, ignore_nan: bool, minimum: bool) -> Any:
    graph = _unwrap(G)
    edges = _spanning_edges(graph, algorithm, weight, True, True, ignore_nan, minimum)
    tree = graph.__class__()
    tree.graph.update(graph.graph)
    tree.add_nodes_from(graph.nodes.items())
    tree.add_edges_from(edges)
    return tree


def minimum_spanning_tree(
    G: Any, weight: Any = "weight", algorithm: str = "kruskal", ignore_nan: bool = False
) -> Any:
    """:func:`networkx.minimum_spanning_tree` on the engine (a graph of ``G``'s class)."""
    return _tree(G, weight, algorithm, ignore_nan, minimum=True)


def maximum_spanning_tree(
    G: Any, weight: Any = "weight", algorithm: str = "kruskal", ignore_nan: bool = False
) -> Any:
    """:func:`networkx.maximum_spanning_tree` on the engine (a graph of ``G``'s class)."""
    return _tree(G, weight, algorithm, ignore_nan, minimum=False)


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "maximum_spanning_edges": maximum_spanning_edges,
    "maximum_spanning_tree": maximum_spanning_tree,
    "minimum_spanning_edges": minimum_spanning_edges,
    "minimum_spanning_tree": minimum_spanning_tree,
}


def can_run(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool | str:
    """True when the engine gives NetworkX's answer for this call, else the reason it cannot."""
    function = _FUNCTIONS.get(name)
    if function is None:
        return f"{BACKEND_NAME} does not implement {name}"
    try:
        bound = inspect.signature(function).bind(*args, **kwargs)
    except TypeError as exc:
        return f"the arguments do not fit {name}: {exc}"
    bound.apply_defaults()
    params = bound.arguments
    graph = _unwrap(params["G"])
    if not isinstance(graph, nx.Graph):
        return "the graph is not a NetworkX graph"
    algorithm = params["algorithm"]
    if graph.is_directed() or algorithm not in _ALGORITHMS:
        return True  # the call raises NetworkX's error
    if algorithm in ("boruvka", "borůvka") and graph.is_multigraph():
        return True
    minimum = name.startswith("minimum")
    prepared = _prepare(graph, params["weight"], bool(params["ignore_nan"]), algorithm, minimum)
    if isinstance(prepared, str):
        return prepared
    key = (id(graph), params["weight"], bool(params["ignore_nan"]), algorithm, minimum)
    _last.prepared = (key, graph, prepared)
    return True


def should_run(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Always: a backend asked for (by name or priority) runs whenever it can."""
    return True


def convert_from_nx(graph: Any, *args: Any, **kwargs: Any) -> NxGraph:
    """Wrap a NetworkX graph (no copy; the computation reads the weight it is asked for)."""
    return NxGraph(graph)


def convert_to_nx(obj: Any, *, name: str | None = None) -> Any:
    """Results are NetworkX objects already; a wrapped graph gives back the graph it wraps."""
    return _unwrap(obj)


class BackendInterface:
    """What the ``networkx.backends`` entry point names: the functions and the converters."""

    convert_from_nx = staticmethod(convert_from_nx)
    convert_to_nx = staticmethod(convert_to_nx)
    can_run = staticmethod(can_run)
    should_run = staticmethod(should_run)
    minimum_spanning_edges = staticmethod(minimum_spanning_edges)
    maximum_spanning_edges = staticmethod(maximum_spanning_edges)
    minimum_spanning_tree = staticmethod(minimum_spanning_tree)
    maximum_spanning_tree = staticmethod(maximum_spanning_tree)


_DOCS = (
    "Exact on this engine (GPU where there is one, else NumPy). Equal weights resolve in edge "
    "iteration order, as NetworkX's Kruskal does; prim and boruvka run here only when the forest "
    "is unique. Weights: int or float (at most 64 bits), finite."
)


def get_info() -> dict[str, Any]:
    """What the ``networkx.backend_info`` entry point returns."""
    return {
        "backend_name": BACKEND_NAME,
        "project": "mst-service",
        "package": "gpu_core",
        "short_summary": "Minimum and maximum spanning forests with ECL-MST on the GPU (CPU fallback).",
        "functions": {name: {"additional_docs": _DOCS} for name in _FUNCTIONS},
        "default_config": {},
    }
