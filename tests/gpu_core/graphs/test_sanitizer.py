"""The GPU backend under ``compute-sanitizer``: no out-of-bounds access, no shared-memory race.

Runs a small script in a child process under each tool, on graphs that take every
kernel path (thread and warp vertices, both filtering phases, both orders, what-ifs,
new weights). CuPy's memory pools are switched off there so every array is its own
allocation and the sanitizer sees out-of-bounds accesses.

The script's runs loop on the host (as on drivers without conditional graph nodes): the
same kernels with the same arguments, only link_lightest's loop decision unused. Runs on the
device's loops (a CUDA graph with conditional WHILE nodes) passed memcheck alone, but with
other sanitized processes on the GPU compute-sanitizer 2025.3 stopped them with a
misaligned-address error it attributes to no kernel and no access (at the read-back after the
graph); the same runs without the sanitizer, pools off, are exact.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.utils.sanitizer import assert_clean_under_sanitizer

SCRIPT = textwrap.dedent(
    """
    import cupy
    import numpy as np

    cupy.cuda.set_allocator(None)
    cupy.cuda.set_pinned_memory_allocator(None)

    from gpu_core._backend import device_loops

    device_loops.loops_supported = lambda: False  # the host loop: see the module's docstring

    import gpu_core
    from tests.utils.graphs import dense_graph, empty_graph, grid_graph, random_graph, rmat_graph

    graphs = [
        rmat_graph(9, 8, 1, dtype=np.int32, num_weights=8),  # hubs: warp path, filtering
        dense_graph(2, 300, 2400, dtype=np.float64, num_weights=3),
        grid_graph(12, 13, 3, dtype=np.float32),  # no filtering
        random_graph(4, 200, 150, dtype=np.int64, components=6, isolated=20),
        random_graph(5, 3, 8, dtype=np.int32, self_loops=0.5),
        empty_graph(5, np.float64),
    ]
    for g in graphs:
        cpu = gpu_core.Graph(g.src, g.dst, g.weight, g.num_vertices, backend="cpu").minimum_spanning_forest()
        prepared = gpu_core.Graph(g.src, g.dst, g.weight, g.num_vertices, backend="gpu")
        for _ in range(2):
            gpu = prepared.minimum_spanning_forest()
            assert np.array_equal(gpu.edge_ids, cpu.edge_ids), g
        # the queries: a re-rank to the max order and back, a what-if (skip set), labels, new weights
        cpu_graph = gpu_core.Graph(g.src, g.dst, g.weight, g.num_vertices, backend="cpu")
        exclude = np.arange(0, g.num_edges, 3)
        for run in (
            lambda x: x.maximum_spanning_forest().edge_ids,
            lambda x: x.minimum_spanning_forest(exclude=exclude).edge_ids,
            lambda x: x.component_labels(),
            lambda x: x.minimum_spanning_forest().edge_ids,
        ):
            assert np.array_equal(run(prepared), run(cpu_graph)), g
        new = np.arange(g.num_edges, dtype=g.weight.dtype)[::-1].copy()
        prepared.set_weights(new)
        cpu_graph.set_weights(new)
        after = prepared.minimum_spanning_forest().edge_ids
        assert np.array_equal(after, cpu_graph.minimum_spanning_forest().edge_ids), g
    cupy.cuda.runtime.deviceSynchronize()
    print("sanitized ok")
    """
)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_compute_sanitizer(tool: str) -> None:
    assert_clean_under_sanitizer(tool, SCRIPT)


#: the same script with every graph in the 64-bit slot layout and the CSR sorted in chunks
WIDE_SCRIPT = (
    "import gpu_core._graphs.layout as layout\n"
    "layout.WIDE_EDGES_FROM = 0\n"
    "layout.CSR_SPLIT_FROM = 0\n" + SCRIPT
)


@pytest.mark.gpu
@pytest.mark.slow
def test_compute_sanitizer_wide_layout() -> None:
    assert_clean_under_sanitizer("memcheck", WIDE_SCRIPT)
