"""Validation of edge lists, shared by both backends.

The functions take an array module (``numpy`` or ``cupy``) so CuPy input is
checked on the device without a round trip of the whole edge list; only the
scalars of a reduction (and the position of the first bad edge, on failure)
come back to the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from ..errors import (
    EdgeListShapeError,
    GraphTooLargeError,
    GraphValidationError,
    NonFiniteWeightError,
    UnsupportedDtypeError,
    VertexIdError,
)

#: most vertices a graph may have on either backend: the GPU's 32-bit vertex index (both backends
#: accept the same graphs; the CPU backend would otherwise allocate 2**40 entries for 2**40)
MAX_VERTICES = 2**31 - 1

#: the weight dtypes the engine computes with, exactly (no conversion ever happens)
WEIGHT_DTYPES: tuple[np.dtype[Any], ...] = (
    np.dtype(np.int32),
    np.dtype(np.int64),
    np.dtype(np.float32),
    np.dtype(np.float64),
)


@dataclass(frozen=True)
class EdgeList:
    """A validated edge list: ids are int64 (or as given, see ``validate_edges``), weights one of
    :data:`WEIGHT_DTYPES`."""

    src: Any
    dst: Any
    weight: Any
    num_vertices: int


def _first_index(xp: ModuleType, mask: Any) -> int:
    return int(xp.flatnonzero(mask)[0])


def _weight_dtype_error(dtype: Any) -> UnsupportedDtypeError:
    allowed = ", ".join(str(d) for d in WEIGHT_DTYPES)
    return UnsupportedDtypeError(
        f"'weight' has dtype {dtype}; supported weight dtypes are {allowed}. "
        "Convert explicitly if the conversion is exact for your data.",
        field="weight",
    )


def _as_array(xp: ModuleType, value: Any, field: str) -> Any:
    if type(value).__module__.split(".")[0] != xp.__name__:
        # Lists and host arrays are looked at with NumPy first, so every backend
        # names the same problem (CuPy refuses strings and objects with its own errors).
        try:
            host = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise GraphValidationError(f"'{field}' is not an array of numbers: {exc}", field=field) from None
        if host.dtype.kind not in "biuf" and host.size:
            if field == "weight":
                raise _weight_dtype_error(host.dtype)
            raise UnsupportedDtypeError(
                f"'{field}' must hold integer vertex ids, got dtype {host.dtype}.", field=field
            )
        value = host
    arr = xp.asarray(value)
    if arr.ndim != 1:
        raise EdgeListShapeError(
            f"'{field}' must be one-dimensional, got shape {tuple(arr.shape)}.", field=field
        )
    return arr


def _check_ids(xp: ModuleType, ids: Any, field: str, widen: bool = True) -> Any:
    if ids.dtype.kind not in "iu":
        if ids.size == 0:  # an empty list has no integers to check ([] parses as float64)
            return ids.astype(np.int64)
        raise UnsupportedDtypeError(
            f"'{field}' must hold integer vertex ids, got dtype {ids.dtype}.", field=field
        )
    if ids.dtype == np.uint64 and ids.size and int(ids.max()) > np.iinfo(np.int64).max:
        index = _first_index(xp, ids > np.iinfo(np.int64).max)
        raise VertexIdError(
            f"'{field}[{index}]' = {int(ids[index])} is not a valid vertex id.", field=field, index=index
        )
    return ids.astype(np.int64, copy=False) if widen else ids


def validate_edges(
    xp: ModuleType, src: Any, dst: Any, weight: Any, num_vertices: int | None, *, widen: bool = True
) -> EdgeList:
    """Check an edge list and return it with int64 ids (``widen=False``: ids of any integer dtype
    as given, checked to lie in ``[0, n)``; the GPU build narrows them itself, without a copy).

    Raises a :class:`GraphValidationError` that names the first problem (field and edge index).
    """
    src_a = _as_array(xp, src, "src")
    dst_a = _as_array(xp, dst, "dst")
    w = _as_array(xp, weight, "weight")
    if not (src_a.shape[0] == dst_a.shape[0] == w.shape[0]):
        raise EdgeListShapeError(
            "'src', 'dst' and 'weight' must have the same length, got "
            f"{src_a.shape[0]}, {dst_a.shape[0]} and {w.shape[0]}.",
            field="weight",
        )
    m = int(w.shape[0])
    if m == 0 and w.dtype.kind not in "iuf":
        w = w.astype(np.float64)
    if w.dtype not in WEIGHT_DTYPES:
        raise _weight_dtype_error(w.dtype)
    src_a = _check_ids(xp, src_a, "src", widen)
    dst_a = _check_ids(xp, dst_a, "dst", widen)
    _check_finite(xp, w)
    lo = min(int(src_a.min()), int(dst_a.min())) if m else 0
    hi = max(int(src_a.max()), int(dst_a.max())) if m else -1
    n = _vertex_count(num_vertices, hi)
    if lo < 0 or hi >= n:
        _check_in_range(xp, src_a, dst_a, n)
    return EdgeList(src=src_a, dst=dst_a, weight=w, num_vertices=n)


def _check_finite(xp: ModuleType, w: Any) -> None:
    """Float weights must be finite: a :class:`NonFiniteWeightError` names the first that is not."""
    if w.dtype.kind == "f" and w.shape[0]:
        finite = xp.isfinite(w)
        if not bool(finite.all()):
            index = _first_index(xp, ~finite)
            raise NonFiniteWeightError(
                f"'weight[{index}]' is {float(w[index])}; weights must be finite numbers.",
                field="weight",
                index=index,
            )


def _vertex_count(num_vertices: Any, hi: int) -> int:
    """The graph's vertex count: ``num_vertices`` checked, else the largest id ``hi`` + 1; at most
    :data:`MAX_VERTICES` (checked before anything of that size is allocated)."""
    if num_vertices is None:
        n = hi + 1
    else:
        if isinstance(num_vertices, bool) or not isinstance(num_vertices, (int, np.integer)):
            raise GraphValidationError(
                f"'num_vertices' must be an integer, got {num_vertices!r}.", field="num_vertices"
            )
        n = int(num_vertices)
        if n < 0:
            raise GraphValidationError(f"'num_vertices' must be non-negative, got {n}.", field="num_vertices")
    if n > MAX_VERTICES:
        raise GraphTooLargeError(
            f"the graph has {n} vertices; gpu_core indexes vertices with 32 bits: at most {MAX_VERTICES}.",
            limit=MAX_VERTICES,
            actual=n,
        )
    return n


def _check_in_range(xp: ModuleType, src: Any, dst: Any, n: int) -> None:
    """Vertex ids must lie in ``[0, n)``: a :class:`VertexIdError` names the first that does not."""
    for field, ids in (("src", src), ("dst", dst)):
        bad = (ids < 0) | (ids >= n)
        if bool(bad.any()):
            index = _first_index(xp, bad)
            raise VertexIdError(
                f"'{field}[{index}]' = {int(ids[index])} is outside [0, {n}) (num_vertices = {n}).",
                field=field,
                index=index,
            )
