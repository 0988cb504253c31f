"""The 64-bit slot layout (graphs of 2^30 loop-free edges or more), proven on small graphs.

``gpu_core._graphs.layout.WIDE_EDGES_FROM`` decides from which edge count a graph takes 64-bit slot
indices; the ``wide`` fixture lowers it to 0 so every graph here is built in that layout,
and the forests are compared edge id for edge id with the 32-bit layout, the CPU backend and
Kruskal. ``CSR_SPLIT_FROM`` lowered to 0 makes even small builds sort their CSR in chunks.
The layout's rules and the estimate of both layouts are checked on the CPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gpu_core
from gpu_core._backend.memory import pool_peak
from gpu_core._graphs import layout as _layout
from gpu_core._graphs.estimate import _gpu_bytes
from gpu_core._graphs.layout import MAX_GPU_EDGES, WIDE_EDGES_FROM, slot_layout
from tests.utils.graphs import DTYPES, EdgeGraph, random_graph, rmat_graph, star_graph
from tests.utils.oracles import kruskal_edge_ids

DTYPE_PARAMS = [pytest.param(d, id=d.name) for d in DTYPES]


# ---------------------------------------------------------------- the layout's rules (CPU)


def test_small_graphs_keep_32_bit_slots_and_the_paper_threshold() -> None:
    layout = slot_layout(2**22, 33_500_000)
    assert not layout.wide and layout.slot == "int" and layout.slot_bytes == 4
    assert layout.threshold == 2**22  # FILTER_EDGES_PER_VERTEX * n
    assert layout.capacity == 33_500_000 - 2**22
    assert layout.phase_ends == (33_500_000,)  # one second phase
    assert slot_layout(1000, 1500).phase_ends == ()  # sparse: no filtering
    assert not slot_layout(10, WIDE_EDGES_FROM - 1).wide
    assert slot_layout(10, WIDE_EDGES_FROM).wide  # 2^30 edges


def test_wide_graphs_halve_the_worklists_and_run_phase_two_in_rounds() -> None:
    for n, k in [(2**27, 2_200_000_000), (2**26, 1_100_000_000), (2**31 - 1, 2**31), (3, MAX_GPU_EDGES)]:
        layout = slot_layout(n, k)
        assert layout.wide and layout.slot == "long long"
        assert layout.capacity == -(-k // 2) <= 2**31  # worklist positions fit 32 bits (unsigned counters)
        assert layout.threshold <= layout.capacity
        starts = (layout.threshold, *layout.phase_ends[:-1])
        assert layout.phase_ends[-1] == k
        assert all(
            0 < end - start <= layout.capacity for start, end in zip(starts, layout.phase_ends, strict=True)
        )
    assert slot_layout(2**27, 2_200_000_000).threshold == 2**27  # the paper's first phase
    # forced on small graphs: the same rules
    assert slot_layout(100, 1000, wide_from=0).phase_ends == (600, 1000)
    sparse = slot_layout(100, 150, wide_from=0)  # no filtering in 32 bits; two halves here
    assert (sparse.threshold, sparse.capacity, sparse.phase_ends) == (75, 75, (150,))
    assert slot_layout(0, 0, wide_from=0).capacity == 1


def test_estimate_of_both_layouts() -> None:
    n, m = 2**27, 2_200_000_000
    wide = _gpu_bytes(n, m, 4, slot_layout(n, m))
    assert wide.resident <= 32 * m, wide.resident / m  # one slot per edge (both directions: 38.6)
    # the build's peak: the ranking's sort with int64 input ids (40 per edge), within the 48
    assert wide.peak <= 41 * m, wide.peak / m
    assert gpu_core.estimate_device_bytes(n, m, np.float32) == wide
    # a 1B-edge graph stays 32-bit; forced wide it takes 64-bit rows and half the worklists
    n, m = 2**26, 15 * 2**26
    narrow = _gpu_bytes(n, m, 4, slot_layout(n, m))
    forced = _gpu_bytes(n, m, 4, slot_layout(n, m, wide_from=0))
    assert gpu_core.estimate_device_bytes(n, m, np.float32) == narrow
    layout_n, layout_w = slot_layout(n, m), slot_layout(n, m, wide_from=0)
    expected = 4 * (2 * n + 1) + 8 * (m // 256 + 1) + 24 * (layout_w.capacity - layout_n.capacity)
    assert forced.resident - narrow.resident == expected
    assert narrow.peak <= 1.3 * narrow.resident
    for w in (4, 8):  # 8-byte weights rank by argsort: a larger peak, still bounded
        e = _gpu_bytes(n, m, w, slot_layout(n, m))
        assert e.resident < e.peak < 2 * e.resident


# ---------------------------------------------------------------- the GPU (forced wide)


@pytest.fixture
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_layout, "WIDE_EDGES_FROM", 0)


@pytest.fixture
def chunked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CSR sorted in chunks, and the pool's free blocks handed back between build steps
    (what giant graphs do) even for small graphs."""
    from gpu_core._graphs import gpu_csr

    monkeypatch.setattr(_layout, "CSR_SPLIT_FROM", 0)
    monkeypatch.setattr(gpu_csr, "RELEASE_FROM_EDGES", 0)


def _gpu(g: EdgeGraph, *, wide: bool) -> gpu_core.Graph:
    old = _layout.WIDE_EDGES_FROM
    _layout.WIDE_EDGES_FROM = 0 if wide else 2**30
    try:
        graph = gpu_core.Graph(g.src, g.dst, g.weight, g.num_vertices, backend="gpu")
    finally:
        _layout.WIDE_EDGES_FROM = old
    impl: Any = graph._impl
    assert impl.wide is wide
    if g.num_edges:
        assert impl.row_ptr.dtype == (np.int64 if wide else np.int32)
    return graph


