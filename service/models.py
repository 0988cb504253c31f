"""Pydantic models of the API's JSON bodies (requests, records, results, problems)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt

GraphFormat = Literal["npz", "egr", "mtx", "edgelist", "dimacs"]
WeightDtype = Literal["int32", "int64", "float32", "float64"]
JobStatusName = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class GraphUpload(BaseModel):
    """A graph as JSON columns; the edge id of an edge is its position in the lists.

    Weight dtype: ``weight_dtype`` when given; otherwise int64 when every
    weight is a JSON integer, else float64 (then every integer weight must
    be at most 2**53 in magnitude, so the conversion is exact).
    """

    model_config = ConfigDict(extra="forbid")

    num_vertices: int | None = Field(None, ge=0, description="Vertex count; default: largest id + 1.")
    src: list[StrictInt] = Field(description="First endpoint of every edge (0-based vertex ids).")
    dst: list[StrictInt] = Field(description="Second endpoint of every edge.")
    weight: list[StrictInt | StrictFloat] = Field(description="Weight of every edge (finite numbers).")
    weight_dtype: WeightDtype | None = Field(
        None,
        description="Store weights as this dtype. Integer dtypes need integer weights in range; "
        "float32 rounds each weight to the nearest float32.",
    )


class Residency(BaseModel):
    status: Literal["loading", "resident", "failed", "unplaced"] = Field(
        description="'resident' when the graph is in the worker's device memory."
    )
    worker: int | None = Field(description="Index of the worker holding the graph.")
    backend: str | None = Field(description="'gpu' or 'cpu'.")
    device: str | None = Field(description="The worker's device.")
    device_bytes: int = Field(description="Bytes the prepared graph holds on the device.")
    error: str | None = Field(None, description="Why a reload failed, when it did.")


class GraphOut(BaseModel):
    id: str
    created_at: datetime
    num_vertices: int
    num_edges: int
    weight_dtype: WeightDtype
    source_format: str = Field(description="'json' or the upload's ?format=.")
    payload_bytes: int = Field(description="Bytes of the stored payload in the spool.")
    residency: Residency


class GraphList(BaseModel):
    graphs: list[GraphOut]


class JobError(BaseModel):
    type: str = Field(description="Machine-readable cause, e.g. 'worker_lost', 'invalid_graph'.")
    message: str


class JobSummary(BaseModel):
    num_edges: int = Field(description="Edges in the forest (num_vertices - num_components).")
    total_weight: int | float
    num_components: int = Field(description="Connected components, isolated vertices included.")
    compute_ms: float = Field(description="Time of the MST computation itself on the worker's device.")


class JobOut(BaseModel):
    id: str
    graph_id: str
    status: JobStatusName
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: JobError | None
    result: JobSummary | None


class ResultOut(JobSummary):
    """A forest: edge ids (ascending positions in the uploaded list) and their weights."""

    job_id: str | None = Field(None, description="The job (absent for one-shot computations).")
    graph_id: str | None = Field(None, description="The graph (absent for one-shot computations).")
    edge_ids: list[int]
    weights: list[int | float]


class Problem(BaseModel):
    """An RFC 9457 problem detail (application/problem+json)."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    code: str
    instance: str | None = None
    field: str | None = Field(None, description="The input field at fault, when one is.")
    index: int | None = Field(None, description="The 0-based position of the offending edge, when one is.")


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ready", "not_ready"]
    workers: list[dict[str, Any]]


def timestamp(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)
