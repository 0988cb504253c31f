"""Limits checked before anything of a graph's size is allocated (``MST_MAX_VERTICES``).

Used by the API process for JSON uploads and by the worker right after a binary
upload's header and arrays are parsed, before :class:`gpu_core.Graph` is built.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_core import MAX_VERTICES as ENGINE_MAX_VERTICES

from .errors import PayloadTooLargeError


def vertex_count(src: Any, dst: Any, num_vertices: int | None) -> int | None:
    """The vertex count a graph asks for: ``num_vertices``, else the largest integer id plus one.

    None when it cannot be told cheaply (ids that are not integers; the engine then names the problem).
    """
    if num_vertices is not None:
        return int(num_vertices)
    arrays = [np.asarray(a) for a in (src, dst)]
    if any(a.dtype.kind not in "iu" for a in arrays):
        return None
    sizes = [a for a in arrays if a.size]
    return max(int(a.max()) for a in sizes) + 1 if sizes else 0


def check_vertices(src: Any, dst: Any, num_vertices: int | None, limit: int) -> None:
    """Refuse (413) a graph of more than ``limit`` vertices, declared or implied by its ids.

    An implied count is only computed (a pass over the ids) when ``limit`` is below the engine's
    own: past that, :class:`gpu_core.Graph` refuses before it allocates anything of size n.
    """
    if num_vertices is None and limit >= ENGINE_MAX_VERTICES:
        return
    n = vertex_count(src, dst, num_vertices)
    if n is not None and n > limit:
        field = "num_vertices" if num_vertices is not None else "src"
        raise PayloadTooLargeError(
            f"the graph has {n} vertices, more than this service's limit of {limit} (MST_MAX_VERTICES).",
            field=field,
        )