def _cases(dtype: Any) -> list[EdgeGraph]:
    return [
        random_graph(1, 3000, 20_000, dtype=dtype, num_weights=7, components=5, isolated=40, self_loops=0.1),
        random_graph(2, 50_000, 100_000, dtype=dtype, num_weights=None, components=3, parallel=0.2),
        random_graph(3, 200, 6000, dtype=dtype, num_weights=3, negative=True),  # dense: both phases
        random_graph(4, 40, 30, dtype=dtype, num_weights=2, self_loops=0.5, components=4),  # no filter
        rmat_graph(13, 12, 5, dtype=dtype, num_weights=16),  # hubs: warp path and heavy chunks
        star_graph(700, 6, dtype=dtype, num_weights=3),  # one row of 700 slots
    ]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("split_csr", [False, True], ids=["one-sort", "chunked-csr"])
def test_wide_and_narrow_give_the_same_forest(
    dtype: Any, split_csr: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if split_csr:
        monkeypatch.setattr(_layout, "CSR_SPLIT_FROM", 0)
    for g in _cases(dtype):
        cpu = gpu_core.Graph(g.src, g.dst, g.weight, g.num_vertices, backend="cpu").minimum_spanning_forest()
        for wide in (False, True):
            graph = _gpu(g, wide=wide)
            for _ in range(3):  # the run graph, the same every time
                got = graph.minimum_spanning_forest()
                assert np.array_equal(got.edge_ids, cpu.edge_ids), (g, wide)
                assert np.array_equal(got.weights, cpu.weights), (g, wide)
                assert got.total_weight == cpu.total_weight and got.num_components == cpu.num_components
        if g.num_edges <= 20_000:
            assert cpu.edge_ids.tolist() == kruskal_edge_ids(g.src, g.dst, g.weight, g.num_vertices), g


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_wide_queries_match_the_cpu(dtype: Any, wide: None) -> None:
    g = random_graph(7, 5000, 40_000, dtype=dtype, num_weights=9, components=4, isolated=10)
    gpu = _gpu(g, wide=True)
    cpu = gpu_core.Graph(g.src, g.dst, g.weight, g.num_vertices, backend="cpu")
    exclude = np.arange(0, g.num_edges, 5)
    for run in (
        lambda x: x.maximum_spanning_forest().edge_ids,
        lambda x: x.minimum_spanning_forest(exclude=exclude).edge_ids,
        lambda x: x.component_labels(),
        lambda x: x.minimum_spanning_forest().edge_ids,
        lambda x: x.maximum_spanning_forest(exclude=exclude).edge_ids,
    ):
        assert np.array_equal(run(gpu), run(cpu)), g
    new = np.random.default_rng(1).permutation(g.num_edges).astype(dtype)
    gpu.set_weights(new)
    cpu.set_weights(new)
    assert np.array_equal(gpu.minimum_spanning_forest().edge_ids, cpu.minimum_spanning_forest().edge_ids)


@pytest.mark.gpu
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64, np.uint32, np.uint16])
def test_device_input_of_any_id_dtype(id_dtype: Any, wide: None, chunked: None) -> None:
    import cupy as cp

    g = random_graph(9, 1000, 8000, dtype=np.float32, num_weights=50, self_loops=0.05)
    expected = gpu_core.Graph(g.src, g.dst, g.weight, g.num_vertices, backend="cpu").minimum_spanning_forest()
    src, dst = cp.asarray(g.src.astype(id_dtype)), cp.asarray(g.dst.astype(id_dtype))
    graph = gpu_core.Graph(src, dst, cp.asarray(g.weight), g.num_vertices, backend="gpu")
    assert np.array_equal(graph.minimum_spanning_forest().edge_ids, expected.edge_ids)
    assert graph.num_edges == g.num_edges  # the input arrays are the caller's still
    assert int(src.size) == g.num_edges


@pytest.mark.gpu
@pytest.mark.parametrize("wide_layout", [False, True], ids=["narrow", "wide"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64])
def test_build_peak_and_resident_bytes(
    wide_layout: bool, dtype: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From device arrays: the build's extra pool bytes stay within 1.3x of the resident graph
    (4-byte weights; 8-byte ones rank by argsort, within 1.6x), and ``nbytes`` matches the estimate."""
    import cupy as cp

    if wide_layout:
        monkeypatch.setattr(_layout, "WIDE_EDGES_FROM", 0)
    gpu_core.warm_up("gpu")
    n, m = 1 << 18, 1 << 22
    rng = cp.random.default_rng(5)
    src = rng.integers(0, n, m, dtype=cp.int32)
    dst = rng.integers(0, n, m, dtype=cp.int32)
    weight = (
        rng.random(m, dtype=cp.float64).astype(dtype)
        if dtype != np.int32
        else rng.integers(-(2**31), 2**31 - 1, m, dtype=cp.int32)
    )
    with pool_peak() as seen:
        graph = gpu_core.Graph(src, dst, weight, n, backend="gpu")
    peak = seen.peak
    assert graph._impl.wide is wide_layout  # type: ignore[attr-defined]
    bound = 1.3 if np.dtype(dtype).itemsize == 4 else 1.6
    assert peak <= bound * graph.nbytes, (peak / m, graph.nbytes / m)
    loops = int(cp.count_nonzero(src == dst))
    estimate = _gpu_bytes(n, m - loops, np.dtype(dtype).itemsize, slot_layout(n, m - loops))
    assert abs(estimate.resident - graph.nbytes) <= 0.01 * graph.nbytes
    cpu = gpu_core.Graph(src.get(), dst.get(), weight.get(), n, backend="cpu").minimum_spanning_forest()
    assert np.array_equal(graph.minimum_spanning_forest().edge_ids, cpu.edge_ids)
