"""Metrics of point sets: scikit-learn's names, definitions and ``metric_params``; the keys both
backends compare and the distances they report.

A metric is a *key* computed on *search coordinates*, and a map from keys to the distances reported
(tree weights, core distances, heights, prediction's distances). Keys are what the trees order
edges by, under the tie rule ``(key, min(i, j), max(i, j))``; every key is float64 arithmetic in
dimension order with one rounding per operation (no FMA), the same on the CPU and the GPU backend,
so both choose the same tree, and the map is the same operations on both, so they report the same
bits:

==============  ==========================  ===================================  ============================
metric          search coordinates          key                                  distance reported
==============  ==========================  ===================================  ============================
euclidean       the points                  ``sum (a_k - b_k)^2``                ``sqrt(key)``
manhattan       the points                  ``sum |a_k - b_k|``                  ``key``
chebyshev       the points                  ``max |a_k - b_k|``                  ``key``
minkowski, p    the points                  ``sum pow(|a_k - b_k|, p)``          ``pow(key, 1 / p)``
cosine          ``x / |x|`` (unit rows)     the chord ``sum (u_k - v_k)^2``      ``key / 2`` (= 1 - cos)
haversine       unit vectors of (lat, lon)  the chord ``sum (u_k - v_k)^2``      ``2 asin(sqrt(key) / 2)``
precomputed     the matrix                  the entry (the lighter orientation)  ``key``
==============  ==========================  ===================================  ============================

``pow``, ``asin`` and the unit vectors' ``sin``/``cos`` are :mod:`.detmath`'s (IEEE operations
only, the same bits on both backends); ``|x| = sqrt(sum x_k^2)`` in dimension order. Minkowski with
``p`` 1, 2 or infinity is manhattan, euclidean or chebyshev. Cosine and haversine are monotone
maps of the chord between unit vectors, so their trees are Euclidean trees of the unit vectors
(spatial index in low dimension, brute force above), with the weights mapped before condensing;
the chord of unit vectors holds about 1e-16 of absolute rounding, so very close points (1e-7
apart: 1 m on the Earth in radians) carry a relative error of about 1e-9 in their distance.

Design: docs/design/exactness.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .._backend.arrays import is_cupy
from ..errors import MetricError
from . import detmath

Array = Any  # a NumPy or a CuPy array
Kind = Literal["l2", "l1", "linf", "lp"]

#: the metrics' names, scikit-learn's (each with its aliases)
METRICS: tuple[str, ...] = (
    "euclidean", "manhattan", "chebyshev", "minkowski", "cosine", "haversine", "precomputed",
)  # fmt: skip
ALIASES: dict[str, str] = {
    "euclidean": "euclidean", "l2": "euclidean",
    "manhattan": "manhattan", "l1": "manhattan", "cityblock": "manhattan",
    "chebyshev": "chebyshev", "infinity": "chebyshev",
    "minkowski": "minkowski", "p": "minkowski",
    "cosine": "cosine", "haversine": "haversine", "precomputed": "precomputed",
}  # fmt: skip
#: how a metric's keys become its distances (``key_distances`` in kernels/metrics.cu)
MAP_SQRT, MAP_HALF, MAP_HAVERSINE, MAP_IDENTITY, MAP_ROOT = 0, 1, 2, 3, 4
#: the key kinds' codes in kernels/emst.cu and kernels/metrics.cu
KIND_CODES: dict[str, int] = {"l2": 0, "l1": 1, "linf": 2, "lp": 3}
#: Minkowski keys of boxes are lowered by this factor before pruning: pow of a smaller gap is not
#: always the smaller value to the last ulp, but within 2^-40 (see detmath's accuracy)
LP_BOX_SLACK = 1.0 - 2.0**-30
#: a haversine point's latitude lies in [-pi/2, pi/2], its longitude in [-2 pi, 2 pi] (either
#: convention, (-pi, pi] or [0, 2 pi)); radians, as scikit-learn takes them
HALF_PI, TWO_PI = math.pi / 2, 2 * math.pi


@dataclass(frozen=True)
class KeySpace:
    """How keys of search coordinates are computed: ``kind`` and Minkowski's ``p``."""

    kind: Kind
    p: float = 2.0

    @property
    def code(self) -> int:
        return KIND_CODES[self.kind]

    @property
    def kdtree_p(self) -> float:
        """SciPy's ``cKDTree.query(p=...)`` of this key space."""
        return {"l2": 2.0, "l1": 1.0, "linf": math.inf, "lp": self.p}[self.kind]

    def term(self, diff: Array) -> Array:
        """One coordinate's contribution to a key (``diff``: a rounded difference)."""
        if self.kind == "l2":
            return diff * diff
        if self.kind == "lp":
            return _pow(abs(diff), self.p)
        return abs(diff)

    def combine(self, acc: Array, term: Array) -> Array:
        xp = _module_of(acc)
        return xp.maximum(acc, term) if self.kind == "linf" else acc + term

    def keys(self, coords_t: Array, i: Any, j: Any) -> Array:
        """Exact keys between points ``i`` and ``j`` (broadcast together) of the ``(d, n)``
        transpose ``coords_t``, in dimension order."""
        xp = _module_of(coords_t)
        acc = xp.zeros(np.broadcast_shapes(np.shape(i), np.shape(j)), dtype=xp.float64)
        for column in coords_t:
            acc = self.combine(acc, self.term(column[i] - column[j]))
        return acc

    def cross_keys(self, queries: Array, targets: Array) -> Array:
        """Exact keys of every query row against every target row, ``(q, t)``."""
        xp = _module_of(queries)
        if xp is not np and self.kind != "l2":
            from .metric_kernels import device_cross_keys

            return device_cross_keys(queries, targets, self.code, self.p)
        acc = xp.zeros((int(queries.shape[0]), int(targets.shape[0])))
        for k in range(int(queries.shape[1])):
            acc = self.combine(acc, self.term(queries[:, k][:, None] - targets[:, k][None, :]))
        return acc

    def key_below(self, distance: Array) -> Array:
        """A key no larger than that of any pair at least ``distance`` apart (a bound, not exact)."""
        if self.kind == "l2":
            return distance * distance * (1.0 - 1e-12)
        if self.kind == "lp":
            return np.power(distance, self.p) * (1.0 - 1e-9)
        return distance * (1.0 - 1e-12)

    def distance_above(self, key: Array) -> Array:
        """A distance no smaller than that of any pair of at most ``key`` (a bound, not exact)."""
        if self.kind == "l2":
            return np.sqrt(key) * (1.0 + 1e-12)
        if self.kind == "lp":
            return np.power(key, 1.0 / self.p) * (1.0 + 1e-9)
        return key * (1.0 + 1e-12)


