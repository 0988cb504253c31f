"""Minimum spanning forests: exact edge ids against Kruskal, totals against SciPy, invariants.

Every test body runs on both backends (``cpu`` everywhere, ``gpu`` where a device is
visible); the GPU-only tests at the end compare the two backends bit for bit and
run graphs of 10^6-10^7 edges.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpu_core
from gpu_core import Backend
from gpu_core._graphs.forest import filter_threshold
from tests.utils.backends import BACKENDS
from tests.utils.graphs import (
    DTYPES,
    EdgeGraph,
    dense_graph,
    empty_graph,
    extreme_weight_pool,
    grid_graph,
    hub_ladder_graph,
    light_clique_graph,
    near_weight_pool,
    parallel_edges_only,
    random_graph,
    rmat_graph,
    rounded,
    rounding_triangle,
    self_loops_only,
    star_graph,
)
from tests.utils.oracles import (
    assert_matches_oracles,
    assert_total_close,
    assert_valid_forest,
    kruskal_edge_ids,
    scipy_forest_total,
)

DTYPE_PARAMS = [pytest.param(d, id=d.name) for d in DTYPES]


def compute(graph: EdgeGraph, backend: Backend) -> gpu_core.SpanningForest:
    g = gpu_core.Graph(graph.src, graph.dst, graph.weight, graph.num_vertices, backend=backend)
    assert g.backend == backend
    result = g.minimum_spanning_forest()
    assert result.backend == backend
    return result


def check(graph: EdgeGraph, backend: Backend, *, scipy: bool = True) -> gpu_core.SpanningForest:
    result = compute(graph, backend)
    try:
        assert_matches_oracles(result, *graph.arrays, graph.num_vertices, scipy=scipy)
    except AssertionError as exc:
        raise AssertionError(f"{graph!r}: {exc}") from exc
    return result


def nonloop_edges(graph: EdgeGraph) -> int:
    return int(np.count_nonzero(graph.src != graph.dst))


# ---------------------------------------------------------------- many random graphs


def seeded_graph(seed: int, dtype: np.dtype[Any]) -> EdgeGraph:
    """A random graph whose shape (size, ties, loops, parallel edges, components, isolated
    vertices, sign of the weights) is itself drawn from the seed."""
    rng = np.random.default_rng(10_000 + seed)
    n = int(rng.choice([1, 2, 3, 5, 8, 20, 60, 150]))
    m = int(rng.integers(0, 4 * n + 2)) if n > 1 else int(rng.integers(0, 3))
    isolated = int(rng.integers(0, 4)) if n > 4 else 0
    return random_graph(
        seed,
        n,
        m,
        dtype=dtype,
        num_weights=[1, 2, 3, 8, None][seed % 5],
        negative=bool(seed % 3),
        self_loops=float(rng.choice([0.0, 0.05, 0.3])),
        parallel=float(rng.choice([0.0, 0.1, 0.4])),
        components=int(rng.integers(1, 5)),
        isolated=isolated,
    )


SEEDS = range(40)


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_seeded_random_graphs(backend: Backend, dtype: np.dtype[Any]) -> None:
    sizes = set()
    for seed in SEEDS:
        graph = seeded_graph(seed, dtype)
        sizes.add((graph.num_vertices > 0, graph.num_edges > 0))
        check(graph, backend)
    assert sizes >= {(True, True), (True, False)}  # the seeds do cover edgeless graphs


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_near_weights_are_not_rounded(backend: Backend, dtype: np.dtype[Any]) -> None:
    """Weights 1 apart beyond 2**53 (int64), beyond 2**24 (int32), 2**-40 apart (float64),
    adjacent float32 values: any rounding to a narrower key changes some answers."""
    pool = near_weight_pool(dtype)
    sensitive = 0
    for seed in range(12):
        graph = random_graph(seed, 40, 120, pool=pool, dtype=dtype, parallel=0.3)
        check(graph, backend)
        exact = kruskal_edge_ids(*graph.arrays, graph.num_vertices)
        sensitive += exact != kruskal_edge_ids(graph.src, graph.dst, rounded(graph.weight), 40)
    assert sensitive >= 6, f"only {sensitive} of 12 graphs would detect weights rounded to a narrower type"


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_extreme_weights(backend: Backend, dtype: np.dtype[Any]) -> None:
    """The ends of each dtype's range, -1/0/1, signed zeros, subnormals: order-preserving
    key transforms (sign flips, float bit tricks) must get all of them right."""
    pool = extreme_weight_pool(dtype)
    for seed in range(8):
        graph = random_graph(seed, 30, 90, pool=pool, dtype=dtype, parallel=0.3, components=2)
        check(graph, backend, scipy=False)  # SciPy's float64 cannot hold these sums exactly


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_signed_zeros_tie_by_edge_id(backend: Backend, dtype: str) -> None:
    """-0.0 == 0.0, so they tie and the edge id decides. Were -0.0 ordered below +0.0
    (raw IEEE bits), edge 2 would win over edge 1."""
    graph = EdgeGraph(
        np.array([0, 1, 2]), np.array([1, 2, 0]), np.array([0.0, 0.0, -0.0], dtype=dtype), 3, "zeros"
    )
    assert kruskal_edge_ids(graph.src, graph.dst, graph.weight.view(f"i{graph.weight.itemsize}"), 3) != (
        kruskal_edge_ids(*graph.arrays, 3)
    )
    check(graph, backend)
    path = EdgeGraph(np.array([0, 1]), np.array([1, 2]), np.array([-0.0, 0.0], dtype=dtype), 3, "zero path")
    result = check(path, backend)  # the weights come back bit for bit: -0.0 stays -0.0
    assert np.signbit(result.weights).tolist() == [True, False]


# ---------------------------------------------------------------- property test


@st.composite
def edge_lists(draw: st.DrawFn) -> EdgeGraph:
    dtype = draw(st.sampled_from(DTYPES))
    n = draw(st.integers(0, 14))
    m = draw(st.integers(0, 45)) if n else 0
    values: st.SearchStrategy[int] | st.SearchStrategy[float]
    if dtype.kind == "i":
        info = np.iinfo(dtype)
        values = st.integers(int(info.min), int(info.max)) | st.integers(-3, 3)
    elif dtype == np.float32:
        top = float(np.finfo(np.float32).max)
        values = st.floats(-top, top, allow_nan=False, allow_infinity=False, width=32)
    else:  # below 1e300 so that totals of a few dozen edges stay finite
        values = st.floats(-1e300, 1e300, allow_nan=False, allow_infinity=False)
    pool = draw(st.lists(values, min_size=1, max_size=5))  # few distinct values: ties
    src = draw(st.lists(st.integers(0, max(n - 1, 0)), min_size=m, max_size=m))
    dst = draw(st.lists(st.integers(0, max(n - 1, 0)), min_size=m, max_size=m))
    weight = draw(st.lists(st.sampled_from(pool), min_size=m, max_size=m))
    extra = draw(st.integers(0, 3))  # isolated vertices beyond the largest id
    return EdgeGraph(
        np.array(src, dtype=np.int64),
        np.array(dst, dtype=np.int64),
        np.array(weight, dtype=dtype),
        n + extra if n else draw(st.integers(0, 2)),
        "hypothesis",
    )


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=edge_lists())
def test_property_matches_kruskal(backend: Backend, graph: EdgeGraph) -> None:
    result = compute(graph, backend)
    assert_matches_oracles(result, *graph.arrays, graph.num_vertices, scipy=False)
    w = graph.weight
    if w.size == 0 or np.abs(w.astype(np.float64)).max() < 2**40:
        total, components = scipy_forest_total(*graph.arrays, graph.num_vertices)
        assert result.num_components == components
        scale = float(np.abs(w.astype(np.float64)).sum()) * (graph.num_vertices + 1) + 1
        assert_total_close(float(result.total_weight), total, scale, "total weight vs SciPy")


# ---------------------------------------------------------------- small and degenerate graphs


def _edgeless(n: int) -> EdgeGraph:
    return empty_graph(n, np.int32)


def _single_edge() -> EdgeGraph:
    return EdgeGraph(np.array([1]), np.array([0]), np.array([-7], dtype=np.int64), 2, "single edge")


def _complete_equal_weights() -> EdgeGraph:
    iu, ju = np.triu_indices(30, k=1)
    return EdgeGraph(iu.astype(np.int64), ju.astype(np.int64), np.full(iu.size, 3.5), 30, "K30 all ties")


def _trailing_isolated() -> EdgeGraph:
    g = random_graph(3, 10, 25, dtype=np.float32)
    return EdgeGraph(g.src, g.dst, g.weight, 25, "15 trailing isolated vertices")


def _negative_only() -> EdgeGraph:
    return random_graph(5, 30, 80, dtype=np.int32, pool=np.array([-9, -5, -4, -1], dtype=np.int32))


SMALL_GRAPHS = {
    "n0": lambda: empty_graph(0, np.float64),
    "n1": lambda: _edgeless(1),
    "n1-self-loop": lambda: self_loops_only(1, np.float64),
    "n7-no-edges": lambda: _edgeless(7),
    "self-loops-only": lambda: self_loops_only(6, np.int64),
    "parallel-only": lambda: parallel_edges_only(np.int32),
    "single-edge": _single_edge,
    "K30-all-ties": _complete_equal_weights,
    "trailing-isolated": _trailing_isolated,
    "negative-only": _negative_only,
    "many-components": lambda: random_graph(8, 200, 150, components=40, isolated=30, num_weights=3),
}


@pytest.mark.parametrize("name", SMALL_GRAPHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_small_and_degenerate_graphs(backend: Backend, name: str) -> None:
    graph = SMALL_GRAPHS[name]()
    result = check(graph, backend)
    if graph.num_edges == 0 or not np.any(graph.src != graph.dst):
        assert result.num_components == graph.num_vertices  # every vertex on its own


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_input_keeps_dtype(backend: Backend, dtype: np.dtype[Any]) -> None:
    for n in (0, 1, 4):
        graph = empty_graph(n, dtype)
        result = check(graph, backend)
        assert result.weights.dtype == dtype
        assert result.total_weight == 0 and type(result.total_weight) is (int if dtype.kind == "i" else float)


@pytest.mark.parametrize("backend", BACKENDS)
def test_plain_lists(backend: Backend) -> None:
    """Python lists are accepted; ``[]`` is an empty graph (float64 weights)."""
    result = gpu_core.minimum_spanning_forest(
        [0, 1, 2, 0], [1, 2, 0, 0], [2.5, 1.0, 2.5, -9.0], backend=backend
    )
    assert_matches_oracles(
        result, np.array([0, 1, 2, 0]), np.array([1, 2, 0, 0]), np.array([2.5, 1.0, 2.5, -9.0]), 3
    )
    empty = gpu_core.minimum_spanning_forest([], [], [], backend=backend)
    assert (empty.num_vertices, empty.num_components, empty.edge_ids.size) == (0, 0, 0)
    assert empty.edge_ids.dtype == np.int64
    assert empty.weights.dtype == np.float64
    assert (empty.total_weight, type(empty.total_weight)) == (0.0, float)
    isolated = gpu_core.minimum_spanning_forest([], [], [], num_vertices=3, backend=backend)
    assert (isolated.num_vertices, isolated.num_components) == (3, 3)


@pytest.mark.parametrize("dtype", ["float64", "int64", "int32", "float32"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_rounding_sensitive_triangle(backend: Backend, dtype: str) -> None:
    graph = rounding_triangle(dtype)
    exact = kruskal_edge_ids(*graph.arrays, 3)
    assert exact != kruskal_edge_ids(graph.src, graph.dst, rounded(graph.weight), 3)  # the trap is armed
    result = check(graph, backend)
    assert result.edge_ids.tolist() == exact


# ---------------------------------------------------------------- filtering and structured graphs


FILTER_GRAPHS = {
    "dense-int32-6-weights": lambda: dense_graph(0, dtype=np.int32, num_weights=6),
    "dense-int64-all-equal": lambda: dense_graph(1, dtype=np.int64, num_weights=1),
    "dense-float32-2-weights": lambda: dense_graph(2, dtype=np.float32, num_weights=2),
    "dense-float64-near": lambda: dense_graph(3, dtype=np.float64, pool=near_weight_pool(np.float64, 64)),
    "dense-int64-near": lambda: dense_graph(4, dtype=np.int64, pool=near_weight_pool(np.int64, 64)),
    "dense-float64-distinct": lambda: dense_graph(5, dtype=np.float64, num_weights=None),
    "dense-components-isolated": lambda: random_graph(
        6, 2000, 20000, dtype=np.int32, num_weights=4, components=3, isolated=50
    ),
    "light-clique": lambda: light_clique_graph(7),
    "rmat-10-8": lambda: rmat_graph(10, 8, 8, dtype=np.int32, num_weights=16),
}


@pytest.mark.parametrize("name", FILTER_GRAPHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_filtering_graphs(backend: Backend, name: str) -> None:
    """Average degree >= 4: ECL-MST's first phase sees only the lightest edges."""
    graph = FILTER_GRAPHS[name]()
    k = nonloop_edges(graph)
    assert filter_threshold(graph.num_vertices, k) < k, "this graph would not exercise filtering"
    check(graph, backend)


