"""Single-linkage dendrograms from spanning trees, in SciPy's linkage-matrix format."""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import GraphValidationError


def linkage_from_sorted_edges(n: int, u: Any, v: Any, w: Any) -> np.ndarray[Any, np.dtype[np.float64]]:
    """The linkage matrix of a spanning tree whose ``n - 1`` edges come in merge order.

    Row ``i`` merges the clusters holding ``u[i]`` and ``v[i]`` at height ``w[i]`` into
    cluster ``n + i`` (SciPy's numbering; the smaller cluster id first, as SciPy writes it).
    """
    u_list = np.asarray(u, dtype=np.int64).tolist()
    v_list = np.asarray(v, dtype=np.int64).tolist()
    if len(u_list) != n - 1:
        raise GraphValidationError(
            f"a linkage needs a spanning tree of {n - 1} edges, got {len(u_list)}.", field="graph"
        )
    parent = list(range(2 * n - 1))  # union-find over clusters; a root's id is its cluster id
    size = [1] * n + [0] * (n - 1)
    out = np.empty((max(n - 1, 0), 4), dtype=np.float64)
    for i, (a, b) in enumerate(zip(u_list, v_list, strict=True)):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        if a == b:
            raise GraphValidationError("the edges given for a linkage close a cycle.", field="graph")
        new = n + i
        parent[a] = parent[b] = new
        size[new] = size[a] + size[b]
        out[i, 0], out[i, 1], out[i, 3] = min(a, b), max(a, b), size[new]
    out[:, 2] = np.asarray(w, dtype=np.float64)
    return out