def _pow(x: Array, p: float) -> Array:
    if is_cupy(x):
        from .metric_kernels import device_pow

        return device_pow(x, p)
    return detmath.pow_(x, p)


def _module_of(array: Any) -> Any:
    if is_cupy(array):
        import cupy

        return cupy
    return np


@dataclass(frozen=True)
class Metric:
    """A resolved metric: its scikit-learn name, key space (None for precomputed distances) and the
    map of its keys to distances. ``func``: a callable metric, evaluated into a precomputed matrix."""

    name: str
    space: KeySpace | None
    distance_map: int
    p: float | None = None
    func: Callable[..., float] | None = field(default=None, compare=False)

    @property
    def precomputed(self) -> bool:
        """Whether the input is (or becomes) a matrix of distances rather than coordinates."""
        return self.space is None

    @property
    def transforms(self) -> bool:
        """Whether the points are searched as other coordinates (unit vectors)."""
        return self.name in ("cosine", "haversine")

    @property
    def euclidean_keys(self) -> bool:
        """Whether the trees are the Euclidean ones (of the points or of their unit vectors)."""
        return self.space is not None and self.space.kind == "l2"

    @property
    def params(self) -> dict[str, Any]:
        """``metric_params`` as resolved (Minkowski's ``p``), for records."""
        return {} if self.p is None else {"p": self.p}

    def describe(self) -> str:
        if self.func is not None:
            return f"metric={getattr(self.func, '__name__', 'callable')!r}"
        return f"metric={self.name!r}" + (f" (p={self.p})" if self.p is not None else "")

    def prepare(self, coords: Array) -> Array:
        """The search coordinates of validated float64 ``coords`` (NumPy or CuPy), checked for this
        metric: unit rows (cosine), unit vectors of (latitude, longitude) (haversine), else the
        coordinates themselves."""
        if self.name == "cosine":
            return unit_rows(coords)
        if self.name == "haversine":
            check_haversine(coords)
            return unit_vectors(coords)
        if self.space is not None and self.space.kind == "lp":
            check_minkowski_range(coords, self.space.p)
        return coords

    def distances(self, keys: Array, alpha: float = 1.0) -> Array:
        """The distances of ``keys`` (NumPy or CuPy; a new array), divided by ``alpha``."""
        if self.distance_map == MAP_SQRT and alpha == 1.0:  # the backends' own (IEEE) square roots
            return _module_of(keys).sqrt(keys)
        if is_cupy(keys):
            from .metric_kernels import device_distances

            return device_distances(keys, self.distance_map, self._inverse_p(), alpha)
        return host_distances(keys, self.distance_map, self._inverse_p(), alpha)

    @property
    def search_metric(self) -> Metric:
        """The metric of an index of this metric's search coordinates (already unit vectors):
        Euclidean for cosine and haversine, itself otherwise."""
        return EUCLIDEAN if self.transforms else self

    def _inverse_p(self) -> float:
        return 1.0 / self.p if self.distance_map == MAP_ROOT and self.p is not None else 1.0

    def core_key_scale(self, alpha: float) -> float:
        """What the core distances' keys are multiplied by so that ``max(core_i, core_j, d / alpha)``
        orders as ``max(alpha core_i, alpha core_j, d)`` in key space (1 for ``alpha = 1``)."""
        if alpha == 1.0:
            return 1.0
        if self.distance_map == MAP_SQRT:
            return alpha * alpha
        if self.distance_map == MAP_ROOT:
            assert self.p is not None
            return float(detmath.pow_(np.float64(alpha), self.p))
        if self.distance_map == MAP_HAVERSINE:
            raise MetricError(
                "alpha != 1 is not defined for metric='haversine': a great circle scaled past pi has no "
                "chord to compare; pass alpha=1.",
                field="alpha",
            )
        return alpha  # keys proportional to distances: cosine, manhattan, chebyshev, precomputed


