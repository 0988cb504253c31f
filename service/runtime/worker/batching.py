"""One-shot computations batched into one engine run: the disjoint union of small graphs.

Exact by construction: graph ``k`` of a batch becomes vertices ``voff[k] .. voff[k] + n_k - 1``
and edges ``eoff[k] .. eoff[k] + m_k - 1`` of one union graph. No edge joins two members, so
the union's minimum spanning forest is the union of the members' forests; and within a member
the tie order ``(weight, edge id)`` is the member's own order shifted by ``eoff[k]``, so each
member gets exactly the forest (edge ids, weights, components, total weight) a run of its own
gives. The worker (:func:`service.runtime.worker.oneshots.batched`) batches one-shot requests
that wait together in its pipe, of one weight dtype, up to ``MST_ONESHOT_BATCH_EDGES`` edges.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import gpu_core


def union_arrays(members: list[tuple[Any, Any, Any, int]]) -> tuple[Any, Any, Any, int, list[int]]:
    """(src, dst, weight, num_vertices) of the disjoint union of ``members`` (each ``src, dst,
    weight, n``, one weight dtype, every vertex id in ``[0, n)``: see :func:`fits_union`), and the
    first edge id of each member plus the total."""
    n_total = sum(n for *_, n in members)
    id_dtype = np.dtype(np.int32 if n_total < 2**31 else np.int64)
    src_parts, dst_parts, edge_offsets = [], [], [0]
    vertex_offset = 0
    for src, dst, weight, n in members:
        src_parts.append(np.add(src, vertex_offset, dtype=id_dtype, casting="unsafe"))
        dst_parts.append(np.add(dst, vertex_offset, dtype=id_dtype, casting="unsafe"))
        edge_offsets.append(edge_offsets[-1] + int(np.shape(weight)[0]))
        vertex_offset += n
    weight = np.concatenate([np.asarray(w) for *_, w, _ in members])
    return np.concatenate(src_parts), np.concatenate(dst_parts), weight, n_total, edge_offsets


def default_vertices(src: Any, dst: Any) -> int | None:
    """The engine's default vertex count, ``max id + 1`` (0 without edges); None for non-integer ids."""
    ids = [np.asarray(a) for a in (src, dst)]
    if any(a.dtype.kind not in "iu" for a in ids):
        return None
    return max((int(a.max()) for a in ids if a.size), default=-1) + 1


def fits_union(src: Any, dst: Any, weight: Any, n: int | None) -> bool:
    """Whether a parsed graph can join a union: integer vertex ids all in ``[0, n)``, a 1-d weight
    array. (Anything else runs alone, where the engine names what is wrong.)"""
    if n is None or np.ndim(weight) != 1:
        return False
    for ids in (np.asarray(src), np.asarray(dst)):
        if ids.dtype.kind not in "iu" or ids.ndim != 1 or ids.shape[0] != np.shape(weight)[0]:
            return False
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
            return False
    return True


def split_forest(
    forest: gpu_core.SpanningForest, sizes: list[int], edge_offsets: list[int], backend: str
) -> list[gpu_core.SpanningForest]:
    """Each member's forest from the union's: its edge ids (shifted back), weights, components."""
    bounds = np.searchsorted(forest.edge_ids, edge_offsets)
    out = []
    for k, n in enumerate(sizes):
        lo, hi = int(bounds[k]), int(bounds[k + 1])
        out.append(
            gpu_core.make_forest(
                forest.edge_ids[lo:hi] - edge_offsets[k], forest.weights[lo:hi], n, backend, forest.compute_ms
            )
        )
    return out


def batched_forests(members: list[tuple[Any, Any, Any, int]], backend: str) -> list[gpu_core.SpanningForest]:
    """The minimum spanning forest of each member, from one run on their disjoint union."""
    src, dst, weight, n_total, edge_offsets = union_arrays(members)
    graph = gpu_core.Graph(src, dst, weight, n_total, backend=backend)  # type: ignore[arg-type]
    forest = graph.minimum_spanning_forest()
    return split_forest(forest, [n for *_, n in members], edge_offsets, backend)
