"""Sharded graphs on a worker: sizing an upload before it is sharded, and a job's last step.

A shard is loaded like a graph (format ``npz[lo:hi]``, see :mod:`.graphs`). Before that,
:func:`describe` sizes the upload (writing a text format as npz), so its handle can choose how
many shards fit; after every shard's forest is written, :func:`merge` runs the job's task on
the union of the shard forests, whose answer is the whole graph's (see
:mod:`service.runtime.sharding`).
"""

from __future__ import annotations

from typing import Any

from ...errors import InsufficientMemoryError, PayloadTooLargeError, WorkerInternalError
from ...limits import check_vertices
from ...storage import npzio
from .graphs import parse, run_task, write_canonical
from .protocol import Reply
from .state import Worker


def describe(worker: Worker, path: str, fmt: str, canonical: str | None, max_shards: int) -> dict[str, Any]:
    """Sizes of an upload to be sharded, without building it; with ``canonical``, written there as npz.

    Returns ``num_vertices``, ``num_edges``, ``weight_dtype``, this worker's ``capacity`` and,
    for ``k = 1..max_shards`` shards, the peak bytes of building the largest shard
    (``shard_peak[k-1]``) and of the union of ``k`` shard forests (``union_peak[k-1]``).
    """
    import numpy as np

    import gpu_core

    edges = parse(worker, path, fmt)
    m = int(edges.weight.shape[0]) if edges.weight.shape[:1] else 0
    if m > worker.config.max_edges:
        raise PayloadTooLargeError(
            f"the graph has {m} edges, more than this service's limit of "
            f"{worker.config.max_edges} (MST_MAX_EDGES).",
            field="body",
        )
    n = edges.num_vertices
    check_vertices(edges.src, edges.dst, n, worker.config.max_vertices)
    if n is None:
        ids = [a for a in (edges.src, edges.dst) if a.dtype.kind in "iu" and a.size]
        n = max((int(a.max()) for a in ids), default=-1) + 1
    weight = edges.weight.dtype
    dtype = weight if weight in gpu_core.WEIGHT_DTYPES else np.dtype(np.float64)
    if canonical is not None:
        write_canonical(edges, n, canonical)

    def peak(edge_count: int) -> int:
        return gpu_core.estimate_device_bytes(n, edge_count, dtype, backend=worker.backend).peak

    shards = range(1, max(max_shards, 1) + 1)
    return {
        "num_vertices": n,
        "num_edges": m,
        "weight_dtype": str(weight),
        "capacity": worker.memory()[1],
        "shard_peak": [peak(-(-m // k)) for k in shards],
        "union_peak": [peak(min(m, k * max(n - 1, 0))) for k in shards],
    }


def merge(
    worker: Worker,
    path: str,
    num_vertices: int,
    parts: list[tuple[str, int]],
    task: str,
    params: dict[str, Any],
    result_path: str,
) -> Reply:
    """Finish a job on a sharded graph: the task on the union of its shards' forests.

    ``parts``: each shard's forest file (``edge_ids`` local to the shard, ``weights``) and the
    shard's first global edge id; the endpoints come from the graph's spool npz at ``path``.
    By the cycle property the union answers every task as the whole graph would (see
    :mod:`gpu_core._shards`); an ``mst`` result carries global edge ids.
    """
    import numpy as np

    import gpu_core

    edges = parse(worker, path, "npz")
    forests = []
    for forest_path, lo in parts:
        arrays = npzio.read_npz(forest_path, ("edge_ids", "weights"))
        if arrays is None:
            raise WorkerInternalError(f"the shard forest {forest_path} cannot be read.")
        ids = np.asarray(arrays["edge_ids"], dtype=np.int64) + lo
        forests.append(gpu_core.ShardForest(ids, edges.src[ids], edges.dst[ids], arrays["weights"]))
    del edges
    count = sum(int(f.edge_ids.shape[0]) for f in forests)
    dtype = forests[0].weights.dtype if forests else np.dtype(np.float64)
    needed = gpu_core.estimate_device_bytes(num_vertices, count, dtype, backend=worker.backend).peak
    free, total = worker.memory()
    if needed > free:
        raise InsufficientMemoryError(
            f"the union of the shard forests ({count} edges) needs about {needed} bytes to build; "
            f"worker {worker.config.index} has {free} of {total} bytes free.",
            needed=needed,
            available=free,
            capacity=total,
        )
    graph, ids = gpu_core.union_graph(forests, num_vertices, backend=worker.backend)
    del forests
    return run_task(worker, graph, task, params, result_path, edge_ids=ids)
