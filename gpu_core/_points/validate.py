"""Validation of point sets and of ``min_samples``, where the points enter the engine (once)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._backend.arrays import is_cupy, to_host
from ..errors import ClusteringParameterError, NonFiniteCoordinateError, PointDtypeError, PointSetShapeError

#: the largest number of coordinates per point the engine accepts (above the spatial indexes' range,
#: points are searched by brute force: ``index.SPATIAL_MAX_DIMENSIONS``)
MAX_DIMENSIONS = 1024


def validate_points(points: Any, *, on_device: bool = False) -> Any:
    """The points as a C-contiguous ``(n, d)`` float64 array, or a typed error.

    A NumPy array (CuPy input is copied to the host), or with ``on_device`` and CuPy input a
    CuPy array that never leaves the device (the checks run there, one synchronisation).
    """
    xp: Any = np
    if is_cupy(points) and on_device:
        import cupy

        xp, array = cupy, points
    else:
        try:
            array = np.asarray(to_host(points))
        except (TypeError, ValueError) as exc:
            raise PointDtypeError(f"'points' cannot be read as an array: {exc}", field="points") from None
    if array.dtype.kind not in "fiu":
        raise PointDtypeError(
            f"'points' has dtype {array.dtype}; coordinates must be float32, float64 or integers.",
            field="points",
        )
    if array.ndim != 2:
        raise PointSetShapeError(
            f"'points' must be a two-dimensional (n, d) array; got {array.ndim} dimension(s) "
            f"with shape {array.shape}.",
            field="points",
        )
    n, d = array.shape
    if n < 1:
        raise PointSetShapeError("'points' holds no point; pass at least one.", field="points")
    if not 1 <= d <= MAX_DIMENSIONS:
        raise PointSetShapeError(
            f"points must have between 1 and {MAX_DIMENSIONS} coordinates; got d={d}.", field="points"
        )
    coords = xp.ascontiguousarray(array, dtype=xp.float64)
    finite = xp.isfinite(coords).all(axis=1)
    if not bool(finite.all()):
        row = int(xp.flatnonzero(~finite)[0])
        raise NonFiniteCoordinateError(
            f"point {row} has a NaN or infinite coordinate ({coords[row].tolist()}); "
            "all coordinates must be finite.",
            field="points",
            index=row,
        )
    return coords


def check_min_samples(min_samples: Any, n: int) -> int:
    if isinstance(min_samples, bool) or not isinstance(min_samples, int | np.integer):
        raise ClusteringParameterError(
            f"min_samples must be an integer; got {min_samples!r}.", field="min_samples"
        )
    k = int(min_samples)
    if not 1 <= k <= n:
        raise ClusteringParameterError(
            f"min_samples must lie between 1 and the number of points ({n}); got {k}.",
            field="min_samples",
        )
    return k
