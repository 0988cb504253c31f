"""Forests computed shard by shard and merged: exactly the whole graph's forest.

Checked against the unsharded computation *and* against Kruskal on exact Python numbers (an
independent oracle), on random multigraphs with many ties, self-loops, parallel edges, negative
weights and several components, in every weight dtype, for 1..5 shards, ``min`` and ``max``,
with and without excluded edges. Components, clusters and the dendrogram of the union graph are
checked against the whole graph's.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

import gpu_core
from gpu_core._backend.resolve import Backend

from ...utils.backends import BACKENDS
from ...utils.graphs import DTYPES, EdgeGraph, empty_graph, random_graph, rmat_graph
from .test_queries import kruskal


def _graphs(dtype: np.dtype[Any]) -> list[EdgeGraph]:
    found = [
        random_graph(seed, n, m, dtype=dtype, num_weights=w, components=c, isolated=i)
        for seed, (n, m, w, c, i) in enumerate(
            [
                (30, 80, 2, 1, 0),
                (50, 400, 5, 2, 2),
                (200, 900, None, 3, 5),
                (120, 200, 1, 1, 0),
                (9, 7, 3, 2, 1),
            ]
        )
    ]
    found.append(rmat_graph(9, 8, seed=3, dtype=dtype))
    return found


def test_edge_ranges_cover_the_edges_contiguously() -> None:
    for m in (0, 1, 5, 17, 100):
        for k in range(1, 7):
            ranges = gpu_core.edge_ranges(m, k)
            assert len(ranges) == k and ranges[0][0] == 0 and ranges[-1][1] == m
            assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
            sizes = [hi - lo for lo, hi in ranges]
            assert max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError, match="at least 1"):
        gpu_core.edge_ranges(10, 0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("objective", ["min", "max"])
def test_sharded_forest_is_the_whole_forest(backend: Backend, dtype: np.dtype[Any], objective: str) -> None:
    rng = np.random.default_rng(11)
    for graph in _graphs(dtype):
        m = graph.weight.shape[0]
        whole = gpu_core.Graph(graph.src, graph.dst, graph.weight, graph.num_vertices, backend=backend)
        for exclude in (None, np.sort(rng.choice(m, size=m // 5, replace=False))):
            expected = whole.minimum_spanning_forest(objective=objective, exclude=exclude)
            oracle = kruskal(graph, objective=objective, exclude=() if exclude is None else exclude)
            assert expected.edge_ids.tolist() == oracle
            for shards in range(1, 6):
                got = gpu_core.sharded_spanning_forest(
                    graph.src, graph.dst, graph.weight, graph.num_vertices, shards,
                    objective=objective, exclude=exclude, backend=backend,
                )  # fmt: skip
                where = f"{graph.name} {dtype} {objective} shards={shards} exclude={exclude is not None}"
                assert got.edge_ids.tolist() == oracle, where
                assert got.weights.dtype == dtype, where
                np.testing.assert_array_equal(got.weights, expected.weights, err_msg=where)
                assert got.total_weight == expected.total_weight, where
                assert got.num_components == expected.num_components, where


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_union_graph_answers_queries_as_the_whole_graph(backend: Backend, dtype: np.dtype[Any]) -> None:
    for graph in _graphs(dtype):
        n, m = graph.num_vertices, graph.weight.shape[0]
        whole = gpu_core.Graph(graph.src, graph.dst, graph.weight, n, backend=backend)
        for shards in (2, 3, 5):
            parts = [
                gpu_core.shard_forest(graph.src, graph.dst, graph.weight, lo, hi, n, backend=backend)
                for lo, hi in gpu_core.edge_ranges(m, shards)
            ]
            union, ids = gpu_core.union_graph(parts[::-1], n, backend=backend)  # any order of shards
            assert (np.diff(ids) > 0).all()
            np.testing.assert_array_equal(union.component_labels(), whole.component_labels())
            forest = whole.minimum_spanning_forest()
            for k in sorted({forest.num_components, forest.num_components + 1, n}):
                np.testing.assert_array_equal(union.cluster_labels(k=k), whole.cluster_labels(k=k))
            if forest.num_components == 1 and n >= 2:
                np.testing.assert_array_equal(union.single_linkage(), whole.single_linkage())


@pytest.mark.parametrize("backend", BACKENDS)
def test_edge_cases(backend: Backend) -> None:
    empty = empty_graph(4, np.int32)
    got = gpu_core.sharded_spanning_forest(empty.src, empty.dst, empty.weight, 4, 3, backend=backend)
    assert got.edge_ids.tolist() == [] and got.num_components == 4 and got.weights.dtype == np.int32
    # more shards than edges: some shards are empty
    src, dst, w = np.array([0, 1]), np.array([1, 2]), np.array([5.0, 5.0])
    got = gpu_core.sharded_spanning_forest(src, dst, w, 3, 5, backend=backend)
    assert got.edge_ids.tolist() == [0, 1]
    # only the ids order ties: a later shard's equal edge loses to an earlier one
    src, dst, w = np.array([0, 0, 1]), np.array([1, 1, 0]), np.array([2, 2, 2])
    for k in (1, 2, 3):
        assert gpu_core.sharded_spanning_forest(src, dst, w, 2, k, backend=backend).edge_ids.tolist() == [0]
        got = gpu_core.sharded_spanning_forest(src, dst, w, 2, k, objective="max", backend=backend)
        assert got.edge_ids.tolist() == [0]


def test_overlapping_shards_are_refused() -> None:
    part = gpu_core.ShardForest(np.array([0]), np.array([0]), np.array([1]), np.array([1.0]))
    with pytest.raises(ValueError, match="more than one shard"):
        gpu_core.merge_shard_forests([part, part], 2, backend="cpu")
    with pytest.raises(ValueError, match="at least one shard"):
        gpu_core.merge_shard_forests([], 2, backend="cpu")
