"""Single-linkage dendrograms from spanning trees, as SciPy linkage matrices.

A spanning tree whose edges are listed in merge order (non-decreasing weight, ties in
the order given) *is* the single-linkage hierarchy: the i-th edge merges the two
clusters that hold its endpoints into cluster ``n + i``. Only the labelling is
sequential (a union-find over the edges); connectivity and order are checked with
vectorized SciPy/NumPy first, so the loop never meets a bad edge. The loop runs compiled
by Numba where it is installed, else in Python (far slower).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..errors import DisconnectedForestError, GraphValidationError


def check_tree(n: int, u: np.ndarray[Any, Any], v: np.ndarray[Any, Any], w: np.ndarray[Any, Any]) -> None:
    if not (u.shape == v.shape == w.shape) or u.ndim != 1:
        raise GraphValidationError("u, v and w must be one-dimensional arrays of one length.", field="src")
    if u.size and (min(int(u.min()), int(v.min())) < 0 or max(int(u.max()), int(v.max())) >= n):
        raise GraphValidationError(f"a vertex id lies outside [0, {n}).", field="src")
    if np.any(w[1:] < w[:-1]):
        at = int(np.flatnonzero(w[1:] < w[:-1])[0]) + 1
        raise GraphValidationError(
            f"the edges must come in merge order (non-decreasing weight); edge {at} is lighter than "
            "the one before it.",
            field="weight",
            index=at,
        )
    if u.shape[0] != n - 1:
        raise not_a_tree(n, u, v)


def not_a_tree(n: int, u: np.ndarray[Any, Any], v: np.ndarray[Any, Any]) -> DisconnectedForestError:
    from scipy.sparse import coo_matrix  # imported here: `import gpu_core` stays light
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(u.shape[0]), (u, v)), shape=(n, n))
    count, _ = connected_components(graph, directed=False)
    return DisconnectedForestError(
        f"the {u.shape[0]} edges form {count} connected component(s) over {n} vertices (or a cycle); "
        f"a single-linkage dendrogram needs a spanning tree (one component, {n - 1} edges).",
        num_components=int(count),
    )


def linkage_from_sorted_edges(n: int, u: Any, v: Any, w: Any) -> np.ndarray[Any, np.dtype[np.float64]]:
    """SciPy linkage matrix ``(n - 1) x 4`` of a spanning tree whose edges are in merge order.

    Row i is ``[a, b, w[i], size]`` with ``a < b`` the ids of the two clusters the i-th
    edge joins (points are ``0..n-1``, the cluster of the i-th merge is ``n + i``), as
    :func:`scipy.cluster.hierarchy.linkage` numbers them. Raises
    :class:`~gpu_core.errors.DisconnectedForestError` unless the edges form one tree.
    """
    u = np.ascontiguousarray(u, dtype=np.int64)  # one layout: one compiled specialization
    v = np.ascontiguousarray(v, dtype=np.int64)
    w = np.asarray(w, dtype=np.float64)
    check_tree(n, u, v, w)
    out = np.empty((n - 1, 4), dtype=np.float64)
    out[:, 2] = w
    if n > 1 and _label(n, u, v, out) >= 0:  # an edge closed a cycle: n - 1 edges cannot span
        raise not_a_tree(n, u, v)
    return out


def _label_python(n: int, u: np.ndarray[Any, Any], v: np.ndarray[Any, Any], out: np.ndarray[Any, Any]) -> int:
    """Columns 0, 1 and 3 of the linkage matrix: a union-find over the points (path halving).

    Returns -1, or the index of the first edge whose endpoints are already joined (a cycle).
    """
    m = n - 1
    parent = list(range(n))
    label = list(range(n))  # label[root]: the cluster id the root's component has now
    size = [1] * n
    left = [0] * m
    right = [0] * m
    sizes = [0] * m
    for i, (a, b) in enumerate(zip(u.tolist(), v.tolist(), strict=True)):
        while parent[a] != a:
            parent[a] = a = parent[parent[a]]
        while parent[b] != b:
            parent[b] = b = parent[parent[b]]
        if a == b:
            return i
        la, lb = label[a], label[b]
        if la < lb:
            left[i], right[i] = la, lb
        else:
            left[i], right[i] = lb, la
        if size[a] < size[b]:
            a, b = b, a
        parent[b] = a
        size[a] += size[b]
        sizes[i] = size[a]
        label[a] = n + i
    out[:, 0] = left
    out[:, 1] = right
    out[:, 3] = sizes
    return -1


def _label_compiled(n: int, u: Any, v: Any, out: Any, parent: Any, lab: Any) -> int:  # pragma: no cover
    """The same loop for Numba. ``parent`` holds ``-size`` at a root: one array read per find step."""
    for x in range(n):
        parent[x] = -1
        lab[x] = x
    for i in range(n - 1):
        a = u[i]
        while True:  # find with path halving
            pa = parent[a]
            if pa < 0:
                break
            ga = parent[pa]
            if ga < 0:
                a = pa
                break
            parent[a] = ga
            a = ga
        b = v[i]
        while True:
            pb = parent[b]
            if pb < 0:
                break
            gb = parent[pb]
            if gb < 0:
                b = pb
                break
            parent[b] = gb
            b = gb
        if a == b:
            return i
        la, lb = lab[a], lab[b]
        out[i, 0] = min(la, lb)
        out[i, 1] = max(la, lb)
        size = -(parent[a] + parent[b])
        out[i, 3] = size
        if parent[a] > parent[b]:  # a is the smaller tree: it goes under b
            a, b = b, a
        parent[b] = a
        parent[a] = -size
        lab[a] = n + i
    return -1


@functools.cache
def _compiled() -> Any:
    """The loop compiled by Numba (far faster), or None where Numba is not installed."""
    from .._backend.jit import available, jit

    return jit(_label_compiled) if available() else None


def _label(n: int, u: np.ndarray[Any, Any], v: np.ndarray[Any, Any], out: np.ndarray[Any, Any]) -> int:
    compiled = _compiled() if n > 1_000 else None  # small trees: not worth a compilation
    if compiled is None:
        return _label_python(n, u, v, out)
    ids = np.int32 if 2 * n < 2**31 else np.int64
    return int(compiled(n, u, v, out, np.empty(n, dtype=ids), np.empty(n, dtype=ids)))
