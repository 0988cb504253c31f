"""What a stored dataset looks like to a client: its record, and where it is resident now.

A graph's or point set's answer (:class:`~service.models.GraphOut`,
:class:`~service.models.PointSetOut`) joins its record in the store with its residency on the
workers (``resident``, ``loading``, ``evicted``, ...); a sharded graph's with each shard's.
"""

from __future__ import annotations

import gpu_core

from ..models import GraphOut, PointSetOut, Residency, ShardResidency, timestamp
from ..runtime.links.fleet import Fleet
from ..storage.records import GraphRecord, Placement
from ..storage.store import Store

#: a dataset's residency statuses, the least ready first (a sharded graph shows its least ready shard's)
_ORDER = ["unplaced", "failed", "loading", "evicted", "resident"]


def describe_points(fleet: Fleet, store: Store, record: GraphRecord) -> PointSetOut:
    """A point set as ``/v1/points`` describes it."""
    return PointSetOut(
        id=record.id,
        created_at=timestamp(record.created_at),  # type: ignore[arg-type]
        num_points=record.num_vertices,
        dims=record.num_edges,
        dtype=record.weight_dtype,  # type: ignore[arg-type]
        source_format=record.source_format,
        payload_bytes=record.payload_bytes,
        residency=_residency(fleet, store.placements_of(record.id)),
    )


def describe_graph(fleet: Fleet, store: Store, record: GraphRecord) -> GraphOut:
    """A graph as ``/v1/graphs`` describes it."""
    placements = store.placements_of(record.id)
    return GraphOut(
        id=record.id,
        created_at=timestamp(record.created_at),  # type: ignore[arg-type]
        num_vertices=record.num_vertices,
        num_edges=record.num_edges,
        weight_dtype=record.weight_dtype,  # type: ignore[arg-type]
        source_format=record.source_format,
        payload_bytes=record.payload_bytes,
        weights_version=record.weights_version,
        residency=_residency(fleet, placements),
        shards=record.shards,
        shard_residency=_shard_residency(fleet, record, placements) if record.shards > 1 else None,
    )


def _shard_residency(fleet: Fleet, record: GraphRecord, placements: list[Placement]) -> list[ShardResidency]:
    ranges = gpu_core.edge_ranges(record.num_edges, record.shards)
    by_key = {p.key: p for p in placements}
    return [
        ShardResidency(**_placed(fleet, by_key.get(f"{record.id}.s{i}")).model_dump(), edges=[lo, hi])
        for i, (lo, hi) in enumerate(ranges)
    ]


def _residency(fleet: Fleet, placements: list[Placement]) -> Residency:
    if len(placements) > 1:  # all shards together: the least ready shard's status, the bytes of all
        shards = [_placed(fleet, p) for p in placements]
        worst = min(shards, key=lambda r: _ORDER.index(r.status))
        return Residency(
            status=worst.status,
            worker=shards[0].worker,
            backend=shards[0].backend,
            device=shards[0].device,
            device_bytes=sum(r.device_bytes for r in shards),
            error=next((r.error for r in shards if r.error), None),
        )
    return _placed(fleet, placements[0] if placements else None)


def _placed(fleet: Fleet, placement: Placement | None) -> Residency:
    if placement is None:
        return Residency(
            status="unplaced", worker=None, backend=None, device=None, device_bytes=0, error=None
        )
    facts = fleet.facts()
    fact = facts[placement.worker] if placement.worker < len(facts) else {}
    status = placement.status if placement.status in _ORDER else "loading"
    return Residency(
        status=status,  # type: ignore[arg-type]
        worker=placement.worker,
        backend=fact.get("backend"),
        device=fact.get("device"),
        device_bytes=0 if status == "evicted" else placement.device_bytes,
        error=placement.error,
    )
