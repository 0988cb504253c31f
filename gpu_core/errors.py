"""Errors raised by :mod:`gpu_core`.

Every error the engine raises on purpose derives from :class:`MSTError`.
Mistakes in the input also derive from :class:`ValueError`, so plain
``except ValueError`` keeps working for callers who do not know this module.

    MSTError
    ├── GraphValidationError (ValueError)   the edge list is malformed
    │   ├── EdgeListShapeError              arrays of wrong rank or unequal length
    │   ├── UnsupportedDtypeError           ids or weights of an unsupported dtype
    │   ├── VertexIdError                   a vertex id outside [0, num_vertices)
    │   ├── NonFiniteWeightError            a NaN or infinite weight
    │   └── DisconnectedForestError         edges that are no spanning tree (for a dendrogram)
    ├── PointSetValidationError (ValueError) the point set or a clustering parameter is malformed
    │   ├── PointSetShapeError              not an (n, d) array with n >= 1 and 1 <= d <= the limit
    │   ├── PointDtypeError                 coordinates of a non-numeric dtype
    │   ├── NonFiniteCoordinateError        a NaN or infinite coordinate
    │   ├── ClusteringParameterError        e.g. min_samples larger than the number of points
    │   ├── MetricError                     an unknown metric, a parameter it does not take, input it refuses
    │   └── PointIndexBackendError          a point index passed with another backend than its own
    ├── GraphTooLargeError (ValueError)     over a backend's index limits
    ├── BackendUnavailableError (RuntimeError)
    └── DeviceError (RuntimeError)          CUDA failed while running a computation
        └── DeviceMemoryError (MemoryError) the graph does not fit in free device memory

All errors keep their fields when pickled, because they cross from the worker
process to the API process (``__reduce__`` rebuilds them from their arguments).
"""

from __future__ import annotations

from typing import Any


class MSTError(Exception):
    """Base class of every error raised on purpose by gpu_core."""

    #: short machine-readable name, used as the problem type by the service
    code = "mst_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.__dict__.copy()))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[MSTError], state: dict[str, Any]) -> MSTError:
    err = cls.__new__(cls)
    Exception.__init__(err, state.get("message", ""))
    err.__dict__.update(state)
    return err


class GraphValidationError(MSTError, ValueError):
    """The edge list cannot describe a graph; fix the input and try again."""

    code = "invalid_graph"

    def __init__(self, message: str, *, field: str | None = None, index: int | None = None) -> None:
        super().__init__(message)
        #: the input field at fault (``"src"``, ``"dst"``, ``"weight"``, ``"num_vertices"``)
        self.field = field
        #: the 0-based position of the first offending edge, when one edge is at fault
        self.index = index


class EdgeListShapeError(GraphValidationError):
    """The edge arrays are not one-dimensional or have different lengths."""

    code = "invalid_shape"


class UnsupportedDtypeError(GraphValidationError):
    """Vertex ids must be integers; weights int32, int64, float32 or float64."""

    code = "unsupported_dtype"


class VertexIdError(GraphValidationError):
    """A vertex id lies outside ``[0, num_vertices)``."""

    code = "vertex_out_of_range"


class NonFiniteWeightError(GraphValidationError):
    """A weight is NaN or infinite; minimum spanning forests need finite weights."""

    code = "non_finite_weight"


class PointSetValidationError(MSTError, ValueError):
    """The point set or a parameter of the point-set computation is malformed; fix it and try again."""

    code = "invalid_point_set"

    def __init__(self, message: str, *, field: str | None = None, index: int | None = None) -> None:
        super().__init__(message)
        #: the argument at fault (``"points"``, ``"min_samples"``, ``"min_cluster_size"``, ...)
        self.field = field
        #: the 0-based row of the first offending point, when one point is at fault
        self.index = index


class PointSetShapeError(PointSetValidationError):
    """Points must form an ``(n, d)`` array with ``n >= 1`` and ``1 <= d <=`` the supported maximum."""

    code = "invalid_point_set_shape"


class PointDtypeError(PointSetValidationError):
    """Coordinates must be real numbers (float or integer dtypes); convert the array first."""

    code = "unsupported_point_dtype"


class NonFiniteCoordinateError(PointSetValidationError):
    """A coordinate is NaN or infinite; distances need finite coordinates."""

    code = "non_finite_coordinate"


class ClusteringParameterError(PointSetValidationError):
    """A parameter is out of its range (e.g. ``min_samples`` larger than the number of points)."""

    code = "invalid_clustering_parameter"


class MetricError(PointSetValidationError):
    """The metric is unknown, takes other ``metric_params``, or refuses the input (haversine angles
    out of range, a zero vector under cosine, a precomputed matrix that is not a distance matrix);
    the message names the metric and what is wrong."""

    code = "invalid_metric"


class PointIndexBackendError(PointSetValidationError):
    """A point index was passed with a backend other than the one it was built on; pass
    ``backend="auto"`` (the index's own) or build an index on the backend wanted."""

    code = "point_index_backend_mismatch"


class DisconnectedForestError(GraphValidationError):
    """The edges do not join all vertices into one tree, so no dendrogram exists; pass a spanning tree."""

    code = "disconnected_forest"

    def __init__(
        self,
        message: str,
        *,
        num_components: int | None = None,
        field: str | None = "graph",
        index: int | None = None,
    ) -> None:
        super().__init__(message, field=field, index=index)
        #: how many trees the edges form
        self.num_components = num_components


class GraphTooLargeError(MSTError, ValueError):
    """The graph exceeds an index limit of the chosen backend; use a smaller graph or the CPU backend."""

    code = "graph_too_large"

    def __init__(self, message: str, *, limit: int | None = None, actual: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit
        self.actual = actual


class BackendUnavailableError(MSTError, RuntimeError):
    """The requested backend cannot run here (e.g. ``backend="gpu"`` without CuPy or a CUDA device)."""

    code = "backend_unavailable"


class DeviceError(MSTError, RuntimeError):
    """CUDA reported an error while computing; the device context may need a restart."""

    code = "device_error"


class DeviceMemoryError(DeviceError, MemoryError):
    """The graph does not fit in the device memory that is free; delete other graphs or use a larger GPU."""

    code = "device_out_of_memory"


__all__ = [
    "BackendUnavailableError",
    "ClusteringParameterError",
    "DeviceError",
    "DeviceMemoryError",
    "DisconnectedForestError",
    "EdgeListShapeError",
    "GraphTooLargeError",
    "GraphValidationError",
    "MSTError",
    "MetricError",
    "NonFiniteCoordinateError",
    "NonFiniteWeightError",
    "PointDtypeError",
    "PointIndexBackendError",
    "PointSetShapeError",
    "PointSetValidationError",
    "UnsupportedDtypeError",
    "VertexIdError",
]
