"""Where a dataset stands on a worker, and where a worker loads it from.

A dataset (a graph, a point set, or one shard of a sharded graph) placed on a worker has a
:class:`Residency`: ``loading``, ``resident``, ``evicted`` (dropped from the worker to make room;
the spool keeps it, its next job loads it back) or ``failed``. Its :class:`GraphSource` says
where any worker (re)loads it from; the catalog gives them (:data:`Sources`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

#: a worker's life: see :class:`~.handle.WorkerHandle`
WorkerState = Literal["starting", "reloading", "ready", "dead", "stopped"]


@dataclass
class Residency:
    """A dataset (a graph, a point set or a shard) placed on a worker."""

    graph_id: str
    status: Literal["loading", "resident", "evicted", "failed"]
    device_bytes: int
    error: str | None = None
    #: weight updates queued so far: the version a job submitted now computes on
    weights_version: int = 0
    #: time.monotonic() of the graph's last upload, reload or job: eviction takes the oldest first
    last_used: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class GraphSource:
    """Where a worker (re)loads a graph from: a spool file and the record's vertex count."""

    graph_id: str
    path: str
    num_vertices: int | None
    #: the weights that replaced the uploaded ones (``.npy``), if any
    weights_path: str | None = None
    #: how the worker reads the file: ``npz`` for a graph, ``points.npz`` for a point set
    fmt: str = "npz"


#: where a placed dataset is (re)loaded from, by its key (None once it is deleted)
Sources = Callable[[str], GraphSource | None]
