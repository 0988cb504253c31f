"""The records of the store: a graph (or point set), a job, a model of a point set, and the ids
they are known by."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Literal

JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]
FINISHED: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})


def new_id(prefix: str) -> str:
    """A random, non-sequential id such as ``g_3kq0...``: 128 bits from :mod:`secrets`."""
    return f"{prefix}_{secrets.token_hex(16)}"


_ID_SHAPE = re.compile(r"[a-z]_[0-9a-f]{32}")


def is_id(value: str, prefix: str) -> bool:
    """Whether ``value`` has the shape :func:`new_id` gives ids of ``prefix`` (checked before any
    lookup, so a foreign id such as ``../../etc/passwd`` never reaches a query or a path)."""
    return value[:2] == f"{prefix}_" and _ID_SHAPE.fullmatch(value) is not None


@dataclass(frozen=True)
class GraphRecord:
    id: str
    created_at: float
    num_vertices: int
    num_edges: int
    weight_dtype: str
    source_format: str
    payload_bytes: int
    device_bytes: int
    #: how many times the weights were replaced since the upload
    weights_version: int = 0
    #: the API key's owner id that uploaded it ("" without API keys)
    owner: str = ""
    #: ``graph``, or ``points``: a point set, whose record holds its number of points in
    #: ``num_vertices``, its dimension in ``num_edges`` and its coordinates' dtype in ``weight_dtype``
    kind: str = "graph"
    #: how many workers hold the graph's edges, a contiguous edge-id range each (1: not sharded)
    shards: int = 1
    #: a point set's facts the metrics' checks read, as JSON (see service/runtime/metric_checks.py);
    #: "{}" for a graph, and for a point set stored before records held them
    facts: str = "{}"


@dataclass(frozen=True)
class JobRecord:
    id: str
    graph_id: str
    status: JobStatus
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    error_type: str | None = None
    error_message: str | None = None
    num_edges: int | None = None
    total_weight: int | float | None = None
    num_components: int | None = None
    compute_ms: float | None = None
    #: what the job computes (``mst``, ``components``, ``clusters``, ``dendrogram``) and with what
    task: str = "mst"
    #: the task's parameters as canonical JSON (sorted keys), the cache key with the weights version
    params: str = "{}"
    #: the graph's weights version the job was submitted against (and computes on)
    weights_version: int = 0
    #: answered from an identical earlier job's result (``compute_ms`` is that computation's)
    cached: bool = False
    #: point-set jobs: the tree of an earlier job was reused (None: not a point-set clustering)
    reused_tree: bool | None = None
    #: point-set jobs: no spatial index was built (an earlier job's served; None: not a point-set job)
    reused_index: bool | None = None
    #: the API key's owner id that submitted it ("" without API keys)
    owner: str = ""
    #: answered by the computation of an identical job queued right before it (MST_COALESCE_JOBS)
    coalesced: bool = False
    #: a job on a sharded graph: the API process (its slot) that coordinates its steps
    coordinator: int | None = None
    #: ``time.monotonic()`` when its request was first written to its worker: its place in that
    #: worker's queue, kept if a new worker takes it back from the store
    stamp: float | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


@dataclass(frozen=True)
class Placement:
    """Where a dataset (or one shard of one) lives: its worker, and what that worker says of it."""

    key: str
    graph_id: str
    worker: int
    #: ``loading``, ``resident``, ``evicted`` (dropped to make room; its next job loads it back)
    #: or ``failed`` (its reload failed: ``error`` says why)
    status: str = "loading"
    device_bytes: int = 0
    error: str | None = None


@dataclass(frozen=True)
class ModelRecord:
    """An HDBSCAN* model of a point set: its parameters (what it is fitted again from) and what
    its fit found."""

    id: str
    points_id: str
    created_at: float
    #: the estimator's parameters as canonical JSON (sorted keys)
    params: str
    num_clusters: int
    num_noise: int
    #: bytes the model holds on its worker beside the point set (its prediction data)
    model_bytes: int
    #: the point set's size and dimension when the model was fitted (a prediction checks them)
    num_points: int
    dims: int
    owner: str = ""
