"""The total orders of the edges that the forests are unique under, and checks of query arguments.

* ``objective="min"``: edges ordered by ``(weight, edge_id)``, the minimum spanning forest;
* ``objective="max"``: edges ordered by ``(-weight, edge_id)``: heavier first, ties by the
  lower edge id, the maximum spanning forest.

Both orders come from one stable ascending sort, so every weight dtype is exact (no
negation, which would overflow the smallest integer and cannot tell ``-0.0`` from ``0.0``
apart from the sort's own rule): the descending order with ascending ids among ties is
the ascending stable order of the *reversed* array, read backwards.

Design: docs/design/exactness.md.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Literal

import numpy as np

from ..errors import GraphValidationError, NonFiniteWeightError, UnsupportedDtypeError, VertexIdError

Objective = Literal["min", "max"]
OBJECTIVES: tuple[str, ...] = ("min", "max")


def check_objective(objective: str) -> Objective:
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be 'min' or 'max'; got {objective!r}.")
    return objective  # type: ignore[return-value]


def edge_order(xp: ModuleType, weight: Any, objective: Objective) -> Any:
    """Edge ids sorted by the objective's order (a stable sort: ties by ascending edge id)."""
    if objective == "min":
        return xp.argsort(weight, kind="stable") if xp is np else xp.argsort(weight)
    m = int(weight.shape[0])
    reversed_w = xp.ascontiguousarray(weight[::-1])
    ascending = xp.argsort(reversed_w, kind="stable") if xp is np else xp.argsort(reversed_w)
    return (m - 1) - ascending[::-1]


def edge_ids_argument(xp: ModuleType, ids: Any, num_edges: int, field: str) -> Any:
    """Edge ids given by a caller (``exclude``, a weight update) as an int64 array, checked."""
    host = ids
    if type(ids).__module__.split(".")[0] != xp.__name__:
        host = np.asarray(ids)
        if host.size == 0:
            host = host.astype(np.int64)
    arr = xp.asarray(host)
    if arr.ndim != 1:
        raise GraphValidationError(f"'{field}' must be a one-dimensional list of edge ids.", field=field)
    if arr.dtype.kind not in "iu":
        raise UnsupportedDtypeError(
            f"'{field}' must hold integer edge ids, got dtype {arr.dtype}.", field=field
        )
    if arr.size:
        bad = (arr < 0) | (arr >= num_edges) if arr.dtype.kind == "i" else arr >= num_edges
        if bool(bad.any()):
            index = int(xp.flatnonzero(bad)[0])
            raise VertexIdError(
                f"'{field}[{index}]' = {int(arr[index])} is not an edge id of this graph "
                f"(it has {num_edges} edges: ids 0 to {num_edges - 1}).",
                field=field,
                index=index,
            )
    return arr.astype(np.int64, copy=False)


def new_weights_argument(xp: ModuleType, values: Any, dtype: Any | None, length: int, field: str) -> Any:
    """New weights as an array of a supported dtype, finite; cast to ``dtype`` only where exact."""
    from .validate import WEIGHT_DTYPES

    host = values
    if type(values).__module__.split(".")[0] != xp.__name__:
        host = np.asarray(values)
        if host.dtype.kind not in "iuf" and host.size:
            raise UnsupportedDtypeError(f"'{field}' must hold numbers, got dtype {host.dtype}.", field=field)
    arr = xp.asarray(host)
    if arr.ndim != 1 or int(arr.shape[0]) != length:
        raise GraphValidationError(
            f"'{field}' must be a one-dimensional array of {length} weights, got shape {tuple(arr.shape)}.",
            field=field,
        )
    if dtype is None and arr.dtype not in WEIGHT_DTYPES:
        allowed = ", ".join(str(d) for d in WEIGHT_DTYPES)
        raise UnsupportedDtypeError(
            f"'{field}' has dtype {arr.dtype}; supported weight dtypes are {allowed}.", field=field
        )
    if arr.dtype.kind == "f" and arr.size:
        finite = xp.isfinite(arr)
        if not bool(finite.all()):
            index = int(xp.flatnonzero(~finite)[0])
            raise NonFiniteWeightError(
                f"'{field}[{index}]' is {float(arr[index])}; weights must be finite numbers.",
                field=field,
                index=index,
            )
    if dtype is not None and arr.dtype != dtype:
        with np.errstate(all="ignore"):
            cast = arr.astype(dtype)
            exact = cast.astype(arr.dtype) == arr
            if cast.dtype.kind == "f" and arr.dtype.kind == "f":
                exact &= xp.isfinite(cast)
        if arr.size and not bool(exact.all()):
            index = int(xp.flatnonzero(~exact)[0])
            raise UnsupportedDtypeError(
                f"'{field}[{index}]' = {arr[index].item()} cannot be stored exactly as the graph's "
                f"{np.dtype(dtype)} weights; replace all weights to change the dtype.",
                field=field,
                index=index,
            )
        arr = cast
    return arr
