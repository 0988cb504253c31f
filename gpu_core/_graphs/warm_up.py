"""The graph half of the warm-up: every kernel and CuPy specialization a graph request can meet."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal

import numpy as np

from .._backend.resolve import Backend, resolve_backend
from ..errors import GraphValidationError
from .graph import Graph
from .validate import WEIGHT_DTYPES

#: vertex-id dtypes an upload can carry (npz keeps the client's integer dtype; readers give int64)
ID_DTYPES: tuple[np.dtype[Any], ...] = tuple(
    np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
)


#: edge counts of the GPU warm-up's graphs: 2^j and 2^j + 1 up to 2^22 (n = m / 2 + 2 vertices)
WARM_UP_SIZES: tuple[int, ...] = tuple(sorted({2**j + d for j in range(23) for d in (0, 1)}))

#: a named piece of the warm-up (see :func:`graph_parts`)
Part = tuple[str, Callable[[], object]]


def _warm_up_graph() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], int]:
    """Edges that take every branch of a build and a computation: a hub row of more than 256
    slots (the chunked rows), an average degree over 4 (the filter's second phase), parallel
    edges, self-loops and an isolated vertex."""
    n = 40
    hub = [(0, 1 + i % 30) for i in range(300)]
    ring = [(i, i + 1) for i in range(1, 30)]
    loops = [(5, 5), (7, 7)]
    edges = np.array(hub + ring + loops, dtype=np.int64)
    return edges[:, 0], edges[:, 1], n


def warm_up_graphs(backend: Backend = "auto", sizes: Sequence[int] = WARM_UP_SIZES) -> Literal["gpu", "cpu"]:
    """Compile every kernel a graph request can need (the graph half of :func:`gpu_core.warm_up`):
    every part of :func:`graph_parts`, in order. Returns the backend that was warmed up."""
    chosen = resolve_backend(backend)
    for _, part in graph_parts(chosen, sizes):
        part()
    return chosen


def graph_parts(backend: Literal["gpu", "cpu"], sizes: Sequence[int] = WARM_UP_SIZES) -> list[Part]:
    """The graph warm-up, in named parts (each one independent of the others, so any subset can run,
    in this order: ``gpu_core._warm_up.warm_start`` runs those that loaded a kernel).

    Builds, prepares and computes a small graph for every vertex-id dtype of :data:`ID_DTYPES`
    and every weight dtype of :data:`WEIGHT_DTYPES`, from host arrays as an upload hands them
    over (validation on the device included), and takes the validation's error paths (a vertex
    id out of range, a non-finite weight) and the empty and loop-only graphs once. On the GPU,
    CuPy compiles an elementwise or reduction kernel for each dtype it first meets: without
    this, the first upload of each dtype would wait for those compilations. Then every query of a
    resident graph runs once per weight dtype: minimum and maximum forests, a what-if, cluster
    labels, and weight updates. On the GPU all of that (bar the vertex-id dtypes) again on a graph
    of each edge count of ``sizes``: CuPy specializes some reductions and scans (validation's all()
    and any(), boolean indexing, nonzero) by the size of their input.
    """
    parts: list[Part] = []
    for id_dtype in ID_DTYPES:
        for weight_dtype in WEIGHT_DTYPES:
            parts.append(
                (
                    f"graph ids {id_dtype} weights {weight_dtype}",
                    partial(_upload, backend, id_dtype, weight_dtype),
                )
            )
        parts.append((f"graph ids {id_dtype} out of range", partial(_out_of_range, backend, id_dtype)))
    for weight_dtype in WEIGHT_DTYPES:
        parts.append(
            (f"graph weights {weight_dtype} edge cases", partial(_edge_cases, backend, weight_dtype))
        )
    parts.append(("graph queries", partial(_queries, backend)))
    if backend == "gpu":
        for size in sizes:
            for weight_dtype in WEIGHT_DTYPES:
                parts.append(
                    (f"graph m={size} weights {weight_dtype}", partial(_sized, backend, size, weight_dtype))
                )
            parts.append((f"graph m={size} out of range", partial(_sized_out_of_range, backend, size)))
    return parts


def _weights(size: int) -> np.ndarray[Any, Any]:
    return (np.arange(size) * 7919) % 101 - 50  # ties and negative weights


def _upload(backend: Literal["gpu", "cpu"], id_dtype: np.dtype[Any], weight_dtype: np.dtype[Any]) -> None:
    """A graph of these dtypes from host arrays, built, prepared and computed twice (the replay)."""
    src, dst, n = _warm_up_graph()
    weights = _weights(src.size).astype(weight_dtype)
    graph = Graph(src.astype(id_dtype), dst.astype(id_dtype), weights, n, backend=backend)
    graph.prepare()
    graph.minimum_spanning_forest()
    graph.minimum_spanning_forest()  # the prepared (replayed) run


def _out_of_range(backend: Literal["gpu", "cpu"], id_dtype: np.dtype[Any]) -> None:
    """Vertex ids of this dtype out of range (and beyond int64 for uint64)."""
    src, dst, _ = _warm_up_graph()
    bad_ids = [src.astype(id_dtype)]  # with num_vertices=3: ids out of range
    if id_dtype == np.uint64:
        bad_ids.append(np.full(src.size, 2**63, dtype=np.uint64))  # beyond int64
    for bad in bad_ids:
        with contextlib.suppress(GraphValidationError):
            Graph(bad, dst.astype(id_dtype), _weights(src.size), 3, backend=backend)


def _edge_cases(backend: Literal["gpu", "cpu"], weight_dtype: np.dtype[Any]) -> None:
    """A non-finite weight, graphs of no edge and of self-loops only."""
    src, dst, n = _warm_up_graph()
    weights = _weights(src.size)
    if weight_dtype.kind == "f":
        w = weights.astype(weight_dtype)
        w[3] = np.nan
        with contextlib.suppress(GraphValidationError):
            Graph(src, dst, w, n, backend=backend)
    for s, d in ((src[:0], dst[:0]), (src[-2:], dst[-2:])):  # no edges; self-loops only
        empty = Graph(s, d, weights[: s.size].astype(weight_dtype), n, backend=backend)
        empty.prepare()
        empty.minimum_spanning_forest()


def _queries(backend: Literal["gpu", "cpu"]) -> None:
    """Every query of a resident graph of each weight dtype, with weight updates of every dtype."""
    q_src = np.array([0, 1, 2, 0, 3], dtype=np.int64)
    q_dst = np.array([1, 2, 0, 3, 3], dtype=np.int64)
    dtypes = (np.int32, np.int64, np.float32, np.float64)
    for dtype in dtypes:
        graph = Graph(q_src, q_dst, np.array([3, 1, 2, 5, 4], dtype=dtype), 6, backend=backend)
        graph.minimum_spanning_forest()
        _warm_up_queries(graph, dtypes)


def _sized_edges(size: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], int]:
    nv = size // 2 + 2
    return np.arange(size) % nv, (np.arange(size) * 7 + 1) % nv, nv


def _sized(backend: Literal["gpu", "cpu"], size: int, weight_dtype: np.dtype[Any]) -> None:
    """A graph of ``size`` edges built, prepared, computed and queried, and a non-finite weight."""
    s, d, nv = _sized_edges(size)
    w = (s % 13).astype(weight_dtype)
    graph = Graph(s, d, w, nv, backend=backend)
    graph.prepare()
    graph.minimum_spanning_forest()
    _warm_up_queries(graph, (weight_dtype.type,))  # re-ranks, labels: also sized by CuPy
    if weight_dtype.kind == "f":
        w[-1] = np.nan
        with contextlib.suppress(GraphValidationError):
            Graph(s, d, w, nv, backend=backend)


def _sized_out_of_range(backend: Literal["gpu", "cpu"], size: int) -> None:
    s, d, _ = _sized_edges(size)
    with contextlib.suppress(GraphValidationError):
        Graph(s, d, s, 1, backend=backend)  # vertex ids out of range


def _warm_up_queries(graph: Graph, dtypes: tuple[type[Any], ...]) -> None:
    """Every query of a resident graph once (works for a graph of any size)."""
    forest = graph.maximum_spanning_forest()
    graph.minimum_spanning_forest(exclude=np.array([0]))
    graph.component_labels()
    graph.cluster_labels(k=min(forest.num_components + 1, graph.num_vertices))
    graph.cluster_labels(threshold=2)
    for dtype in dtypes:  # updates arrive in any dtype and are cast exactly where they can be
        graph.update_weights(np.array([0]), np.array([3], dtype=dtype))
    graph.set_weights(graph.weights()[::-1].copy())
    graph.minimum_spanning_forest()
