"""The graph half of the warm-up: every kernel and CuPy specialization a graph request can meet."""

from __future__ import annotations

import contextlib
from typing import Any

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


def warm_up_graphs(backend: Backend = "auto") -> str:
    """Compile every kernel a graph request can need (the graph half of :func:`gpu_core.warm_up`).

    Builds, prepares and computes a small graph for every vertex-id dtype of :data:`ID_DTYPES`
    and every weight dtype of :data:`WEIGHT_DTYPES`, from host arrays as an upload hands them
    over (validation on the device included), and takes the validation's error paths (a vertex
    id out of range, a non-finite weight) and the empty and loop-only graphs once. On the GPU,
    CuPy compiles an elementwise or reduction kernel for each dtype it first meets: without
    this, the first upload of int32 ids took 3.6 s. Then every query of a resident graph runs
    once per weight dtype: minimum and maximum forests, a what-if, cluster labels, and weight
    updates. Returns the backend that was warmed up.
    """
    chosen = resolve_backend(backend)
    src, dst, n = _warm_up_graph()
    weights = (np.arange(src.size) * 7919) % 101 - 50  # ties and negative weights
    for id_dtype in ID_DTYPES:
        for weight_dtype in WEIGHT_DTYPES:
            graph = Graph(
                src.astype(id_dtype), dst.astype(id_dtype), weights.astype(weight_dtype), n, backend=chosen
            )
            graph.prepare()
            graph.minimum_spanning_forest()
            graph.minimum_spanning_forest()  # the prepared (replayed) run
        bad_ids = [src.astype(id_dtype)]  # with num_vertices=3: ids out of range
        if id_dtype == np.uint64:
            bad_ids.append(np.full(src.size, 2**63, dtype=np.uint64))  # beyond int64
        for bad in bad_ids:
            with contextlib.suppress(GraphValidationError):
                Graph(bad, dst.astype(id_dtype), weights, 3, backend=chosen)
    if chosen == "gpu":
        # CuPy specializes some reductions and scans (validation's all() and any(), boolean
        # indexing, nonzero) by the size of their input: a graph of each power-of-two size
        # class, and the validation's error paths at that size.
        for size in WARM_UP_SIZES:
            nv = size // 2 + 2
            s, d = np.arange(size) % nv, (np.arange(size) * 7 + 1) % nv
            for weight_dtype in WEIGHT_DTYPES:
                w = (s % 13).astype(weight_dtype)
                graph = Graph(s, d, w, nv, backend=chosen)
                graph.prepare()
                graph.minimum_spanning_forest()
                _warm_up_queries(graph, (weight_dtype.type,))  # re-ranks, labels: also sized by CuPy
                if weight_dtype.kind == "f":
                    w[-1] = np.nan
                    with contextlib.suppress(GraphValidationError):
                        Graph(s, d, w, nv, backend=chosen)
            with contextlib.suppress(GraphValidationError):
                Graph(s, d, s, 1, backend=chosen)  # vertex ids out of range
    for weight_dtype in WEIGHT_DTYPES:
        if weight_dtype.kind == "f":
            w = weights.astype(weight_dtype)
            w[3] = np.nan
            with contextlib.suppress(GraphValidationError):
                Graph(src, dst, w, n, backend=chosen)
        for s, d in ((src[:0], dst[:0]), (src[-2:], dst[-2:])):  # no edges; self-loops only
            empty = Graph(s, d, weights[: s.size].astype(weight_dtype), n, backend=chosen)
            empty.prepare()
            empty.minimum_spanning_forest()
    q_src = np.array([0, 1, 2, 0, 3], dtype=np.int64)
    q_dst = np.array([1, 2, 0, 3, 3], dtype=np.int64)
    dtypes = (np.int32, np.int64, np.float32, np.float64)
    for dtype in dtypes:
        graph = Graph(q_src, q_dst, np.array([3, 1, 2, 5, 4], dtype=dtype), 6, backend=chosen)
        graph.minimum_spanning_forest()
        _warm_up_queries(graph, dtypes)
    return chosen


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
