"""The NumPy backend: ECL-MST's Borůvka rounds over an edge worklist, vectorized.

It mirrors the GPU backend step for step so both give the same edge ids:

* edges are ranked once by ``(weight, edge_id)`` when the graph is built; the
  rounds compare ranks only, whatever the weight dtype;
* the worklist holds each undirected edge once, self-loops dropped;
* each round replaces the endpoints by their representatives (ECL-MST's
  implicit path compression), drops edges inside one set, records the lightest
  edge of every set (a ``minimum.at`` scatter instead of ``atomicMin``), keeps
  the recorded edges and links their sets;
* with an average degree of 4 or more, a first phase runs on the lightest
  edges only and a second one on the rest after filtering out cycles.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ._forest import SpanningForest, filter_threshold, make_forest, weight_bound
from ._validate import EdgeList

IntArray = np.ndarray[Any, np.dtype[np.signedinteger[Any]]]


class CpuGraph:
    """An edge list prepared for the NumPy backend (edges in rank order, loops dropped)."""

    backend = "cpu"

    def __init__(self, edges: EdgeList, weight: Any = None) -> None:
        self.num_vertices = edges.num_vertices
        self.num_edges = int(edges.weight.shape[0])
        # A copy when it is the caller's own array, which the caller may reuse.
        self.weight = edges.weight.copy() if edges.weight is weight else np.asarray(edges.weight)
        index = np.int32 if max(self.num_vertices, self.num_edges) < 2**31 else np.int64
        # A stable sort orders equal weights by position, i.e. by edge id: the tie rule.
        order = np.argsort(self.weight, kind="stable").astype(index, copy=False)
        self.weight_bound = weight_bound(self.weight, order)
        src = np.asarray(edges.src)[order]
        dst = np.asarray(edges.dst)[order]
        loop_free = src != dst
        #: edge id of the k-th lightest non-loop edge
        self.rank_to_id: IntArray = order[loop_free]
        self.u: IntArray = src[loop_free].astype(index, copy=False)
        self.v: IntArray = dst[loop_free].astype(index, copy=False)

    @property
    def nbytes(self) -> int:
        return int(self.weight.nbytes + self.rank_to_id.nbytes + self.u.nbytes + self.v.nbytes)

    def prepare(self) -> None:
        """Nothing to do: the rank order was built with the graph."""

    def minimum_spanning_forest(self) -> SpanningForest:
        start = time.perf_counter()
        n = self.num_vertices
        k = int(self.u.shape[0])
        ranks = np.arange(k, dtype=self.u.dtype)
        rep = np.arange(n, dtype=self.u.dtype)  # representative of every vertex
        chosen: list[IntArray] = []
        threshold = filter_threshold(n, k)
        _boruvka(self.u[:threshold], self.v[:threshold], ranks[:threshold], rep, chosen)
        if threshold < k:
            # Phase 2: the heavier edges, endpoints replaced by their sets; cycles filtered out.
            _boruvka(rep[self.u[threshold:]], rep[self.v[threshold:]], ranks[threshold:], rep, chosen)
        forest_ranks = np.concatenate(chosen) if chosen else np.empty(0, dtype=self.u.dtype)
        edge_ids = np.sort(self.rank_to_id[forest_ranks]).astype(np.int64)
        elapsed_ms = (time.perf_counter() - start) * 1e3
        return make_forest(edge_ids, self.weight[edge_ids], n, self.backend, elapsed_ms, self.weight_bound)


def _boruvka(cu: IntArray, cv: IntArray, rank: IntArray, rep: IntArray, chosen: list[IntArray]) -> None:
    """Run Borůvka rounds on a worklist until it is empty; updates ``rep`` in place."""
    n = rep.shape[0]
    none = np.iinfo(rank.dtype).max
    lightest = np.empty(n, dtype=rank.dtype)
    while True:
        keep = cu != cv  # edges inside one set would close a cycle
        cu, cv, rank = cu[keep], cv[keep], rank[keep]
        if cu.shape[0] == 0:
            return
        lightest.fill(none)
        np.minimum.at(lightest, cu, rank)
        np.minimum.at(lightest, cv, rank)
        by_u = lightest[cu] == rank
        by_v = lightest[cv] == rank
        picked = by_u | by_v
        chosen.append(rank[picked])
        # Every set links to the set across its lightest edge. Unique ranks make the
        # picked edges a forest of sets whose only 2-cycles are edges picked from
        # both sides; there the smaller id stays the root.
        link = np.arange(n, dtype=rank.dtype)
        link[cu[by_u]] = cv[by_u]
        link[cv[by_v]] = cu[by_v]
        both = by_u & by_v
        link[np.minimum(cu[both], cv[both])] = np.minimum(cu[both], cv[both])
        while True:  # pointer jumping until every set points at its root
            jumped = link[link]
            if np.array_equal(jumped, link):
                break
            link = jumped
        rep[:] = link[rep]
        cu, cv = link[cu], link[cv]
