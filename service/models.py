"""Pydantic models of the API's JSON bodies (requests, records, results, problems)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, model_validator

from gpu_core import MAX_DIMENSIONS

GraphFormat = Literal["npz", "egr", "mtx", "edgelist", "dimacs", "arrow", "parquet"]
WeightsFormat = Literal["npy", "npz"]
TaskName = Literal["mst", "components", "clusters", "dendrogram", "emst", "hdbscan", "single_linkage"]
PointsFormat = Literal["npz", "npy"]
#: formats of the points of a prediction's binary body
PredictFormat = Literal["npz", "npy", "arrow"]
Objective = Literal["min", "max"]
WeightDtype = Literal["int32", "int64", "float32", "float64"]
#: the metrics of point-set tasks and models: scikit-learn's names and aliases (gpu_core.METRICS;
#: "precomputed" is no metric of a point set, whose rows are coordinates)
PointMetric = Literal[
    "euclidean", "l2", "manhattan", "l1", "cityblock", "chebyshev", "infinity", "minkowski", "p", "cosine",
    "haversine",
]  # fmt: skip
JobStatusName = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class GraphUpload(BaseModel):
    """A graph as JSON columns; the edge id of an edge is its position in the lists.

    Weight dtype: ``weight_dtype`` when given; otherwise int64 when every
    weight is a JSON integer, else float64 (then every integer weight must
    be at most 2**53 in magnitude, so the conversion is exact).
    """

    model_config = ConfigDict(extra="forbid")

    num_vertices: StrictInt | None = Field(None, ge=0, description="Vertex count; default: largest id + 1.")
    src: list[StrictInt] = Field(description="First endpoint of every edge (0-based vertex ids).")
    dst: list[StrictInt] = Field(description="Second endpoint of every edge.")
    weight: list[StrictInt | StrictFloat] = Field(description="Weight of every edge (finite numbers).")
    weight_dtype: WeightDtype | None = Field(
        None,
        description="Store weights as this dtype. Integer dtypes need integer weights in range; "
        "float32 rounds each weight to the nearest float32.",
    )


class MstParams(BaseModel):
    """Parameters of an ``mst`` job: which forest, and which edges to leave out (a what-if)."""

    model_config = ConfigDict(extra="forbid")

    objective: Objective = Field(
        "min", description="'min': order (weight, edge_id); 'max': heavier first, ties by the lower edge id."
    )
    exclude: list[StrictInt] | None = Field(
        None,
        description="Edge ids to leave out of this computation only (failed links); the graph is unchanged.",
    )


class ComponentsParams(BaseModel):
    """Parameters of a ``components`` job: the connected components, optionally without some edges."""

    model_config = ConfigDict(extra="forbid")

    exclude: list[StrictInt] | None = Field(None, description="Edge ids to leave out.")


class ClustersParams(BaseModel):
    """Parameters of a ``clusters`` job: cut the minimum spanning forest (give exactly one of the two)."""

    model_config = ConfigDict(extra="forbid")

    k: StrictInt | None = Field(
        None,
        ge=1,
        description="Number of clusters: the heaviest forest edges go, by (weight, edge_id); at least the "
        "graph's number of connected components.",
    )
    threshold: StrictInt | StrictFloat | None = Field(
        None, description="Forest edges heavier than this go (flat single-linkage clusters at that height)."
    )


class DendrogramParams(BaseModel):
    """A ``dendrogram`` job takes no parameters (the graph must be connected)."""

    model_config = ConfigDict(extra="forbid")


class MetricParams(BaseModel):
    """The metric of a point-set task or model (``gpu_core.metric_mst`` states each one)."""

    model_config = ConfigDict(extra="forbid")

    metric: PointMetric = Field(
        "euclidean",
        description="Distances between points, scikit-learn's names: euclidean (l2), manhattan (l1, "
        "cityblock), chebyshev (infinity), minkowski (p), cosine (1 - cos; a zero vector is refused), "
        "haversine (2 coordinates: latitude, longitude in radians; great-circle radians).",
    )
    metric_params: dict[str, StrictInt | StrictFloat] | None = Field(
        None, description="{'p': p} with p >= 1 for minkowski; the other metrics take none."
    )

    @model_validator(mode="after")
    def _metric_known(self) -> MetricParams:
        """The engine's own check of the metric and its parameters (a 422 that names what is wrong)."""
        from gpu_core._points.metrics import resolve_metric

        resolve_metric(self.metric, self.metric_params)
        return self


