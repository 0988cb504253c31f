"""One-shot computations (``POST /v1/mst``) on a worker: alone, or several as one disjoint union.

A one-shot's graph is read from its spool file, computed and dropped; its forest comes back in
the reply when it is small (``MST_ONESHOT_INLINE_BYTES``, :data:`~.protocol.INLINE`), else
through a result file. One-shots waiting together in the pipe are computed as one union graph
(:mod:`.batching`, ``MST_ONESHOT_BATCH_EDGES``), each answered with exactly its own forest.
"""

from __future__ import annotations

from typing import Any

from .batching import batched_forests, default_vertices, fits_union
from .graphs import checked_edges, forest_summary, read
from .protocol import BATCH_MEMBERS, INLINE
from .state import Worker, portable


def oneshot(
    worker: Worker, path: str, fmt: str, num_vertices: int | None, result_path: str
) -> dict[str, Any]:
    edges, graph = read(worker, path, fmt, num_vertices)
    del edges
    forest = graph.minimum_spanning_forest()
    del graph
    return oneshot_answer(worker, forest, result_path, 1)


def oneshot_answer(worker: Worker, forest: Any, result_path: str, members: int) -> dict[str, Any]:
    """A one-shot's reply: its forest's summary with the arrays (:data:`INLINE`) when they are
    small, else with its result file written at ``result_path``; ``members``: how many
    one-shots its engine run computed (:data:`BATCH_MEMBERS`)."""
    summary = forest_summary(forest)
    summary[BATCH_MEMBERS] = members
    if forest.edge_ids.nbytes + forest.weights.nbytes <= worker.config.oneshot_inline_bytes:
        summary[INLINE] = {"edge_ids": forest.edge_ids, "weights": forest.weights}
    else:  # read once and removed: not handed to the disk (see Worker.write_arrays)
        worker.write_result(forest, result_path, write_out=False)
    return summary


def batched(
    worker: Worker, requests: list[tuple[int, list[Any]]]
) -> tuple[list[tuple[int, bool, Any]], list[tuple[int, list[Any]]]]:
    """Several one-shot requests ``(req id, args)`` waiting together: the replies of those computed
    as one, and those that must run alone (see :func:`service.runtime.worker.ops.run_oneshots`).

    Those that parse within the limits and share the first one's weight dtype are computed as
    one disjoint-union graph (see :mod:`.batching`), in chunks of at most
    ``MST_ONESHOT_BATCH_EDGES`` edges; any other, and every member of a union that the engine
    refuses (then each gets its own answer, or its own error), runs alone.
    """
    limit = worker.config.oneshot_batch_edges

    replies: list[tuple[int, bool, Any]] = []
    alone: list[tuple[int, list[Any]]] = []
    chunk: list[tuple[int, list[Any], Any]] = []
    chunks = [chunk]
    dtype: Any = None
    edges_in_chunk = 0
    for req_id, args in requests:
        path, fmt, num_vertices, _ = args
        try:
            edges, n = checked_edges(worker, path, fmt, num_vertices)
        except Exception as exc:
            replies.append((req_id, False, portable(exc)))
            continue
        m = int(edges.weight.shape[0]) if edges.weight.shape[:1] else 0
        n = n if n is not None else default_vertices(edges.src, edges.dst)
        if n is None or not fits_union(edges.src, edges.dst, edges.weight, n) or m > limit:
            alone.append((req_id, args))
            continue
        dtype = edges.weight.dtype if dtype is None else dtype
        if edges.weight.dtype != dtype:
            alone.append((req_id, args))
            continue
        if chunk and edges_in_chunk + m > limit:
            chunk = []
            chunks.append(chunk)
            edges_in_chunk = 0
        chunk.append((req_id, args, (edges.src, edges.dst, edges.weight, n)))
        edges_in_chunk += m
    for members in chunks:
        if len(members) == 1:
            alone.append((members[0][0], members[0][1]))
            continue
        if not members:
            continue
        try:
            forests = batched_forests([graph for *_, graph in members], worker.backend)
        except Exception:  # one member is invalid, or no room: each on its own says why
            alone.extend((req_id, args) for req_id, args, _ in members)
            continue
        for (req_id, args, _), forest in zip(members, forests, strict=True):
            try:
                answer = oneshot_answer(worker, forest, args[3], len(members))
            except Exception as exc:
                replies.append((req_id, False, portable(exc)))
            else:
                replies.append((req_id, True, answer))
    return replies, alone
