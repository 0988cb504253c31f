"""Independent answers to check minimum spanning forests against.

* :func:`kruskal_edge_ids`: plain Kruskal over the ``(weight, edge_id)`` order with a
  union-find, in pure Python on exact Python numbers: *the* unique forest of docs/design/exactness.md.
* :func:`scipy_forest_total`: the forest's total weight and component count from
  ``scipy.sparse.csgraph`` (a different algorithm and code base).
* :func:`assert_valid_forest`: the invariants every correct answer satisfies.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components, minimum_spanning_tree


class UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]  # path halving
            x = parent[x]
        return x

    def union(self, a: int, b: int) -> bool:
        """Merge the sets of a and b; False if they were one set already."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        self.parent[ra] = rb
        return True


def kruskal_edge_ids(src: Any, dst: Any, weight: Any, num_vertices: int) -> list[int]:
    """The edge ids of the minimum spanning forest under the ``(weight, edge_id)`` order, ascending.

    Weights are compared as exact Python numbers (``tolist`` keeps int64 and float32/64
    values exactly), so no rounding can merge two different weights.
    """
    s, d, w = np.asarray(src).tolist(), np.asarray(dst).tolist(), np.asarray(weight).tolist()
    uf = UnionFind(num_vertices)
    chosen = [i for i in sorted(range(len(w)), key=lambda i: (w[i], i)) if uf.union(s[i], d[i])]
    return sorted(chosen)


def count_components(src: Any, dst: Any, num_vertices: int) -> int:
    """Connected components (isolated vertices count), by SciPy."""
    if num_vertices == 0:
        return 0
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    adj = coo_matrix((np.ones(src.size, dtype=np.int8), (src, dst)), shape=(num_vertices, num_vertices))
    count, _ = connected_components(adj.tocsr(), directed=False)
    return int(count)


def scipy_forest_total(src: Any, dst: Any, weight: Any, num_vertices: int) -> tuple[float, int]:
    """``(total weight, number of components)`` of a minimum spanning forest, by SciPy.

    SciPy's csgraph treats an explicit 0 as "no edge" and sums duplicate entries,
    so: self-loops are dropped, parallel edges (either direction) are reduced to the
    lightest one, and every weight is shifted by ``shift = 1 - min(weight)`` so all
    are >= 1. A forest has ``n - components`` edges, so the true total is SciPy's
    total minus ``shift * (n - components)``. Computed in float64: exact for
    integer weights whose totals stay below 2**53, within rounding otherwise.
    """
    n = num_vertices
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    weight = np.asarray(weight)
    if n == 0:
        return 0.0, 0
    keep = src != dst
    u = np.minimum(src[keep], dst[keep])
    v = np.maximum(src[keep], dst[keep])
    w = weight[keep]
    order = np.lexsort((w, v, u))  # by u, then v, then weight
    u, v, w = u[order], v[order], w[order]
    first = np.ones(u.size, dtype=bool)
    first[1:] = (u[1:] != u[:-1]) | (v[1:] != v[:-1])
    u, v, w = u[first], v[first], w[first]
    low = float(w.min()) if w.size else 0.0
    shift = 1.0 - low
    # (w - low) + 1 rather than w + (1 - low): rounding cannot push a weight below 1
    shifted = (w.astype(np.float64) - low) + 1.0
    assert shifted.size == 0 or shifted.min() >= 1.0, "shifted weights must be positive"
    graph = coo_matrix((shifted, (u, v)), shape=(n, n)).tocsr()
    components, _ = connected_components(graph, directed=False)
    tree = minimum_spanning_tree(graph)
    assert tree.nnz == n - components, (tree.nnz, n, components)
    total = math.fsum([*tree.data.tolist(), -shift * (n - components)])
    return total, int(components)


