"""What a stored dataset looks like to a client: its record, and where it is resident now.

A graph's or point set's answer (:class:`~service.models.GraphOut`,
:class:`~service.models.PointSetOut`) joins its record in the store with its residency on the
workers (``resident``, ``loading``, ``evicted``, ...); a sharded graph's with each shard's.
"""

from __future__ import annotations

from typing import Any

import gpu_core

from ..models import GraphOut, PointSetOut, Residency, ShardResidency, timestamp
from ..runtime.supervisor import Supervisor, shard_key
from ..storage.records import GraphRecord


def describe_points(supervisor: Supervisor, record: GraphRecord) -> PointSetOut:
    """A point set as ``/v1/points`` describes it."""
    return PointSetOut(
        id=record.id,
        created_at=timestamp(record.created_at),  # type: ignore[arg-type]
        num_points=record.num_vertices,
        dims=record.num_edges,
        dtype=record.weight_dtype,  # type: ignore[arg-type]
        source_format=record.source_format,
        payload_bytes=record.payload_bytes,
        residency=_residency(supervisor, record),
    )


def describe_graph(supervisor: Supervisor, record: GraphRecord) -> GraphOut:
    """A graph as ``/v1/graphs`` describes it."""
    return GraphOut(
        id=record.id,
        created_at=timestamp(record.created_at),  # type: ignore[arg-type]
        num_vertices=record.num_vertices,
        num_edges=record.num_edges,
        weight_dtype=record.weight_dtype,  # type: ignore[arg-type]
        source_format=record.source_format,
        payload_bytes=record.payload_bytes,
        weights_version=record.weights_version,
        residency=_residency(supervisor, record),
        shards=record.shards,
        shard_residency=_shard_residency(supervisor, record) if record.shards > 1 else None,
    )


def _shard_residency(supervisor: Supervisor, record: GraphRecord) -> list[ShardResidency]:
    ranges = gpu_core.edge_ranges(record.num_edges, record.shards)
    return [
        ShardResidency(**_placed(supervisor, shard_key(record.id, i)).model_dump(), edges=[lo, hi])
        for i, (lo, hi) in enumerate(ranges)
    ]


def _residency(supervisor: Supervisor, record: GraphRecord) -> Residency:
    if record.shards > 1:  # all shards together: the least ready shard's status, the bytes of all
        shards = _shard_residency(supervisor, record)
        order = ["unplaced", "failed", "loading", "evicted", "resident"]
        worst = min(shards, key=lambda r: order.index(r.status))
        return Residency(
            status=worst.status,
            worker=shards[0].worker,
            backend=shards[0].backend,
            device=shards[0].device,
            device_bytes=sum(r.device_bytes for r in shards),
            error=next((r.error for r in shards if r.error), None),
        )
    return _placed(supervisor, record.id)


def _placed(supervisor: Supervisor, key: str) -> Residency:
    handle = supervisor.holder(key)
    placed = None if handle is None else handle.graphs.get(key)
    residency: dict[str, Any]
    if handle is None or placed is None:
        residency = {
            "status": "unplaced",
            "worker": None,
            "backend": None,
            "device": None,
            "device_bytes": 0,
        }
    else:
        residency = {
            "status": placed.status,
            "worker": handle.index,
            "backend": handle.info.get("backend", handle.config.backend),
            "device": handle.info.get("device"),
            "device_bytes": 0 if placed.status == "evicted" else placed.device_bytes,
            "error": placed.error,
        }
    return Residency(**residency)
