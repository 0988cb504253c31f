"""Deterministic, seeded, vectorized graph generators for the benchmarks.

Every generator returns an :class:`Edges` that unpacks as ``src, dst, weight, n``.
Each undirected edge is listed **once** (the engine treats edges as undirected;
"directed edges" in the reference table of issue 2 are ``2 * len(src)``, the
CSR count). Vertex ids are ``int32``.

With ``simple=True`` (the default, and what the reference graphs are: "we
modified the graphs to eliminate self-loops and multiple edges", ECL-MST
paper, Section 5) self-loops and repeated vertex pairs are removed and the
edges come out sorted by ``(min(u, v), max(u, v))`` with ``src < dst``; what
was removed is counted in :attr:`Edges.stats`. ``simple=False`` keeps what the
generator drew, in the order it drew it (self-loops and parallel edges
included), which the engine must handle as well.

Weights (``weights=``):

* ``"int"``: int32, uniform in ``[1, 2**24)`` (exact in float32 and float64);
* ``"int64"``: int64, uniform in ``[1, 2**40)``;
* ``"float"``: float32, uniform in ``(0, 1]``;
* ``"float64"``: float64, uniform in ``(0, 1]``;
* ``"ties"``: int32, every weight 1 (the tie order ``(weight, edge_id)`` decides everything).

Weights are positive so that SciPy (which drops explicit zeros) sees every edge.
Topologies are cached as ``.npz`` (see :func:`load_or_make`); weights are drawn
on load, they are cheap.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: bump when a generator changes what it produces, so stale cache files are not used
GENERATOR_VERSION = 1
WEIGHT_KINDS: tuple[str, ...] = ("int", "int64", "float", "float64", "ties")
DEFAULT_CACHE = Path(__file__).resolve().parent / "cache"

IdArray = np.ndarray[Any, np.dtype[np.int32]]


@dataclass
class Topology:
    """Edges without weights, as a generator made them."""

    src: IdArray
    dst: IdArray
    num_vertices: int
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class Edges:
    """A generated graph; unpacks as ``src, dst, weight, num_vertices``."""

    src: IdArray
    dst: IdArray
    weight: np.ndarray[Any, Any]
    num_vertices: int
    stats: dict[str, Any] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.src, self.dst, self.weight, self.num_vertices))

    @property
    def num_edges(self) -> int:
        """Undirected edges as listed."""
        return int(self.src.shape[0])

    @property
    def directed_edges(self) -> int:
        """CSR edge count (each undirected edge in both directions), as the reference table counts."""
        return 2 * self.num_edges


# --------------------------------------------------------------------------- helpers


def _rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), int(stream)])


def _simplify(
    src: np.ndarray[Any, Any], dst: np.ndarray[Any, Any], n: int, stats: dict[str, Any]
) -> Topology:
    """Drop self-loops and repeated pairs; sort by ``(min, max)``; count what went."""
    generated = int(src.shape[0])
    u = np.minimum(src, dst)
    v = np.maximum(src, dst)
    del src, dst
    loops = u == v
    num_loops = int(loops.sum())
    key = u.astype(np.uint64)
    key *= np.uint64(n)
    key += v.astype(np.uint64)
    del u, v
    if num_loops:
        key = key[~loops]
    del loops
    key.sort()
    if key.shape[0]:
        keep = np.empty(key.shape[0], dtype=bool)
        keep[0] = True
        np.not_equal(key[1:], key[:-1], out=keep[1:])
        key = key[keep]
        del keep
    u64, v64 = np.divmod(key, np.uint64(n))
    del key
    stats.update(
        generated_edges=generated,
        self_loops_removed=num_loops,
        duplicates_removed=generated - num_loops - int(u64.shape[0]),
        simple=True,
    )
    return Topology(u64.astype(np.int32), v64.astype(np.int32), n, stats)


def _finish(
    src: np.ndarray[Any, Any], dst: np.ndarray[Any, Any], n: int, simple: bool, stats: dict[str, Any]
) -> Topology:
    if simple:
        return _simplify(src, dst, n, stats)
    stats.update(
        generated_edges=int(src.shape[0]),
        self_loops=int((src == dst).sum()),
        simple=False,
    )
    return Topology(src.astype(np.int32, copy=False), dst.astype(np.int32, copy=False), n, stats)


def make_weights(m: int, kind: str = "int", seed: int = 0) -> np.ndarray[Any, Any]:
    """``m`` positive weights of the given kind (see the module docstring), deterministic in ``seed``."""
    rng = _rng(seed, 0x5EED)
    if kind == "int":
        return rng.integers(1, 2**24, size=m, dtype=np.int32)
    if kind == "int64":
        return rng.integers(1, 2**40, size=m, dtype=np.int64)
    if kind == "float":
        return np.float32(1) - rng.random(m, dtype=np.float32)
    if kind == "float64":
        return 1.0 - rng.random(m, dtype=np.float64)
    if kind == "ties":
        return np.ones(m, dtype=np.int32)
    raise ValueError(f"unknown weight kind {kind!r}; choose one of {', '.join(WEIGHT_KINDS)}.")


def with_weights(topo: Topology, weights: str = "int", seed: int = 0) -> Edges:
    """Attach weights to a topology."""
    w = make_weights(int(topo.src.shape[0]), weights, seed)
    stats = {**topo.stats, "weights": weights, "weight_dtype": str(w.dtype)}
    return Edges(topo.src, topo.dst, w, topo.num_vertices, stats)


# --------------------------------------------------------------------------- topologies


def grid_2d_topology(rows: int, cols: int | None = None, *, seed: int = 0, simple: bool = True) -> Topology:
    """A ``rows x cols`` 4-neighbour grid; vertex ``r * cols + c``. 1024x1024 has 2,095,104 edges."""
    cols = rows if cols is None else cols
    n = rows * cols
    ids = np.arange(n, dtype=np.int32).reshape(rows, cols)
    src = np.concatenate([ids[:, :-1].ravel(), ids[:-1, :].ravel()])
    dst = np.concatenate([ids[:, 1:].ravel(), ids[1:, :].ravel()])
    return _finish(src, dst, n, simple, {"rows": rows, "cols": cols})


def road_topology(
    side: int, *, keep: float = 0.62, diagonal: float = 0.05, seed: int = 0, simple: bool = True
) -> Topology:
    """A road-like sparse graph: a ``side x side`` grid whose edges are each kept with
    probability ``keep``, plus a diagonal ``(r, c)-(r+1, c+1)`` with probability
    ``diagonal``. Average degree ``~ 4 * keep + 2 * diagonal`` (2.58 by default);
    above the percolation threshold (0.5) most vertices form one giant component,
    the rest small pieces and isolated vertices, like a real road network's islands.
    """
    rng = _rng(seed, 0x20AD)
    n = side * side
    ids = np.arange(n, dtype=np.int32).reshape(side, side)
    pairs = [
        (ids[:, :-1].ravel(), ids[:, 1:].ravel(), keep),
        (ids[:-1, :].ravel(), ids[1:, :].ravel(), keep),
        (ids[:-1, :-1].ravel(), ids[1:, 1:].ravel(), diagonal),
    ]
    src_parts, dst_parts = [], []
    for s, d, p in pairs:
        mask = rng.random(s.shape[0]) < p
        src_parts.append(s[mask])
        dst_parts.append(d[mask])
    src = np.concatenate(src_parts)
    dst = np.concatenate(dst_parts)
    return _finish(src, dst, n, simple, {"side": side, "keep": keep, "diagonal": diagonal})


def delaunay_topology(num_points: int, *, seed: int = 0, simple: bool = True) -> Topology:
    """Delaunay triangulation of ``num_points`` uniform random points in the unit square.

    ``3n - 3 - h`` edges (``h`` hull points): ~3.1M for 2^20 points. Slow
    (Qhull, a minute or so for 2^20 points): use the cache. Each triangle edge
    is shared by two triangles, so the listing is always deduplicated.
    """
    from scipy.spatial import Delaunay

    rng = _rng(seed, 0xDE1A)
    points = rng.random((num_points, 2))
    simplices = Delaunay(points).simplices.astype(np.int32, copy=False)
    src = np.concatenate([simplices[:, 0], simplices[:, 1], simplices[:, 2]])
    dst = np.concatenate([simplices[:, 1], simplices[:, 2], simplices[:, 0]])
    del simplices
    topo = _simplify(src, dst, num_points, {"points": num_points})
    # Triangles list every edge twice: that is the listing, not the generator's output.
    topo.stats["generated_edges"] = int(topo.src.shape[0])
    topo.stats["duplicates_removed"] = 0
    return topo


def _rmat_luts(a: float, b: float, c: float) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Per 16-bit random draw, the (row bit, column bit) of the chosen quadrant: a, b, c or d."""
    if min(a, b, c) < 0 or a + b + c > 1:
        raise ValueError(f"R-MAT probabilities must be non-negative with a + b + c <= 1; got {a}, {b}, {c}.")
    thresholds = np.round(np.cumsum([a, b, c]) * 65536).astype(np.int64)
    draws = np.arange(65536, dtype=np.int64)
    quadrant = (draws[:, None] >= thresholds[None, :]).sum(axis=1)  # 0=a, 1=b, 2=c, 3=d
    return (quadrant >> 1).astype(np.uint32), (quadrant & 1).astype(np.uint32)


