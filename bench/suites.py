"""The benchmark suites: which graphs each one measures, and the issue-2 reference timings."""

from __future__ import annotations

import fnmatch
from typing import Any

from .generators import GraphSpec
from .jobs import FULL_JOBS, QUICK_JOBS, JobsSpec
from .load import FULL_LOAD, QUICK_LOAD, LoadSpec
from .points import PointsSpec
from .service import ServiceSpec

#: Reference CUDA ECL-MST v1.0 on an NVIDIA H200, graph on the device, median of 5 (issue 2).
REFERENCE_GPU = "NVIDIA H200"
#: Target on an H100: no slower than this many times the H200 reference.
H100_ALLOWANCE = 1.3
#: "Stretch": a production rewrite of ECL-MST, H200, float weights (issue 2).
STRETCH_MS = {"grid-1024-float": 1.34, "rmat-16-float": 0.54, "rmat-22-float": 7.9}


def _g(
    name: str,
    kind: str,
    weights: str = "int",
    *,
    simple: bool = True,
    reference: tuple[float, int] | None = None,
    label: str = "",
    **params: object,
) -> GraphSpec:
    return GraphSpec(
        name=name,
        kind=kind,
        params=tuple(params.items()),
        weights=weights,
        simple=simple,
        reference=reference,
        label=label,
    )


def _variants(name: str, kind: str, weights: tuple[str, ...], **params: Any) -> list[GraphSpec]:
    return [_g(f"{name}-{w}", kind, w, **params) for w in weights]


# Issue 2's "Performance" table, one row each (random int weights), then variants.
FULL_GRAPHS: list[GraphSpec] = [
    _g("grid-1024", "grid", rows=1024, reference=(2.17, 4_190_208), label="2D grid 1024x1024"),
    _g(
        "delaunay-20",
        "delaunay",
        num_points=1 << 20,
        reference=(2.09, 6_291_380),
        label="Delaunay triangulation of 2^20 random points",
    ),
    _g(
        "rmat-16",
        "rmat",
        scale=16,
        edge_factor=8,
        reference=(0.90, 1_041_386),
        label="RMAT 2^16, 8 edges/vertex",
    ),
    _g(
        "rmat-22",
        "rmat",
        scale=22,
        edge_factor=8,
        reference=(8.55, 67_068_656),
        label="RMAT 2^22, 8 edges/vertex",
    ),
    _g(
        "random-23",
        "random",
        num_vertices=1 << 23,
        neighbours=4,
        reference=(15.3, 67_108_826),
        label="random, 2^23 vertices, 4 random neighbours each",
    ),
    _g(
        "kron-21",
        "kronecker",
        scale=21,
        edge_factor=48,
        reference=(22.3, 181_139_116),
        label="Kronecker 2^21, 48 edges/vertex",
    ),
    _g("road-2048", "road", side=2048, label="road-like, 2048x2048 perturbed grid, avg degree ~2.6"),
    *_variants("grid-1024", "grid", ("float", "ties"), rows=1024),
    *_variants("rmat-16", "rmat", ("float", "ties"), scale=16, edge_factor=8),
    *_variants("rmat-22", "rmat", ("float",), scale=22, edge_factor=8),
    _g(
        "rmat-16-raw",
        "rmat",
        simple=False,
        scale=16,
        edge_factor=8,
        label="RMAT 2^16 with self-loops and parallel edges",
    ),
]

# CPU-only, small (1e5 to 1e6 directed edges): every shape, every weight kind, NetworkX included.
QUICK_GRAPHS: list[GraphSpec] = [
    _g("grid-256", "grid", rows=256),
    _g("road-256", "road", side=256),
    _g("delaunay-15", "delaunay", num_points=1 << 15),
    _g("rmat-14", "rmat", scale=14, edge_factor=8),
    _g("random-16", "random", num_vertices=1 << 16, neighbours=4),
    _g("kron-14", "kronecker", scale=14, edge_factor=16),
    *_variants("grid-256", "grid", ("float", "ties"), rows=256),
    *_variants("rmat-14", "rmat", ("float64", "int64"), scale=14, edge_factor=8),
    _g("rmat-14-raw", "rmat", simple=False, scale=14, edge_factor=8),
]


FULL_SERVICE: list[ServiceSpec] = [
    ServiceSpec("service-rmat-16", FULL_GRAPHS[2], requests=200, uploads=5),
    ServiceSpec("service-grid-1024", FULL_GRAPHS[0], requests=100, uploads=5),
    ServiceSpec("service-rmat-22", FULL_GRAPHS[3], requests=20, uploads=3),
    # a forest of ~8.4M edges (100 MB of npz): the result download at scale
    ServiceSpec("service-random-23", FULL_GRAPHS[4], requests=20, uploads=3),
]
QUICK_SERVICE: list[ServiceSpec] = [
    ServiceSpec("service-grid-256", QUICK_GRAPHS[0], requests=30, uploads=3),
]

SUITES: dict[str, tuple[list[GraphSpec], list[ServiceSpec]]] = {
    "quick": (QUICK_GRAPHS, QUICK_SERVICE),
    "full": (FULL_GRAPHS, FULL_SERVICE),
}


#: the load benchmarks of each suite (bench/load.py, bench/jobs.py), run last
LOADS: dict[str, list[LoadSpec | JobsSpec]] = {
    "quick": [QUICK_LOAD, QUICK_JOBS],
    "full": [FULL_LOAD, FULL_JOBS],
}
#: the point-set part of each suite (bench/points.py: EMST and HDBSCAN*, its own sizes), run last
POINTS: dict[str, list[PointsSpec]] = {s: [PointsSpec("points", s)] for s in ("quick", "full")}
Item = GraphSpec | ServiceSpec | LoadSpec | JobsSpec | PointsSpec


def benchmark_names(suite: str) -> list[str]:
    return [i.name for i in _items(suite)]


def _items(suite: str) -> list[Item]:
    graphs, services = SUITES[suite]
    return [*graphs, *services, *LOADS[suite], *POINTS[suite]]


def select(suite: str, only: list[str] | None) -> list[Item]:
    """The suite's benchmarks whose names match one of the ``only`` patterns (shell globs); all without."""
    items = _items(suite)
    if not only:
        return items
    unknown = [p for p in only if not any(fnmatch.fnmatchcase(i.name, p) for i in items)]
    if unknown:
        raise ValueError(
            f"--only {' '.join(unknown)} matches no benchmark of the {suite} suite; "
            f"known: {', '.join(i.name for i in items)}."
        )
    return [i for i in items if any(fnmatch.fnmatchcase(i.name, p) for p in only)]