class EmstParams(MetricParams):
    """Parameters of an ``emst`` job: the minimum spanning tree of a point set under its metric."""

    model_config = ConfigDict(extra="forbid")

    min_samples: StrictInt = Field(
        1,
        ge=1,
        description="1: Euclidean distances; k > 1: HDBSCAN*'s mutual reachability, core distance = "
        "distance to the k-th nearest point, the point itself counted.",
    )


class HdbscanParams(MetricParams):
    """Parameters of an ``hdbscan`` job, as scikit-learn's ``HDBSCAN`` takes them."""

    model_config = ConfigDict(extra="forbid")

    min_cluster_size: StrictInt = Field(5, ge=2, description="Smallest size of a cluster.")
    min_samples: StrictInt | None = Field(None, ge=1, description="Default: min_cluster_size.")
    cluster_selection_method: Literal["eom", "leaf"] = Field("eom", description="Excess of mass, or leaves.")
    cluster_selection_epsilon: StrictInt | StrictFloat = Field(
        0.0, ge=0, description="Clusters closer than this are merged."
    )
    allow_single_cluster: StrictBool = Field(False, description="Whether the root may be the one cluster.")
    max_cluster_size: StrictInt | None = Field(None, ge=1, description="Largest size of a cluster (eom).")


class SingleLinkageParams(MetricParams):
    """A ``single_linkage`` job takes the metric only."""

    model_config = ConfigDict(extra="forbid")


TASK_PARAMS: dict[str, type[BaseModel]] = {
    "emst": EmstParams,
    "hdbscan": HdbscanParams,
    "single_linkage": SingleLinkageParams,
    "mst": MstParams,
    "components": ComponentsParams,
    "clusters": ClustersParams,
    "dendrogram": DendrogramParams,
}


class JobRequest(BaseModel):
    """A job on a resident graph: a task and its parameters."""

    model_config = ConfigDict(extra="forbid")

    task: Literal["mst", "components", "clusters", "dendrogram"] = Field(
        description="'mst': spanning forest (edge ids, weights); 'components': component label of every "
        "vertex; 'clusters': labels after cutting the minimum spanning forest; 'dendrogram': the "
        "single-linkage dendrogram of a connected graph (a SciPy linkage matrix)."
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="The task's parameters: MstParams, ComponentsParams, ClustersParams or DendrogramParams.",
    )


class PointsJobRequest(BaseModel):
    """A job on a resident point set: a task and its parameters."""

    model_config = ConfigDict(extra="forbid")

    task: Literal["emst", "hdbscan", "single_linkage"] = Field(
        description="'emst': the exact minimum spanning tree under the metric (or, with min_samples > 1, "
        "HDBSCAN*'s mutual-reachability tree); 'hdbscan': labels and probabilities; "
        "'single_linkage': the dendrogram as a SciPy linkage matrix."
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="The task's parameters: EmstParams, HdbscanParams or SingleLinkageParams (each takes "
        "metric and metric_params).",
    )


class WeightsPatch(BaseModel):
    """New weights for some edges; the values must be exact in the graph's weight dtype."""

    model_config = ConfigDict(extra="forbid")

    edge_ids: list[StrictInt] = Field(description="Edge ids (positions in the uploaded list).")
    weights: list[StrictInt | StrictFloat] = Field(description="Their new weights (finite numbers).")