STRUCTURED_GRAPHS = {
    "grid-40x50-ties": lambda: grid_graph(40, 50, 0, dtype=np.int32, num_weights=3),
    "grid-30x30-float64": lambda: grid_graph(30, 30, 1, dtype=np.float64, num_weights=None),
    "rmat-11-4-skewed": lambda: rmat_graph(11, 4, 2, a=0.57, b=0.19, c=0.19, dtype=np.float32, num_weights=8),
    "rmat-9-2-sparse": lambda: rmat_graph(9, 2, 3, dtype=np.int64, num_weights=None),
    "hub-ladder-filtering": lambda: hub_ladder_graph(4, 3000, dtype=np.int32),
    "hub-ladder-no-filtering": lambda: hub_ladder_graph(5, 20000, dtype=np.float64, num_weights=None),
    "star-20k-all-ties": lambda: star_graph(20000, 6, dtype=np.float64),
    "star-5k-int64": lambda: star_graph(5000, 7, dtype=np.int64, num_weights=3),
}


@pytest.mark.parametrize("name", STRUCTURED_GRAPHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_structured_graphs(backend: Backend, name: str) -> None:
    graph = STRUCTURED_GRAPHS[name]()
    if "skewed" in name:  # hubs in the hundreds (warp and chunked rows on the GPU), most vertices tiny
        degree = np.bincount(np.concatenate([graph.src, graph.dst]), minlength=graph.num_vertices)
        assert degree.max() >= 20 * max(1.0, float(np.median(degree)))
    check(graph, backend)


# ---------------------------------------------------------------- API behaviour


@pytest.mark.parametrize("backend", BACKENDS)
def test_entry_points_agree_and_graph_is_reusable(backend: Backend) -> None:
    graph = dense_graph(11, 500, 3000, dtype=np.float64, num_weights=5)
    src, dst, weight = (a.copy() for a in graph.arrays)
    g = gpu_core.Graph(src, dst, weight, graph.num_vertices, backend=backend)
    assert (g.num_vertices, g.num_edges, g.backend) == (500, 3000, backend)
    assert g.weight_dtype == np.dtype(np.float64)
    assert g.nbytes > 0
    assert repr(g).startswith("Graph(") and backend in repr(g)
    results = [
        g.minimum_spanning_forest(),
        g.minimum_spanning_forest(),  # the prepared graph is reused, not consumed
        gpu_core.minimum_spanning_forest(g),
        gpu_core.minimum_spanning_forest(g, backend=backend),
        gpu_core.minimum_spanning_forest(src, dst, weight, num_vertices=500, backend=backend),
    ]
    for r in results:
        assert_matches_oracles(r, *graph.arrays, 500, scipy=False)
        assert r.backend == backend
    for a, b in zip((src, dst, weight), graph.arrays, strict=True):
        assert np.array_equal(a, b), "the input arrays were modified"


@pytest.mark.parametrize("id_dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "uint64"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_any_integer_id_dtype(backend: Backend, id_dtype: str) -> None:
    graph = random_graph(21, 100, 400, dtype=np.int32, num_weights=4)
    result = gpu_core.minimum_spanning_forest(
        graph.src.astype(id_dtype), graph.dst.astype(id_dtype), graph.weight, backend=backend
    )
    assert_matches_oracles(result, *graph.arrays, 100, scipy=False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_strided_and_non_native_layouts(backend: Backend) -> None:
    """Non-contiguous views and Fortran-ordered slices give the same forest."""
    graph = random_graph(22, 80, 300, dtype=np.float32, num_weights=6)
    wide = np.stack([graph.src, graph.dst, graph.src], axis=1)  # columns are strided views
    weight = np.repeat(graph.weight, 2)[::2]
    assert not wide[:, 0].flags.c_contiguous and not weight.flags.c_contiguous
    result = gpu_core.minimum_spanning_forest(
        wide[:, 0], wide[:, 1], weight, num_vertices=80, backend=backend
    )
    assert_matches_oracles(result, *graph.arrays, 80)


def test_auto_backend_picks_gpu_only_when_available() -> None:
    graph = random_graph(23, 10, 20)
    g = gpu_core.Graph(*graph.arrays, backend="auto")
    assert g.backend == ("gpu" if gpu_core.gpu_available() else "cpu")
    assert gpu_core.resolve_backend("auto") == g.backend
    assert gpu_core.resolve_backend("cpu") == "cpu"
    assert_matches_oracles(g.minimum_spanning_forest(), *graph.arrays, 10)


@pytest.mark.parametrize("backend", BACKENDS)
def test_warm_up(backend: Backend) -> None:
    assert gpu_core.warm_up(backend) == backend


@pytest.mark.parametrize("backend", BACKENDS)
def test_interleaved_graphs_keep_their_own_state(backend: Backend) -> None:
    """Several resident graphs computed in turn (each keeps its own workspace and plan)."""
    graphs = [
        dense_graph(41, 400, 3000, dtype=np.int64, num_weights=3),
        grid_graph(20, 25, 42, dtype=np.float32),
        random_graph(43, 300, 500, dtype=np.float64, components=5, isolated=10),
        rmat_graph(8, 4, 44, dtype=np.int32),
    ]
    prepared = [gpu_core.Graph(g.src, g.dst, g.weight, g.num_vertices, backend=backend) for g in graphs]
    expected = [kruskal_edge_ids(*g.arrays, g.num_vertices) for g in graphs]
    for _ in range(3):
        for g, p, ids in zip(graphs, prepared, expected, strict=True):
            result = p.minimum_spanning_forest()
            assert result.edge_ids.tolist() == ids, repr(g)
            assert_valid_forest(result, *g.arrays, g.num_vertices)


# ---------------------------------------------------------------- GPU against CPU


def _assert_same_forest(gpu: gpu_core.SpanningForest, cpu: gpu_core.SpanningForest, what: str) -> None:
    assert gpu.backend == "gpu" and cpu.backend == "cpu"
    assert np.array_equal(gpu.edge_ids, cpu.edge_ids), f"{what}: edge ids differ"
    assert gpu.edge_ids.dtype == cpu.edge_ids.dtype == np.int64
    assert gpu.weights.dtype == cpu.weights.dtype, what
    assert gpu.weights.tobytes() == cpu.weights.tobytes(), f"{what}: weights differ"
    assert (gpu.num_vertices, gpu.num_components) == (cpu.num_vertices, cpu.num_components), what
    assert type(gpu.total_weight) is type(cpu.total_weight), what
    if isinstance(cpu.total_weight, int):
        assert gpu.total_weight == cpu.total_weight, what
    else:
        scale = float(np.abs(cpu.weights.astype(np.float64)).sum())
        assert_total_close(gpu.total_weight, cpu.total_weight, scale, f"{what}: total weight")


def _comparison_graphs() -> list[EdgeGraph]:
    graphs = [seeded_graph(seed, dtype) for dtype in DTYPES for seed in range(25)]
    graphs += [random_graph(s, 40, 120, pool=near_weight_pool(d), dtype=d) for s in range(3) for d in DTYPES]
    graphs += [
        random_graph(s, 30, 90, pool=extreme_weight_pool(d), dtype=d) for s in range(3) for d in DTYPES
    ]
    graphs += [rounding_triangle(d) for d in DTYPES]
    graphs += [f() for f in SMALL_GRAPHS.values()]
    graphs += [f() for f in FILTER_GRAPHS.values()]
    graphs += [f() for f in STRUCTURED_GRAPHS.values()]
    return graphs


@pytest.mark.gpu
def test_gpu_and_cpu_backends_are_identical() -> None:
    for graph in _comparison_graphs():
        _assert_same_forest(compute(graph, "gpu"), compute(graph, "cpu"), repr(graph))


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_cupy_arrays_are_accepted(backend: Backend) -> None:
    import cupy

    graph = dense_graph(31, 300, 2000, dtype=np.float64, num_weights=7)
    src, dst, weight = (cupy.asarray(a) for a in graph.arrays)
    result = gpu_core.minimum_spanning_forest(src, dst, weight, num_vertices=300, backend=backend)
    assert isinstance(result.edge_ids, np.ndarray) and isinstance(result.weights, np.ndarray)
    assert_matches_oracles(result, *graph.arrays, 300)


LARGE_GRAPHS = {
    # R-MAT, skewed degrees (hubs take the warp path), average degree 16: filtering too
    "rmat-20-8-int32": lambda: rmat_graph(20, 8, 1, dtype=np.int32, num_weights=1000),
    # 10^7 edges, average degree 20, few weights: filtering with ties across the threshold
    "random-1M-10M-int64-ties": lambda: random_graph(
        2, 1_000_000, 10_000_000, dtype=np.int64, num_weights=16, self_loops=0.01, parallel=0.02
    ),
    # float64 weights 2**-40 apart, 4M edges, several components and isolated vertices
    "random-1M-4M-float64-near": lambda: random_graph(
        3, 2**20, 2**22, dtype=np.float64, pool=near_weight_pool(np.float64, 512), components=4, isolated=1000
    ),
    # 2D grid 1024x1024 (2M edges, average degree just below 4: no filtering)
    "grid-1024-float32": lambda: grid_graph(1024, 1024, 4, dtype=np.float32, num_weights=None),
    "rmat-16-16-float32": lambda: rmat_graph(16, 16, 5, dtype=np.float32, num_weights=None),
}


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("name", LARGE_GRAPHS)
def test_large_graphs_gpu_matches_cpu_and_scipy(name: str) -> None:
    graph = LARGE_GRAPHS[name]()
    assert 10**6 <= graph.num_edges <= 10**7 + 10**6
    gpu = compute(graph, "gpu")
    cpu = compute(graph, "cpu")
    _assert_same_forest(gpu, cpu, name)
    assert_valid_forest(gpu, *graph.arrays, graph.num_vertices)
    total, components = scipy_forest_total(*graph.arrays, graph.num_vertices)
    assert gpu.num_components == components
    w = graph.weight.astype(np.float64)
    scale = float(np.abs(w).sum()) + abs(float(w.min())) * graph.num_vertices
    assert_total_close(float(gpu.total_weight), total, scale, f"{name}: total weight vs SciPy")
    assert math.isfinite(gpu.compute_ms)


@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_keeps_its_own_copy_of_the_weights(backend: Backend) -> None:
    src = np.array([0, 1, 2, 0])
    dst = np.array([1, 2, 0, 2])
    weight = np.array([1.0, 2.0, 3.0, 0.5])
    graph = gpu_core.Graph(src, dst, weight, backend=backend)
    before = graph.minimum_spanning_forest()
    weight[:] = 100.0  # the caller reuses its buffer
    after = graph.minimum_spanning_forest()
    assert after.edge_ids.tolist() == before.edge_ids.tolist() == [0, 3]
    assert after.weights.tolist() == [1.0, 0.5]
    assert after.total_weight == 1.5


@pytest.mark.parametrize("backend", BACKENDS)
def test_prepare_then_compute_gives_the_same_forest(backend: Backend) -> None:
    rng = np.random.default_rng(7)
    n, m = 3000, 30000  # average degree 20: the filtered path, two phases
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    weight = rng.integers(0, 50, m).astype(np.int64)
    expected = gpu_core.minimum_spanning_forest(src, dst, weight, num_vertices=n, backend="cpu")
    graph = gpu_core.Graph(src, dst, weight, n, backend=backend)
    graph.prepare()
    graph.prepare()  # idempotent
    for _ in range(3):
        forest = graph.minimum_spanning_forest()
        assert forest.edge_ids.tolist() == expected.edge_ids.tolist()
        assert forest.total_weight == expected.total_weight