def assert_total_close(got: float, expected: float, scale: float, what: str = "total weight") -> None:
    """Float totals agree up to summation-order rounding (``scale`` ~ the sum of |w|)."""
    tol = 1e-9 * max(scale, 1.0)
    assert abs(got - expected) <= tol, f"{what}: got {got!r}, expected {expected!r} (tolerance {tol:g})"


def forest_components_ok(edge_ids: np.ndarray, src: np.ndarray, dst: np.ndarray, n: int) -> None:
    uf = UnionFind(n)
    for i in edge_ids.tolist():
        assert src[i] != dst[i], f"edge {i} is a self-loop ({src[i]}, {dst[i]})"
        assert uf.union(int(src[i]), int(dst[i])), f"edge {i} closes a cycle"


def assert_valid_forest(result: Any, src: Any, dst: Any, weight: Any, n: int) -> None:
    """Check the invariants of a :class:`gpu_core.SpanningForest` for the edge list given.

    Ascending unique int64 edge ids; ``len == n - num_components`` with the component
    count equal to SciPy's; no self-loop and no cycle (so, with that many edges, a
    spanning forest); ``weights == weight[edge_ids]`` bit for bit in the input dtype;
    the total weight (exact Python int for integer weights, a float within rounding
    of the exact sum for float weights).
    """
    src, dst, weight = np.asarray(src), np.asarray(dst), np.asarray(weight)
    ids = np.asarray(result.edge_ids)
    assert isinstance(result.edge_ids, np.ndarray), type(result.edge_ids)
    assert ids.dtype == np.int64 and ids.ndim == 1, (ids.dtype, ids.shape)
    assert np.all(np.diff(ids) > 0), "edge ids are not strictly ascending"
    if ids.size:
        assert ids[0] >= 0 and ids[-1] < weight.size, "edge id out of range"
    assert result.num_vertices == n
    components = count_components(src, dst, n)
    assert result.num_components == components, (result.num_components, components)
    assert ids.size == n - components, (ids.size, n, components)
    assert result.num_edges == ids.size
    forest_components_ok(ids, src, dst, n)

    weights = result.weights
    assert isinstance(weights, np.ndarray), type(weights)
    assert weights.dtype == weight.dtype, (weights.dtype, weight.dtype)
    assert weights.shape == ids.shape
    expected = weight[ids]
    assert weights.tobytes() == expected.tobytes(), "weights differ from weight[edge_ids] (bit for bit)"

    total = result.total_weight
    if weight.dtype.kind in "iu":
        assert type(total) is int, f"integer total weight should be a Python int, got {type(total)}"
        assert total == sum(expected.tolist())
    else:
        assert type(total) is float, f"float total weight should be a Python float, got {type(total)}"
        values = expected.astype(np.float64).tolist()
        assert_total_close(total, math.fsum(values), math.fsum(abs(x) for x in values))
    assert isinstance(result.compute_ms, float) and result.compute_ms >= 0.0


def assert_matches_oracles(
    result: Any, src: Any, dst: Any, weight: Any, n: int, *, scipy: bool = True
) -> None:
    """Invariants, the exact Kruskal edge ids, and (optionally) SciPy's total weight."""
    assert_valid_forest(result, src, dst, weight, n)
    expected = kruskal_edge_ids(src, dst, weight, n)
    got = result.edge_ids.tolist()
    if got != expected:
        only_got = sorted(set(got) - set(expected))[:10]
        only_exp = sorted(set(expected) - set(got))[:10]
        raise AssertionError(f"edge ids differ from Kruskal: extra {only_got}, missing {only_exp}")
    if scipy:
        total, components = scipy_forest_total(src, dst, weight, n)
        assert result.num_components == components
        w = np.asarray(weight)
        scale = float(np.abs(w.astype(np.float64)).sum()) + abs(float(w.min()) if w.size else 0.0) * n
        if w.dtype.kind in "iu" and scale < 2**52:
            assert result.total_weight == total, (result.total_weight, total)
        else:
            assert_total_close(float(result.total_weight), total, scale, "total weight vs SciPy")