def host_distances(keys: Array, distance_map: int, inverse_p: float, alpha: float) -> Array:
    """The distances of ``keys`` on the host (``kernels/metrics.cu``'s ``key_distances``, op for op)."""
    keys = np.asarray(keys, dtype=np.float64)
    if distance_map == MAP_SQRT:
        out = np.sqrt(keys)
    elif distance_map == MAP_HALF:
        out = keys * 0.5
    elif distance_map == MAP_HAVERSINE:
        out = 2.0 * detmath.asin(np.minimum(0.5 * np.sqrt(keys), 1.0))
    elif distance_map == MAP_ROOT:
        out = detmath.pow_(keys, inverse_p)
    else:
        out = keys.copy()
    return out if alpha == 1.0 else out / alpha


EUCLIDEAN = Metric("euclidean", KeySpace("l2"), MAP_SQRT)


def resolve_metric(metric: Any = "euclidean", metric_params: Mapping[str, Any] | None = None) -> Metric:
    """The :class:`Metric` of a name (or alias) and its ``metric_params``, or a :class:`MetricError`
    naming what is wrong. A callable is evaluated on every pair of points (a precomputed matrix)."""
    if isinstance(metric, Metric):
        return metric
    if metric_params is not None and not isinstance(metric_params, Mapping):
        raise MetricError(
            f"metric_params must be a dict or None; got {type(metric_params).__name__}.",
            field="metric_params",
        )
    params = dict(metric_params or {})
    if callable(metric):
        if params:
            raise MetricError(
                f"a callable metric takes no metric_params here; got {sorted(params)}.", field="metric_params"
            )
        return Metric("callable", None, MAP_IDENTITY, func=metric)
    name = ALIASES.get(metric) if isinstance(metric, str) else None
    if name is None:
        raise MetricError(
            f"unknown metric {metric!r}; the metrics are {', '.join(METRICS)} (aliases: "
            "l2, l1, cityblock, infinity, p), or a callable.",
            field="metric",
        )
    if name == "minkowski":
        return _minkowski(params)
    if params:
        raise MetricError(
            f"metric={name!r} takes no metric_params; got {sorted(params)} (only minkowski takes one: p).",
            field="metric_params",
        )
    return {
        "euclidean": EUCLIDEAN,
        "manhattan": Metric("manhattan", KeySpace("l1"), MAP_IDENTITY),
        "chebyshev": Metric("chebyshev", KeySpace("linf"), MAP_IDENTITY),
        "cosine": Metric("cosine", KeySpace("l2"), MAP_HALF),
        "haversine": Metric("haversine", KeySpace("l2"), MAP_HAVERSINE),
        "precomputed": Metric("precomputed", None, MAP_IDENTITY),
    }[name]


