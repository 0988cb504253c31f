"""Forests launched ahead (``Graph.launch_forest``): several graphs started one after another and
collected in turn give exactly the forests computed one at a time, and anything done to a graph
between its launch and its collection (new weights, the other objective, exclusions) wins."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_core
from gpu_core import Backend
from tests.utils.backends import BACKENDS
from tests.utils.graphs import DTYPES, random_graph
from tests.utils.oracles import assert_matches_oracles, kruskal_edge_ids


@pytest.mark.parametrize("backend", BACKENDS)
def test_graphs_launched_together_give_each_its_exact_forest(backend: Backend) -> None:
    edge_graphs = [
        random_graph(
            seed, 300 + 97 * seed, 2_500 + 400 * seed, dtype=DTYPES[seed % len(DTYPES)],
            num_weights=4 + seed, components=1 + seed % 3, isolated=seed % 2,
        )
        for seed in range(12)
    ]  # fmt: skip
    graphs = [gpu_core.Graph(g.src, g.dst, g.weight, g.num_vertices, backend=backend) for g in edge_graphs]
    for _ in range(2):  # twice: a graph launched and collected can be launched again
        started = [graph.launch_forest() for graph in graphs]
        assert all(started) if backend == "gpu" else not any(started)  # the CPU computes when asked
        for graph, edges in zip(graphs, edge_graphs, strict=True):
            forest = graph.minimum_spanning_forest()
            assert_matches_oracles(forest, edges.src, edges.dst, edges.weight, edges.num_vertices)
            assert forest.compute_ms >= 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_what_happens_between_a_launch_and_its_collection_wins(backend: Backend) -> None:
    edges = random_graph(7, 500, 4_000, dtype=np.int32, num_weights=6, components=2)
    n = edges.num_vertices
    graph = gpu_core.Graph(edges.src, edges.dst, edges.weight, n, backend=backend)
    gpu = backend == "gpu"

    assert graph.launch_forest() == gpu and not graph.launch_forest()  # one run at a time
    new = np.asarray(np.random.default_rng(1).integers(-50, 50, edges.weight.shape[0]), dtype=np.int32)
    graph.set_weights(new)  # the run launched computed the old weights: not collected
    assert graph.minimum_spanning_forest().edge_ids.tolist() == kruskal_edge_ids(edges.src, edges.dst, new, n)

    assert graph.launch_forest() == gpu
    heaviest = graph.maximum_spanning_forest()  # the other objective: computed afresh
    assert heaviest.edge_ids.tolist() == kruskal_edge_ids(edges.src, edges.dst, -new.astype(np.int64), n)
    assert not graph.launch_forest()  # ranked for the maximum now: only a "max" run starts
    assert graph.launch_forest(objective="max") == gpu
    assert graph.maximum_spanning_forest().edge_ids.tolist() == heaviest.edge_ids.tolist()

    graph.prepare("min")
    assert graph.launch_forest() == gpu
    graph.prepare("max")  # ranked the other way meanwhile: the run launched is not collected
    assert graph.maximum_spanning_forest().edge_ids.tolist() == heaviest.edge_ids.tolist()
    assert graph.launch_forest(objective="max") == gpu
    graph.prepare("min")
    assert graph.minimum_spanning_forest().edge_ids.tolist() == kruskal_edge_ids(edges.src, edges.dst, new, n)
    assert graph.launch_forest() == gpu
    excluded = np.arange(0, edges.weight.shape[0], 3)
    kept = np.setdiff1d(np.arange(edges.weight.shape[0]), excluded)
    what_if = graph.minimum_spanning_forest(exclude=excluded)  # exclusions: computed afresh
    src, dst = np.asarray(edges.src), np.asarray(edges.dst)
    expected = [int(kept[i]) for i in kruskal_edge_ids(src[kept], dst[kept], new[kept], n)]
    assert what_if.edge_ids.tolist() == sorted(expected)
    with pytest.raises(ValueError, match="objective"):
        graph.launch_forest(objective="median")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_graph_of_self_loops_launches_nothing(backend: Backend) -> None:
    graph = gpu_core.Graph(np.array([0, 1]), np.array([0, 1]), np.array([1.0, 2.0]), 3, backend=backend)
    assert not graph.launch_forest() and graph.minimum_spanning_forest().num_edges == 0
