"""Where a worker (re)loads a stored dataset from: its spool file, read as its record says."""

from __future__ import annotations

from dataclasses import dataclass

from ...storage.store import Store
from .protocol import shard_format


@dataclass(frozen=True)
class GraphSource:
    """A stored dataset's spool file and how to read it."""

    key: str
    path: str
    num_vertices: int | None
    #: the weights that replaced the uploaded ones (``.npy``), if any
    weights_path: str | None = None
    #: ``npz`` for a graph, ``points.npz`` for a point set, ``npz[lo:hi]`` for one shard
    fmt: str = "npz"
    #: the weights version the file holds (jobs on it record it)
    weights_version: int = 0


def shard_key(graph_id: str, index: int) -> str:
    """The key of shard ``index`` of a sharded graph (what its worker holds it under)."""
    return f"{graph_id}.s{index}"


def parse_shard_key(key: str) -> tuple[str, int] | None:
    """``(graph id, shard index)`` of a :func:`shard_key`; None for a plain dataset id."""
    graph_id, dot, index = key.rpartition(".s")
    if not dot or not index.isdigit():
        return None
    return graph_id, int(index)


def source_of(store: Store, key: str) -> GraphSource | None:
    """Where to load the stored dataset (or shard) ``key`` from; None when it was deleted."""
    import gpu_core

    shard = parse_shard_key(key)
    graph_id = key if shard is None else shard[0]
    record = store.get_graph(graph_id)
    if record is None or (shard is not None and shard[1] >= record.shards):
        return None
    fmt = "points.npz" if record.kind == "points" else "npz"
    if shard is not None:
        fmt = shard_format(*gpu_core.edge_ranges(record.num_edges, record.shards)[shard[1]])
    weights = store.weights_path(graph_id) if record.weights_version else None
    return GraphSource(
        key,
        str(store.graph_path(graph_id)),
        record.num_vertices,
        None if weights is None or not weights.exists() else str(weights),
        fmt=fmt,
        weights_version=record.weights_version,
    )