def _rmat_edges(
    rng: np.random.Generator, scale: int, m: int, a: float, b: float, c: float, chunk: int = 1 << 22
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``m`` R-MAT edges on ``2**scale`` vertices: one 16-bit draw per level per edge."""
    if not 1 <= scale <= 31:
        raise ValueError(f"scale must lie in [1, 31], got {scale}.")
    row_bit, col_bit = _rmat_luts(a, b, c)
    src = np.empty(m, dtype=np.uint32)
    dst = np.empty(m, dtype=np.uint32)
    words = (chunk + 3) // 4
    for start in range(0, m, chunk):
        k = min(chunk, m - start)
        s = np.zeros(k, dtype=np.uint32)
        d = np.zeros(k, dtype=np.uint32)
        for _ in range(scale):
            draw = rng.bit_generator.random_raw(words).view(np.uint16)[:k]
            s <<= 1
            s |= row_bit[draw]
            d <<= 1
            d |= col_bit[draw]
        src[start : start + k] = s
        dst[start : start + k] = d
    return src, dst


def rmat_topology(
    scale: int,
    edge_factor: int = 8,
    *,
    a: float = 0.45,
    b: float = 0.15,
    c: float = 0.15,
    permute: bool = False,
    seed: int = 0,
    simple: bool = True,
) -> Topology:
    """R-MAT on ``2**scale`` vertices with ``edge_factor * 2**scale`` drawn edges.

    Defaults are GTgraph's (a, b, c = .45, .15, .15), the family of the ECL
    ``rmat16.sym``/``rmat22.sym`` inputs; no relabelling unless ``permute``.
    """
    rng = _rng(seed, 0x4A7)
    n = 1 << scale
    src, dst = _rmat_edges(rng, scale, edge_factor * n, a, b, c)
    if permute:
        perm = rng.permutation(n).astype(np.uint32)
        src = perm[src]
        dst = perm[dst]
    params = {"scale": scale, "edge_factor": edge_factor, "a": a, "b": b, "c": c, "permute": permute}
    return _finish(src, dst, n, simple, params)


def kronecker_topology(scale: int, edge_factor: int = 48, *, seed: int = 0, simple: bool = True) -> Topology:
    """Graph500 Kronecker: R-MAT with (a, b, c) = (.57, .19, .19) and a random vertex relabelling.

    Scale 21 with 48 edges per vertex draws 100.7M edges (~90M after
    deduplication, ~181M directed), ~20 s and ~4 GB of host memory here.
    """
    topo = rmat_topology(scale, edge_factor, a=0.57, b=0.19, c=0.19, permute=True, seed=seed, simple=simple)
    topo.stats["graph500"] = True
    return topo


def uniform_random_topology(
    num_vertices: int, neighbours: int = 4, *, seed: int = 0, simple: bool = True
) -> Topology:
    """Every vertex draws ``neighbours`` uniform random neighbours (2^23 x 4: ~33.5M edges)."""
    rng = _rng(seed, 0x0A4D)
    src = np.repeat(np.arange(num_vertices, dtype=np.int32), neighbours)
    dst = rng.integers(0, num_vertices, size=src.shape[0], dtype=np.int32)
    return _finish(src, dst, num_vertices, simple, {"vertices": num_vertices, "neighbours": neighbours})


# --------------------------------------------------------------------------- public generators


def _weighted(make: Callable[..., Topology]) -> Callable[..., Edges]:
    def generate(
        *args: Any, weights: str = "int", seed: int = 0, simple: bool = True, **kwargs: Any
    ) -> Edges:
        return with_weights(make(*args, seed=seed, simple=simple, **kwargs), weights, seed)

    generate.__name__ = make.__name__.removesuffix("_topology")
    generate.__doc__ = (make.__doc__ or "") + "\n\nReturns :class:`Edges` (``src, dst, weight, n``)."
    return generate


grid_2d = _weighted(grid_2d_topology)
road = _weighted(road_topology)
delaunay = _weighted(delaunay_topology)
rmat = _weighted(rmat_topology)
kronecker = _weighted(kronecker_topology)
uniform_random = _weighted(uniform_random_topology)

TOPOLOGIES: dict[str, Callable[..., Topology]] = {
    "grid": grid_2d_topology,
    "road": road_topology,
    "delaunay": delaunay_topology,
    "rmat": rmat_topology,
    "kronecker": kronecker_topology,
    "random": uniform_random_topology,
}


# --------------------------------------------------------------------------- cache


@dataclass(frozen=True)
class GraphSpec:
    """A named graph of the benchmark suites: a topology, its parameters, weights and seed."""

    name: str
    kind: str
    params: tuple[tuple[str, Any], ...]
    weights: str = "int"
    seed: int = 0
    simple: bool = True
    #: the issue-2 reference: (milliseconds on an H200, directed edges of the reference graph)
    reference: tuple[float, int] | None = None
    #: the row of the issue-2 table this graph stands for
    label: str = ""

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.params)

    def topology_key(self) -> str:
        """File stem of the cached topology: readable, plus a hash of everything that shapes it."""
        blob = json.dumps(
            {
                "kind": self.kind,
                "params": self.params,
                "seed": self.seed,
                "simple": self.simple,
                "v": GENERATOR_VERSION,
            },
            sort_keys=True,
        )
        digest = hashlib.sha256(blob.encode()).hexdigest()[:10]
        readable = "-".join(f"{k}{v}" for k, v in self.params)
        return f"{self.kind}-{readable}-s{self.seed}-{digest}"


def make_topology(spec: GraphSpec) -> Topology:
    try:
        make = TOPOLOGIES[spec.kind]
    except KeyError:
        raise ValueError(f"unknown graph kind {spec.kind!r}; known: {', '.join(TOPOLOGIES)}.") from None
    return make(**spec.kwargs, seed=spec.seed, simple=spec.simple)


def load_or_make(spec: GraphSpec, cache_dir: Path | None = DEFAULT_CACHE) -> tuple[Edges, dict[str, Any]]:
    """The graph of ``spec``, from ``cache_dir`` when it was made before; ``cache_dir=None`` never caches.

    Returns the edges and how they were obtained (``source``: cache or generated, seconds).
    """
    start = time.perf_counter()
    path = None if cache_dir is None else Path(cache_dir) / f"{spec.topology_key()}.npz"
    topo = None
    if path is not None and path.exists():
        try:
            with np.load(path, allow_pickle=False) as npz:
                topo = Topology(
                    npz["src"], npz["dst"], int(npz["num_vertices"]), json.loads(str(npz["stats"]))
                )
            source = "cache"
        except (OSError, ValueError, KeyError):
            topo = None  # a torn or stale file: make it again
    if topo is None:
        topo = make_topology(spec)
        source = "generated"
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npz")
            np.savez(
                tmp,
                src=topo.src,
                dst=topo.dst,
                num_vertices=np.int64(topo.num_vertices),
                stats=np.str_(json.dumps(topo.stats)),
            )
            os.replace(tmp, path)
    edges = with_weights(topo, spec.weights, spec.seed)
    edges.stats.update(kind=spec.kind, **{k: v for k, v in spec.params})
    return edges, {
        "source": source,
        "seconds": round(time.perf_counter() - start, 3),
        "path": str(path) if path else None,
    }
