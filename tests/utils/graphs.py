"""Builders of edge lists for the tests: random graphs with the awkward cases, and structured graphs.

Every builder returns an :class:`EdgeGraph` whose arrays are plain NumPy
(``src``/``dst`` int64, ``weight`` of the requested dtype). Builders are
deterministic in their ``seed``. Vertex ids are in ``[0, num_vertices)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

#: the weight dtypes gpu_core computes with
DTYPES: tuple[np.dtype[Any], ...] = tuple(np.dtype(t) for t in ("int32", "int64", "float32", "float64"))


@dataclass(frozen=True)
class EdgeGraph:
    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray
    num_vertices: int
    name: str = "graph"

    @property
    def num_edges(self) -> int:
        return int(self.weight.shape[0])

    @property
    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.src, self.dst, self.weight

    def with_weight(self, weight: np.ndarray, name: str | None = None) -> EdgeGraph:
        return replace(self, weight=weight, name=name or self.name)

    def __repr__(self) -> str:  # shows up in assertion messages
        return (
            f"EdgeGraph({self.name!r}, n={self.num_vertices}, m={self.num_edges}, dtype={self.weight.dtype})"
        )


def _rng(seed: int | np.random.Generator) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


# ---------------------------------------------------------------- weights


def weight_pool(
    seed: int | np.random.Generator, dtype: Any, size: int, *, negative: bool = True
) -> np.ndarray:
    """``size`` distinct weights of ``dtype``; few distinct weights make many ties.

    Integers lie in [-span, span] (or [0, span]) with span = max(1000, 2 * size);
    floats have three decimals and include 0.0. Values are small enough for SciPy's
    float64 arithmetic to be exact on integer weights.
    """
    rng = _rng(seed)
    dtype = np.dtype(dtype)
    span = max(1000, 2 * size)
    lo = -span if negative else 0
    if dtype.kind == "i":
        values = rng.choice(np.arange(lo, span + 1), size=size, replace=False)
    else:
        values = np.unique(np.round(rng.uniform(lo, span, size=4 * size + 8), 3))
        values = rng.choice(values, size=min(size, values.size), replace=False)
        values[0] = 0.0
    return np.asarray(values).astype(dtype)


def near_weight_pool(dtype: Any, size: int = 16) -> np.ndarray:
    """Distinct weights that collapse to *one* value if rounded to a narrower type.

    int32: around 2**30, apart by 1 (float32 has 24 bits).
    int64: around 2**60 and -2**60, apart by 1 (float64 has 53 bits).
    float32: adjacent float32 values above 1.0 (and their negatives).
    float64: 1.0 + k * 2**-40 (float32 rounds all of them to 1.0), and negatives.
    """
    dtype = np.dtype(dtype)
    k = np.arange(size // 2, dtype=np.int64)
    if dtype == np.int32:
        vals = np.concatenate([2**30 + k, -(2**30) - k])
        return vals.astype(np.int32)
    if dtype == np.int64:
        return np.concatenate([2**60 + k, -(2**60) - k]).astype(np.int64)
    if dtype == np.float32:
        up = np.float32(1.0) + k.astype(np.float32) * np.float32(2.0**-23)
        return np.concatenate([up, -up]).astype(np.float32)
    if dtype == np.float64:
        up = 1.0 + k.astype(np.float64) * 2.0**-40
        return np.concatenate([up, -up])
    raise ValueError(f"no near-weight pool for {dtype}")


def extreme_weight_pool(dtype: Any) -> np.ndarray:
    """Weights at the ends of the dtype's range, signed zeros and subnormals.

    Floats stay below 1e300 (float64) so totals of test forests do not overflow.
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "i":
        info = np.iinfo(dtype)
        ints = [info.min, info.min + 1, -2, -1, 0, 1, 2, info.max - 1, info.max]
        return np.array(ints, dtype=dtype)
    tiny = float(np.finfo(dtype).smallest_subnormal)
    big = 1e300 if dtype == np.float64 else float(np.finfo(np.float32).max)
    below = float(np.nextafter(dtype.type(big), dtype.type(0)))
    floats = [-big, -1.5, -tiny, -0.0, 0.0, tiny, 2 * tiny, 1.5, big, below]
    return np.array(floats, dtype=dtype)