def _minkowski(params: dict[str, Any]) -> Metric:
    extra = sorted(set(params) - {"p"})
    if extra:
        raise MetricError(
            f"metric='minkowski' takes metric_params {{'p': p}} only; got {extra} too.", field="metric_params"
        )
    p = params.get("p", 2)
    if (
        isinstance(p, bool)
        or not isinstance(p, int | float | np.integer | np.floating)
        or math.isnan(p)
        or p < 1
    ):
        raise MetricError(
            f"metric='minkowski' needs metric_params={{'p': p}} with p >= 1 (a norm); got p={p!r}.",
            field="metric_params",
        )
    p = float(p)
    if p == 1.0:
        return Metric("minkowski", KeySpace("l1"), MAP_IDENTITY, p=p)
    if p == 2.0:
        return Metric("minkowski", KeySpace("l2"), MAP_SQRT, p=p)
    if math.isinf(p):
        return Metric("minkowski", KeySpace("linf"), MAP_IDENTITY, p=p)
    return Metric("minkowski", KeySpace("lp", p), MAP_ROOT, p=p)


# --- the search coordinates -----------------------------------------------------------------------


def unit_rows(coords: Array) -> Array:
    """``x / |x|`` per row, ``|x| = sqrt(sum x_k^2)`` in dimension order; a zero row is refused."""
    if is_cupy(coords):
        from .metric_kernels import device_unit_rows

        norm2, out = device_unit_rows(coords)
    else:
        norm2 = np.zeros(coords.shape[0])
        for k in range(int(coords.shape[1])):
            norm2 = norm2 + coords[:, k] * coords[:, k]
        with np.errstate(invalid="ignore", divide="ignore"):
            out = coords / np.sqrt(norm2)[:, None]
    zero = norm2 == 0.0
    if bool(zero.any()):
        xp = _module_of(norm2)
        raise zero_row_error(int(xp.flatnonzero(zero)[0]))
    return out


def zero_row_error(row: int) -> MetricError:
    return MetricError(
        f"metric='cosine': point {row} is the zero vector, whose cosine distance to any point is "
        "undefined; remove it or use another metric.",
        field="points",
        index=row,
    )


def check_haversine(coords: Array) -> None:
    """Two columns, latitude in [-pi/2, pi/2] and longitude in [-2 pi, 2 pi], radians."""
    d = int(coords.shape[1])
    if d != 2:
        raise haversine_dims_error(d)
    xp = _module_of(coords)
    bad = (xp.abs(coords[:, 0]) > HALF_PI) | (xp.abs(coords[:, 1]) > TWO_PI)
    if bool(bad.any()):
        row = int(xp.flatnonzero(bad)[0])
        lat, lon = (float(v) for v in coords[row].tolist())
        raise haversine_row_error(row, lat, lon)


def haversine_dims_error(d: int) -> MetricError:
    return MetricError(
        f"metric='haversine' takes points of 2 coordinates (latitude, longitude in radians); got d={d}.",
        field="points",
    )