class WeightsUpload(BaseModel):
    """Every weight anew, as JSON (large graphs: a binary .npy body)."""

    model_config = ConfigDict(extra="forbid")

    weight: list[StrictInt | StrictFloat] = Field(description="One weight per edge, in edge-id order.")
    weight_dtype: WeightDtype | None = Field(None, description="As for uploads: the dtype to store them as.")


_ROWS = f"One row per point, each of the same 1 to {MAX_DIMENSIONS} coordinates."


class PointsUpload(BaseModel):
    """A point set as JSON rows: ``points[i]`` holds the ``d`` coordinates of point ``i``."""

    model_config = ConfigDict(extra="forbid")

    points: list[Annotated[list[StrictInt | StrictFloat], Field(min_length=1, max_length=MAX_DIMENSIONS)]] = (
        Field(min_length=1, description=_ROWS)
    )
    dtype: Literal["float32", "float64"] | None = Field(None, description="Default float64.")


class Residency(BaseModel):
    status: Literal["loading", "resident", "evicted", "failed", "unplaced"] = Field(
        description="'resident' when the graph is in the worker's device memory; 'evicted' when it was "
        "dropped to make room for others (it stays stored; its next job loads it back first)."
    )
    worker: int | None = Field(description="Index of the worker holding the graph.")
    backend: str | None = Field(description="'gpu' or 'cpu'.")
    device: str | None = Field(description="The worker's device.")
    device_bytes: int = Field(description="Bytes the prepared graph holds on the device.")
    error: str | None = Field(None, description="Why a reload failed, when it did.")


class ShardResidency(Residency):
    edges: list[int] = Field(
        description="The shard's edge ids: [first, end), a contiguous range of the graph's edge ids."
    )


class GraphOut(BaseModel):
    id: str
    created_at: datetime
    num_vertices: int
    num_edges: int
    weight_dtype: WeightDtype
    source_format: str = Field(description="'json' or the upload's ?format=.")
    payload_bytes: int = Field(description="Bytes of the stored payload in the spool.")
    weights_version: int = Field(
        0, description="How many times the weights were replaced since the upload; jobs record the version."
    )
    residency: Residency
    shards: int = Field(
        1,
        description="How many workers hold the graph's edges (1: not sharded). A sharded graph's jobs "
        "run on every shard's worker, then on the union of their forests; its residency sums them.",
    )
    shard_residency: list[ShardResidency] | None = Field(
        None, description="Where each shard is resident, in edge order (sharded graphs only)."
    )


class GraphList(BaseModel):
    graphs: list[GraphOut]


class PointSetOut(BaseModel):
    id: str
    created_at: datetime
    num_points: int
    dims: int = Field(description="Coordinates per point.")
    dtype: Literal["float32", "float64"]
    source_format: str = Field(description="'json' or the upload's ?format=.")
    payload_bytes: int = Field(description="Bytes of the stored payload in the spool.")
    residency: Residency


class PointSetList(BaseModel):
    point_sets: list[PointSetOut]


class JobError(BaseModel):
    type: str = Field(description="Machine-readable cause, e.g. 'worker_lost', 'invalid_graph'.")
    message: str


class JobSummary(BaseModel):
    num_edges: int = Field(
        description="Edges in the forest (num_vertices - num_components); for 'clusters', the forest edges "
        "kept; for 'dendrogram', the merges."
    )
    total_weight: int | float | None = Field(description="The forest's total weight ('mst' jobs only).")
    num_components: int = Field(
        description="Connected components, isolated vertices included; for 'clusters', the clusters."
    )
    compute_ms: float = Field(
        description="Time of the computation itself on the worker's device (for a cached answer, the "
        "time of the computation that produced it)."
    )
    cached: bool = Field(False, description="Answered from the stored result of an identical earlier job.")
    coalesced: bool = Field(
        False,
        description="Computed once with an identical job queued right before it on the same worker "
        "(MST_COALESCE_JOBS); compute_ms is that shared computation's.",
    )
    reused_tree: bool | None = Field(
        None,
        description="Point-set jobs ('emst', 'hdbscan', 'single_linkage'): true when the tree of the same "
        "min_samples, computed by an earlier job on the resident point set, was reused.",
    )
    reused_index: bool | None = Field(
        None,
        description="Point-set jobs ('emst', 'hdbscan', 'single_linkage'): true when the job built no "
        "spatial index because the resident point set held one, built by an earlier job (whatever its "
        "min_samples), and the tree was computed on it (or reused: reused_tree); false when this job "
        "built the index (the first tree after an upload or a restart).",
    )