def draw_weights(seed: int | np.random.Generator, pool: np.ndarray, size: int) -> np.ndarray:
    return _rng(seed).choice(pool, size=size).astype(pool.dtype)


# ---------------------------------------------------------------- random graphs


def random_graph(
    seed: int,
    num_vertices: int,
    num_edges: int,
    *,
    dtype: Any = np.int64,
    num_weights: int | None = 5,
    pool: np.ndarray | None = None,
    negative: bool = True,
    self_loops: float = 0.05,
    parallel: float = 0.1,
    components: int = 1,
    isolated: int = 0,
) -> EdgeGraph:
    """A random multigraph with the awkward cases mixed in.

    * weights drawn from ``pool`` (default: ``num_weights`` distinct values, so
      many ties; ``num_weights=None`` draws from a large pool);
    * a fraction ``self_loops`` of the edges are self-loops (with weights from the
      same pool, so some are lighter than every real edge);
    * a fraction ``parallel`` duplicates existing edges (either direction) with a
      fresh weight, often equal to the original's;
    * the non-isolated vertices are split into ``components`` groups with no edge
      between groups, and ``isolated`` vertices (random ids) get no edge at all.
    """
    rng = np.random.default_rng(seed)
    n, m = num_vertices, num_edges
    if pool is None:
        size = num_weights if num_weights is not None else max(4, 4 * m)
        pool = weight_pool(rng, dtype, size, negative=negative)
    perm = rng.permutation(n)
    isolated = min(isolated, n)
    active = perm[isolated:]
    if active.size == 0 or m == 0:
        if m:
            raise ValueError("edges need at least one non-isolated vertex")
        empty = np.empty(0, dtype=np.int64)
        return EdgeGraph(empty, empty.copy(), pool[:0].copy(), n, f"random-{seed}")
    groups = np.array_split(active, max(1, min(components, active.size)))
    sizes = np.array([g.size for g in groups], dtype=np.float64)
    which = rng.choice(len(groups), size=m, p=sizes / sizes.sum())
    src = np.empty(m, dtype=np.int64)
    dst = np.empty(m, dtype=np.int64)
    for gi, group in enumerate(groups):
        sel = np.flatnonzero(which == gi)
        src[sel] = rng.choice(group, size=sel.size)
        dst[sel] = rng.choice(group, size=sel.size)
    weight = draw_weights(rng, pool, m)
    loops = rng.random(m) < self_loops
    dst[loops] = src[loops]
    dup = np.flatnonzero(rng.random(m) < parallel)
    if dup.size and m > 1:
        original = rng.integers(0, m, size=dup.size)
        flip = rng.random(dup.size) < 0.5
        src[dup] = np.where(flip, dst[original], src[original])
        dst[dup] = np.where(flip, src[original], dst[original])
    order = rng.permutation(m)
    return EdgeGraph(src[order], dst[order], weight[order], n, f"random-{seed}")


def empty_graph(num_vertices: int = 0, dtype: Any = np.float64) -> EdgeGraph:
    e = np.empty(0, dtype=np.int64)
    return EdgeGraph(e, e.copy(), np.empty(0, dtype=dtype), num_vertices, f"empty-{num_vertices}")


def self_loops_only(num_vertices: int = 4, dtype: Any = np.int32, seed: int = 0) -> EdgeGraph:
    rng = np.random.default_rng(seed)
    ids = np.repeat(np.arange(num_vertices, dtype=np.int64), 2)
    weight = draw_weights(rng, weight_pool(rng, dtype, 3), ids.size)
    return EdgeGraph(ids, ids.copy(), weight, num_vertices, "self-loops-only")