def haversine_row_error(row: int, lat: float, lon: float) -> MetricError:
    return MetricError(
        f"metric='haversine': point {row} has latitude {lat!r} and longitude {lon!r}; latitudes lie "
        "in [-pi/2, pi/2] and longitudes in [-2 pi, 2 pi], in radians (degrees: multiply by pi/180).",
        field="points",
        index=row,
    )


def unit_vectors(coords: Array) -> Array:
    """``(cos lat cos lon, cos lat sin lon, sin lat)`` of (latitude, longitude) rows, :mod:`.detmath`'s."""
    if is_cupy(coords):
        from .metric_kernels import device_unit_vectors

        return device_unit_vectors(coords)
    s_lat, c_lat = detmath.sin_cos(coords[:, 0])
    s_lon, c_lon = detmath.sin_cos(coords[:, 1])
    return np.ascontiguousarray(np.column_stack((c_lat * c_lon, c_lat * s_lon, s_lat)))


def check_minkowski_range(coords: Array, p: float) -> None:
    """Minkowski keys must stay finite: ``d * span^p`` below the largest double."""
    span = float((coords.max(axis=0) - coords.min(axis=0)).max())
    error = minkowski_span_error(span, int(coords.shape[1]), p)
    if error is not None:
        raise error


def minkowski_span_error(span: float, d: int, p: float) -> MetricError | None:
    """The refusal of coordinates spanning ``span`` in ``d`` dimensions under minkowski ``p``, if any."""
    if span > 0 and math.log(d) + p * math.log(span) >= 700:
        return MetricError(
            f"metric='minkowski' with p={p}: the coordinates span {span:g}, so sums of |a - b|^p would "
            "overflow a double; scale the points down.",
            field="points",
        )
    return None


def point_facts(coords: np.ndarray[Any, Any]) -> dict[str, Any]:
    """What the metrics' checks of a point set read, once (validated float64 host coordinates): its
    first zero row (cosine), its first row outside haversine's range (two columns only) and its
    widest column span (minkowski). :func:`refusal` answers from them what :meth:`Metric.prepare`
    would raise, so a service can refuse a metric for stored points without reading them."""
    norm2 = np.zeros(coords.shape[0])  # as unit_rows sums it: a row whose squares underflow is zero
    for k in range(int(coords.shape[1])):
        norm2 = norm2 + coords[:, k] * coords[:, k]
    zero = norm2 == 0.0
    facts: dict[str, Any] = {
        "dims": int(coords.shape[1]),
        "zero_row": int(np.flatnonzero(zero)[0]) if zero.any() else None,
        "span": float((coords.max(axis=0) - coords.min(axis=0)).max()) if coords.size else 0.0,
        "haversine_row": None,
    }
    if coords.shape[1] == 2:
        bad = (np.abs(coords[:, 0]) > HALF_PI) | (np.abs(coords[:, 1]) > TWO_PI)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            facts["haversine_row"] = [row, float(coords[row, 0]), float(coords[row, 1])]
    return facts


def refusal(metric: Metric, facts: Mapping[str, Any]) -> MetricError | None:
    """The error :meth:`Metric.prepare` raises for points of these :func:`point_facts`, or None."""
    if metric.name == "cosine" and facts.get("zero_row") is not None:
        return zero_row_error(int(facts["zero_row"]))
    if metric.name == "haversine":
        if int(facts["dims"]) != 2:
            return haversine_dims_error(int(facts["dims"]))
        if facts.get("haversine_row") is not None:
            row, lat, lon = facts["haversine_row"]
            return haversine_row_error(int(row), float(lat), float(lon))
    if metric.space is not None and metric.space.kind == "lp":
        return minkowski_span_error(float(facts.get("span", 0.0)), int(facts["dims"]), metric.space.p)
    return None


def pairwise_callable(func: Callable[..., float], coords: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """scikit-learn's ``pairwise_distances`` of a callable: ``func(x_i, x_j)`` for ``i < j``, mirrored,
    and ``func(x_i, x_i)`` on the diagonal."""
    n = int(coords.shape[0])
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = func(coords[i], coords[j])
    out = out + out.T
    for i in range(n):
        out[i, i] = func(coords[i], coords[i])
    return out