class JobOut(BaseModel):
    id: str
    graph_id: str = Field(description="The graph, or the point set, the job computes on.")
    task: TaskName = "mst"
    params: dict[str, Any] = Field(default_factory=dict, description="The task's parameters as given.")
    weights_version: int = Field(0, description="The graph's weights version the job computes on.")
    status: JobStatusName
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: JobError | None
    result: JobSummary | None


class ResultOut(JobSummary):
    """A job's result: a forest (``mst``), labels (``components``, ``clusters``) or a linkage matrix."""

    job_id: str | None = Field(None, description="The job (absent for one-shot computations).")
    graph_id: str | None = Field(None, description="The graph (absent for one-shot computations).")
    task: TaskName = "mst"
    edge_ids: list[int] | None = Field(
        None, description="'mst': the forest's edge ids, ascending (positions in the uploaded list)."
    )
    weights: list[int | float] | None = Field(None, description="'mst': their weights.")
    labels: list[int] | None = Field(
        None,
        description="'components', 'clusters': the label of every vertex, 0, 1, ... in the order of each "
        "cluster's smallest vertex (as scipy.sparse.csgraph.connected_components numbers them).",
    )
    linkage: list[list[float]] | None = Field(
        None,
        description="'dendrogram', 'single_linkage': (n - 1) rows [cluster a, cluster b, height, size] "
        "(SciPy's format).",
    )
    src: list[int] | None = Field(None, description="'emst': the smaller point index of every tree edge.")
    dst: list[int] | None = Field(None, description="'emst': the larger one.")
    core_distances: list[float] | None = Field(None, description="'emst' with min_samples > 1.")
    probabilities: list[float] | None = Field(None, description="'hdbscan': membership strengths.")


class ModelRequest(HdbscanParams):
    """An HDBSCAN* model to fit on a point set, as :class:`gpu_core.HDBSCAN` (and the hdbscan
    library) takes its parameters."""


class ModelOut(BaseModel):
    """An HDBSCAN* model kept resident with its point set, for predictions."""

    id: str
    points_id: str
    created_at: datetime
    params: dict[str, Any] = Field(description="Its parameters, defaults included.")
    num_clusters: int = Field(description="Clusters the fit found (labels 0 .. num_clusters - 1).")
    num_noise: int = Field(description="Points of the point set labelled noise (-1).")
    model_bytes: int = Field(description="Bytes the model holds on its worker beside the point set.")


class ModelList(BaseModel):
    models: list[ModelOut]


class PointsBody(BaseModel):
    """Points to predict as JSON rows: ``points[i]`` holds the ``d`` coordinates of point ``i``."""

    model_config = ConfigDict(extra="forbid")

    points: list[list[StrictInt | StrictFloat]] = Field(description=_ROWS)


class PredictionOut(BaseModel):
    """The model's answer for each new point, in the order sent (the hdbscan library's
    approximate_predict and membership_vector)."""

    model_id: str
    num_points: int
    labels: list[int] = Field(description="The cluster of each point, -1 for noise.")
    probabilities: list[float] = Field(description="How strongly each point belongs to its cluster.")
    membership: list[list[float]] | None = Field(
        None,
        description="With ?membership=true: each point's membership in every cluster (rows of num_clusters).",
    )


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
    api_process: int = Field(0, description="Which of the service's API processes answered (its slot).")
    pid: int = Field(0, description="That API process's process id.")


class Readiness(BaseModel):
    status: Literal["ready", "not_ready"]
    workers: list[dict[str, Any]]


def timestamp(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)
