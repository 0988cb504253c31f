"""gpu_core: exact minimum spanning forests with ECL-MST on the GPU (CuPy), the same answer on the CPU.

>>> import numpy as np, gpu_core
>>> src, dst, weight = np.array([0, 1, 0]), np.array([1, 2, 2]), np.array([1, 1, 1])
>>> f = gpu_core.minimum_spanning_forest(src, dst, weight, backend="cpu")
>>> f.edge_ids.tolist(), f.total_weight, f.num_components
([0, 1], 2, 1)
"""

from . import errors, formats
from ._backend.memory import MemoryEstimate
from ._backend.resolve import Backend, gpu_available, resolve_backend
from ._clustering.estimator import (
    HDBSCAN,
    NotFittedError,
    all_points_membership_vectors,
    approximate_predict,
    membership_vector,
)
from ._clustering.hdbscan import HDBSCANResult, hdbscan
from ._clustering.prediction import PredictionData
from ._clustering.trees import CondensedTree, MinimumSpanningTree, SingleLinkageTree
from ._dendrogram.cpu import linkage_from_sorted_edges
from ._graphs.estimate import estimate_device_bytes
from ._graphs.forest import SpanningForest, make_forest
from ._graphs.graph import Graph, maximum_spanning_forest, minimum_spanning_forest
from ._graphs.order import OBJECTIVES
from ._graphs.shards import (
    ShardForest,
    edge_ranges,
    merge_shard_forests,
    shard_forest,
    sharded_spanning_forest,
    union_graph,
)
from ._graphs.validate import MAX_VERTICES, WEIGHT_DTYPES
from ._interop.scipy_compat import minimum_spanning_tree
from ._points.emst import euclidean_mst, metric_mst, single_linkage
from ._points.estimate import estimate_point_set_bytes
from ._points.index import PointIndex, build_point_index
from ._points.metrics import METRICS
from ._points.tree import EuclideanTree, PointTree
from ._points.validate import MAX_DIMENSIONS
from ._warm_up import warm_up
from .formats import FORMATS, read_graph

__all__ = [
    "FORMATS",
    "HDBSCAN",
    "MAX_DIMENSIONS",
    "MAX_VERTICES",
    "METRICS",
    "OBJECTIVES",
    "WEIGHT_DTYPES",
    "Backend",
    "CondensedTree",
    "EuclideanTree",
    "Graph",
    "HDBSCANResult",
    "MemoryEstimate",
    "MinimumSpanningTree",
    "NotFittedError",
    "PointIndex",
    "PointTree",
    "PredictionData",
    "ShardForest",
    "SingleLinkageTree",
    "SpanningForest",
    "all_points_membership_vectors",
    "approximate_predict",
    "build_point_index",
    "edge_ranges",
    "errors",
    "estimate_device_bytes",
    "estimate_point_set_bytes",
    "euclidean_mst",
    "formats",
    "gpu_available",
    "hdbscan",
    "linkage_from_sorted_edges",
    "make_forest",
    "maximum_spanning_forest",
    "membership_vector",
    "merge_shard_forests",
    "metric_mst",
    "minimum_spanning_forest",
    "minimum_spanning_tree",
    "read_graph",
    "resolve_backend",
    "shard_forest",
    "sharded_spanning_forest",
    "single_linkage",
    "union_graph",
    "warm_up",
]
__version__ = "0.1.0"
