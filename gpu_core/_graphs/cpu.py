"""The NumPy backend: ECL-MST's Borůvka rounds over an edge worklist, vectorized.

It mirrors the GPU backend step for step so both give the same edge ids:

* edges are ranked once per order (``(weight, edge_id)``, or ``(-weight, edge_id)`` for the
  maximum forest) when first needed; the rounds compare ranks only, whatever the weight dtype;
* the worklist holds each undirected edge once, self-loops dropped;
* each round replaces the endpoints by their representatives (ECL-MST's
  implicit path compression), drops edges inside one set, records the lightest
  edge of every set (a ``minimum.at`` scatter instead of ``atomicMin``), keeps
  the recorded edges and links their sets;
* with an average degree of 4 or more, a first phase runs on the lightest
  edges only and a second one on the rest after filtering out cycles.

Design: docs/design/engine.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .forest import filter_threshold, weight_bound
from .order import Objective, edge_order
from .validate import EdgeList

IntArray = np.ndarray[Any, np.dtype[np.signedinteger[Any]]]


@dataclass(frozen=True)
class _Ranked:
    """The loop-free edges in one order: their ids, and their endpoints, lightest first."""

    rank_to_id: IntArray
    u: IntArray
    v: IntArray


class CpuGraph:
    """An edge list prepared for the NumPy backend (endpoints by edge id, ranked per order)."""

    backend = "cpu"

    def __init__(self, edges: EdgeList, weight: Any = None) -> None:
        self.num_vertices = edges.num_vertices
        self.num_edges = int(edges.weight.shape[0])
        self._index = np.int32 if max(self.num_vertices, self.num_edges) < 2**31 else np.int64
        self.src: IntArray = np.asarray(edges.src).astype(self._index, copy=False)
        self.dst: IntArray = np.asarray(edges.dst).astype(self._index, copy=False)
        # A copy when it is the caller's own array, which the caller may reuse.
        self.weight = edges.weight.copy() if edges.weight is weight else np.asarray(edges.weight)
        self._ranked: dict[str, _Ranked] = {}
        self.weight_bound: int | None = None
        self._ranking("min")

    xp = np

    @property
    def nbytes(self) -> int:
        ranked = sum(r.rank_to_id.nbytes + r.u.nbytes + r.v.nbytes for r in self._ranked.values())
        return int(self.weight.nbytes + self.src.nbytes + self.dst.nbytes + ranked)

    def _ranking(self, objective: Objective) -> _Ranked:
        ranked = self._ranked.get(objective)
        if ranked is None:
            # A stable sort orders equal weights by position, i.e. by edge id: the tie rule.
            order = edge_order(np, self.weight, objective).astype(self._index, copy=False)
            if objective == "min":
                self.weight_bound = weight_bound(self.weight, order)
            src, dst = self.src[order], self.dst[order]
            loop_free = src != dst
            ranked = _Ranked(order[loop_free], src[loop_free], dst[loop_free])
            self._ranked[objective] = ranked
        return ranked

    def prepare(self, objective: Objective = "min") -> None:
        """Rank the edges in ``objective``'s order now (nothing else to prepare)."""
        self._ranking(objective)

    def set_weights(self, weight: Any, edge_ids: Any = None) -> None:
        """New weights (all, or those of ``edge_ids``), validated by the caller: ranked again."""
        if edge_ids is None:
            self.weight = np.array(weight, copy=True)
        else:
            self.weight[edge_ids] = weight
        self._ranked.clear()
        self._ranking("min")

    def to_host(self, *arrays: Any) -> list[np.ndarray[Any, Any]]:
        return list(arrays)

    def endpoints(self, edge_ids: Any) -> tuple[Any, Any]:
        return self.src[edge_ids], self.dst[edge_ids]

    def launch(self, objective: Objective = "min") -> bool:
        """Nothing runs ahead on the CPU: the forest is computed when asked for."""
        return False

    def compute(self, objective: Objective = "min", exclude: Any = None) -> tuple[Any, Any, float]:
        """(edge ids int64 ascending, their weights, milliseconds) of the forest."""
        start = time.perf_counter()
        ranked = self._ranking(objective)
        n = self.num_vertices
        u, v, rank_to_id = ranked.u, ranked.v, ranked.rank_to_id
        k = int(u.shape[0])
        ranks = np.arange(k, dtype=u.dtype)
        threshold = filter_threshold(n, k)
        if exclude is not None and exclude.size:
            gone = np.zeros(self.num_edges, dtype=bool)
            gone[exclude] = True
            keep = ~gone[rank_to_id]
            light = keep[:threshold]
            u_light, v_light, r_light = u[:threshold][light], v[:threshold][light], ranks[:threshold][light]
            heavy = keep[threshold:]
            u_heavy, v_heavy, r_heavy = u[threshold:][heavy], v[threshold:][heavy], ranks[threshold:][heavy]
        else:
            u_light, v_light, r_light = u[:threshold], v[:threshold], ranks[:threshold]
            u_heavy, v_heavy, r_heavy = u[threshold:], v[threshold:], ranks[threshold:]
        rep = np.arange(n, dtype=u.dtype)  # representative of every vertex
        chosen: list[IntArray] = []
        _boruvka(u_light, v_light, r_light, rep, chosen)
        if r_heavy.shape[0]:
            # Phase 2: the heavier edges, endpoints replaced by their sets; cycles filtered out.
            _boruvka(rep[u_heavy], rep[v_heavy], r_heavy, rep, chosen)
        forest_ranks = np.concatenate(chosen) if chosen else np.empty(0, dtype=u.dtype)
        edge_ids = np.sort(rank_to_id[forest_ranks]).astype(np.int64)
        elapsed_ms = (time.perf_counter() - start) * 1e3
        return edge_ids, self.weight[edge_ids], elapsed_ms


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
