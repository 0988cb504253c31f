"""The point-set half of the warm-up: every kernel and CuPy specialization a point-set request meets.

The hierarchy's kernels (``kernels/emst.cu``: one module, every template) and the brute-force ones
(``kernels/brute.cu``; on Hopper also ``kernels/brute_wgmma.cu``) compile on their first use; CuPy
compiles an elementwise or reduction kernel for each dtype it first meets, and picks some
reductions' block sizes by the size of their input (the number of points, of coordinates, the lists'
width): so trees, core distances and query lists run here on point sets of every power-of-two size
class up to 2^14 points, coordinates up to 1,024 and list widths up to 256, from NumPy and from CuPy
points. CuPy also concatenates more than 8 arrays with a kernel of its own (the index's
per-coordinate bounds of more than 8 coordinates; brute force's edges of more than 8 Borůvka
rounds): hence 20 coordinates, and a part of its own. Brute force's searches take blocks of rows and
tiles of targets: a part meets several of each on small sets first (the same paths as 2^13 + 1 and
2^14 + 1 points take). The metrics' parts compile the hierarchy's minkowski build,
``kernels/metrics.cu`` and ``kernels/precomputed.cu`` and run each metric's trees, core distances
and query lists once (:data:`WARM_UP_METRICS`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from .._backend.resolve import Backend, resolve_backend
from .index import SPATIAL_MAX_DIMENSIONS, build_index, tree_on_index, validated
from .metrics import EUCLIDEAN, Metric, resolve_metric
from .neighbours import kth_distances, query_neighbours, query_points

#: point counts (2^j + 1) and min_samples (list widths 16 to 256) the warm-up computes trees of
WARM_UP_POINTS: tuple[int, ...] = tuple(2**j + 1 for j in range(1, 15))
#: coordinates of the size sweep: the hierarchy's fixed-size kernels (1 to 3), its general one
#: with at most 8 coordinates and with more (CuPy's concatenation of many arrays), brute force
WARM_UP_DIMENSIONS: tuple[int, ...] = (1, 2, 3, 8, 20, SPATIAL_MAX_DIMENSIONS["gpu"] + 1)
WARM_UP_MIN_SAMPLES: tuple[int, ...] = (1, 2, 10, 20, 60, 120, 240)


#: a named piece of the warm-up (see :func:`point_parts`)
Part = tuple[str, Callable[[], object]]


def _tree(
    points: Any, backend: str, k: int, search: str = "auto", *, metric: Metric = EUCLIDEAN, **engine: Any
) -> None:
    coords, chosen, from_cupy = validated(points, backend, metric)  # type: ignore[arg-type]
    index = build_index(points, coords, chosen, from_cupy, search, metric=metric, **engine)  # type: ignore[arg-type]
    k = min(k, index.n)
    tree_on_index(index, k, time.perf_counter(), fresh=True, on_device=chosen == "gpu")
    tree_on_index(
        index, k, time.perf_counter(), fresh=False, alpha=0.5 if metric.name != "haversine" else 1.0
    )
    if metric.precomputed:
        return
    queries, _ = query_points(index, points[: max(1, index.n // 2)])
    query_neighbours(index, queries, k)
    kth_distances(index, k)


def warm_up_points(backend: Backend = "auto", sizes: Sequence[int] = WARM_UP_POINTS) -> str:
    """Compute what a point-set request can (trees, core distances, query lists) on small sets of
    every size class of ``sizes`` points, by the hierarchy and by brute force, on the GPU: every
    part of :func:`point_parts`, in order (the CPU backend compiles nothing). Returns the backend."""
    chosen = resolve_backend(backend)
    if chosen != "gpu":  # the CPU backend compiles nothing
        return chosen
    for _, part in point_parts(sizes):
        part()
    return chosen


def point_parts(sizes: Sequence[int] = WARM_UP_POINTS) -> list[Part]:
    """The GPU's point-set warm-up, in named parts (each independent of the others, so any subset can
    run, in this order: ``gpu_core._warm_up.warm_start`` runs those that loaded a kernel): many
    arrays concatenated, brute force's blocks and tiles, then trees of ``sizes`` points of each of
    :data:`WARM_UP_DIMENSIONS`, every list width, the coordinates' size classes (CuPy points, a
    worker's, first; NumPy points, the library's, after) and :data:`MEDIUM_SETS`. Imports the
    modules the point paths import on first use now, on the caller's thread: the parts may run
    beside it after ready, while requests run."""
    import cupy

    from . import brute_exact, precomputed_gpu  # noqa: F401 (imported before ready, see above)

    moves: tuple[tuple[str, Callable[[Any], Any]], ...] = (("cupy", cupy.asarray), ("numpy", np.asarray))
    parts: list[Part] = [("points: many arrays concatenated", partial(_many_parts, cupy))]
    for name, move in moves:
        parts.append((f"points brute force blocks and tiles, {name}", partial(_blocks_and_tiles, move)))
    for n in sizes:
        for d in WARM_UP_DIMENSIONS:
            for name, move in moves:
                parts.append((f"points n={n} d={d}, {name}", partial(_point_size, move, d, n)))
    for name, move in moves:
        for k in WARM_UP_MIN_SAMPLES:
            parts.append((f"points min_samples={k}, {name}", partial(_list_width, move, k)))
        for d in COORDINATE_CLASSES:
            parts.append((f"points d={d} float32, {name}", partial(_coordinates, move, d)))
    for d, k in MEDIUM_SETS:
        parts.append((f"points n={MEDIUM_POINTS} d={d} min_samples={k}, cupy", partial(_medium_set, d, k)))
    for metric, params in WARM_UP_METRICS:
        for name, move in moves:
            parts.append((f"points metric={metric}, {name}", partial(_metric, move, metric, params)))
    return parts


#: the metrics of the warm-up's own parts (Euclidean is everything above)
WARM_UP_METRICS: tuple[tuple[str, dict[str, Any] | None], ...] = (
    ("manhattan", None), ("chebyshev", None), ("minkowski", {"p": 3}), ("cosine", None), ("haversine", None),
    ("precomputed", None),
)  # fmt: skip


def _metric(move: Callable[[Any], Any], name: str, params: dict[str, Any] | None) -> None:
    """A metric's trees (min_samples 1 and 5, alpha), core distances and query lists on small sets of
    the hierarchy's fixed and general sizes and of brute force's (a precomputed matrix: its rows)."""
    metric = resolve_metric(name, params)
    rng = np.random.default_rng(len(name))
    if name == "haversine":
        sets = [np.column_stack((rng.uniform(-1.5, 1.5, 65), rng.uniform(-3, 3, 65)))]
    elif name == "precomputed":
        x = rng.random((65, 3))
        sets = [np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(axis=2))]
    else:
        sets = [rng.random((65, d)) + 0.5 for d in (1, 2, 3, 8, SPATIAL_MAX_DIMENSIONS["gpu"] + 1)]
    for points in sets:
        for k in (1, 5):
            _tree(move(points), "gpu", k, metric=metric)


def _many_parts(cp: Any) -> None:
    """CuPy's kernels that concatenate more than 8 arrays in one launch, of the same size and not,
    for the dtypes brute force's Borůvka rounds concatenate (their edges' ends and weights)."""
    for dtype in (cp.int64, cp.float64):
        cp.concatenate([cp.arange(i + 1, dtype=dtype) for i in range(9)])
        cp.concatenate([cp.arange(2, dtype=dtype) for _ in range(9)])


def _blocks_and_tiles(move: Callable[[Any], Any]) -> None:
    """Brute force in batches of 64 rows, with blocks of 64 and 128 rows: a last block of one row and
    a last tile of one target (the shapes 2^16 + 1 points meet with the real batches)."""
    for n in (65, 129):
        points = np.random.default_rng(n).random((n, SPATIAL_MAX_DIMENSIONS["gpu"] + 1))
        for k in (1, 5):
            for rows in (64, 128):
                _tree(move(points), "gpu", k, "brute", batch=64, rows_per_block=rows)


def _point_size(move: Callable[[Any], Any], d: int, n: int) -> None:
    """Trees (min_samples 1 and 5), core distances and query lists of ``n`` points of ``d``
    coordinates (a duplicate among them: ties), handed over as ``move`` makes them."""
    points = np.random.default_rng((d, n)).random((n, d))
    points[n // 2] = points[0]
    for k in (1, 5):
        _tree(move(points), "gpu", k)


def _list_width(move: Callable[[Any], Any], k: int) -> None:
    """A list width class (min_samples ``k``), by brute force and by the hierarchy (whose lists of
    more than 64 are the host's)."""
    points = np.random.default_rng(1).random((600, SPATIAL_MAX_DIMENSIONS["gpu"] + 1))
    _tree(move(points), "gpu", k)
    _tree(move(points[:, :3]), "gpu", k)


#: points, and (coordinates, min_samples) of the sets where wide lists meet many points: the size
#: sweep's lists are narrow (min_samples 1 and 5), the widths' sets small (600 points), and a
#: medium set with wide lists loads kernels that neither does
MEDIUM_POINTS = 5000
MEDIUM_SETS: tuple[tuple[int, int], ...] = ((5, 7), (5, 30), (64, 7), (64, 30), (64, 60))


def _medium_set(d: int, k: int) -> None:
    import cupy

    _tree(cupy.asarray(np.random.default_rng((d, k)).random((MEDIUM_POINTS, d))), "gpu", k)


#: coordinates of brute force's size classes (norms, the exact recheck), float32 points
COORDINATE_CLASSES: tuple[int, ...] = (64, 128, 256, 512, 1024)


def _coordinates(move: Callable[[Any], Any], d: int) -> None:
    points = np.random.default_rng(d).random((40, d)).astype(np.float32)
    _tree(move(points), "gpu", 3)