def parallel_edges_only(dtype: Any = np.int64, seed: int = 0, count: int = 12) -> EdgeGraph:
    """``count`` edges between vertices 0 and 1, both directions, heavy ties."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, 2, size=count)
    weight = draw_weights(rng, weight_pool(rng, dtype, 2), count)
    return EdgeGraph(src, 1 - src, weight, 2, "parallel-only")


# ---------------------------------------------------------------- structured graphs


def grid_graph(
    rows: int, cols: int, seed: int = 0, *, dtype: Any = np.int32, num_weights: int | None = 4
) -> EdgeGraph:
    """A rows x cols 4-neighbour grid, edges in random order (average degree just under 4)."""
    rng = np.random.default_rng(seed)
    ids = np.arange(rows * cols, dtype=np.int64).reshape(rows, cols)
    src = np.concatenate([ids[:, :-1].ravel(), ids[:-1, :].ravel()])
    dst = np.concatenate([ids[:, 1:].ravel(), ids[1:, :].ravel()])
    m = src.size
    size = num_weights if num_weights is not None else max(4, m)
    weight = draw_weights(rng, weight_pool(rng, dtype, size), m)
    order = rng.permutation(m)
    flip = rng.random(m) < 0.5
    s, d = src[order], dst[order]
    return EdgeGraph(np.where(flip, d, s), np.where(flip, s, d), weight, rows * cols, f"grid-{rows}x{cols}")


def rmat_graph(
    scale: int,
    edge_factor: int,
    seed: int = 0,
    *,
    a: float = 0.45,
    b: float = 0.15,
    c: float = 0.15,
    dtype: Any = np.int32,
    num_weights: int | None = 64,
) -> EdgeGraph:
    """R-MAT with 2**scale vertices and edge_factor * 2**scale edges: skewed degrees (hubs of
    degree in the thousands), plus the self-loops and duplicate edges R-MAT produces."""
    rng = np.random.default_rng(seed)
    n = 1 << scale
    m = edge_factor * n
    src = np.zeros(m, dtype=np.int64)
    dst = np.zeros(m, dtype=np.int64)
    for level in range(scale):
        r = rng.random(m)
        down = r >= a + b  # quadrants c and d
        right = ((r >= a) & (r < a + b)) | (r >= a + b + c)  # quadrants b and d
        src |= down.astype(np.int64) << level
        dst |= right.astype(np.int64) << level
    relabel = rng.permutation(n)
    src, dst = relabel[src], relabel[dst]
    if num_weights is None:
        weight = (
            rng.random(m).astype(dtype)
            if np.dtype(dtype).kind == "f"
            else rng.integers(0, 2**30, size=m).astype(dtype)
        )
    else:
        weight = draw_weights(rng, weight_pool(rng, dtype, num_weights), m)
    return EdgeGraph(src, dst, weight, n, f"rmat-{scale}-{edge_factor}")


def dense_graph(
    seed: int = 0,
    num_vertices: int = 2000,
    num_edges: int = 20000,
    *,
    dtype: Any = np.int32,
    num_weights: int | None = 6,
    pool: np.ndarray | None = None,
) -> EdgeGraph:
    """Average degree 2m/n well above 4, so ECL-MST's filtering phase runs; many ties
    straddle the filter threshold."""
    g = random_graph(
        seed,
        num_vertices,
        num_edges,
        dtype=dtype,
        num_weights=num_weights,
        pool=pool,
        self_loops=0.02,
        parallel=0.05,
    )
    return replace(g, name=f"dense-{seed}-{num_vertices}-{num_edges}")


def light_clique_graph(seed: int = 0, num_vertices: int = 600, dtype: Any = np.int64) -> EdgeGraph:
    """Filtering adversary: the lightest 2n+ edges all lie inside a 40-vertex clique (with
    parallel copies), so the first phase leaves almost every vertex untouched and the
    forest is decided by the second phase."""
    rng = np.random.default_rng(seed)
    n = num_vertices
    clique = rng.choice(n, size=40, replace=False)
    k = 3 * n
    cs, cd = rng.choice(clique, size=k), rng.choice(clique, size=k)
    cw = rng.integers(-50, -40, size=k)
    rest = 3 * n
    rs, rd = rng.integers(0, n, size=rest), rng.integers(0, n, size=rest)
    rw = rng.integers(-40, 10, size=rest)
    src, dst = np.concatenate([cs, rs]), np.concatenate([cd, rd])
    weight = np.concatenate([cw, rw]).astype(dtype)
    order = rng.permutation(src.size)
    return EdgeGraph(src[order], dst[order], weight[order], n, f"light-clique-{seed}")


def rounding_triangle(dtype: Any) -> EdgeGraph:
    """A triangle whose exact forest is {0, 2} but {0, 1} if the weights were rounded to
    a narrower type (float32 for float64 and int32, float64 for int64, float16 for
    float32): edge 2 is
    the lightest, edge 0 the middle one, and rounding makes all three tie, so the tie
    rule would keep the two smallest ids instead."""
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        weight = np.array([1.0 + 2.0**-41, 1.0 + 2.0**-40, 1.0], dtype=dtype)
    elif dtype == np.int64:
        weight = np.array([2**60 + 1, 2**60 + 2, 2**60], dtype=dtype)
    elif dtype == np.int32:
        weight = np.array([2**30 + 1, 2**30 + 2, 2**30], dtype=dtype)
    elif dtype == np.float32:
        weight = np.array([1 + 2.0**-23, 1 + 2.0**-22, 1.0], dtype=dtype)
    else:
        raise ValueError(f"no narrower type to round {dtype} to")
    src = np.array([0, 1, 2], dtype=np.int64)
    dst = np.array([1, 2, 0], dtype=np.int64)
    return EdgeGraph(src, dst, weight, 3, f"rounding-triangle-{dtype}")


ROUNDED_TO: dict[str, Any] = {
    "float64": np.float32,
    "int32": np.float32,
    "int64": np.float64,
    "float32": np.float16,
}


def rounded(weight: np.ndarray) -> np.ndarray:
    """``weight`` rounded to the narrower type a careless backend might key on."""
    return weight.astype(ROUNDED_TO[weight.dtype.name])


#: row lengths around the GPU backend's switches (warp processing, chunked hub rows)
LADDER_DEGREES = (3, 4, 5, 15, 16, 17, 31, 32, 33, 255, 256, 257, 511, 512, 513, 1000, 4097)


def hub_ladder_graph(
    seed: int = 0,
    num_vertices: int = 3000,
    *,
    degrees: tuple[int, ...] = LADDER_DEGREES,
    dtype: Any = np.int32,
    num_weights: int | None = 5,
) -> EdgeGraph:
    """Hubs whose rows have exactly the given lengths (edges to random other vertices, some
    parallel), so every boundary of a degree-based work split is hit on both sides."""
    rng = np.random.default_rng(seed)
    hubs = rng.choice(num_vertices, size=len(degrees), replace=False)
    others = np.setdiff1d(np.arange(num_vertices), hubs)
    src = np.repeat(hubs, degrees).astype(np.int64)
    dst = rng.choice(others, size=src.size).astype(np.int64)
    flip = rng.random(src.size) < 0.5
    src, dst = np.where(flip, dst, src), np.where(flip, src, dst)
    size = num_weights if num_weights is not None else src.size
    weight = draw_weights(rng, weight_pool(rng, dtype, size), src.size)
    order = rng.permutation(src.size)
    return EdgeGraph(src[order], dst[order], weight[order], num_vertices, f"hub-ladder-{num_vertices}")


def star_graph(num_leaves: int, seed: int = 0, *, dtype: Any = np.float64, num_weights: int = 1) -> EdgeGraph:
    """One hub joined to every other vertex (and a few leaves twice): a single huge row."""
    rng = np.random.default_rng(seed)
    leaves = np.concatenate(
        [np.arange(1, num_leaves + 1), rng.integers(1, num_leaves + 1, size=num_leaves // 10)]
    )
    hub = np.zeros(leaves.size, dtype=np.int64)
    weight = draw_weights(rng, weight_pool(rng, dtype, num_weights), leaves.size)
    order = rng.permutation(leaves.size)
    return EdgeGraph(hub, leaves[order], weight[order], num_leaves + 1, f"star-{num_leaves}")
