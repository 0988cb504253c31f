"""Queries of a resident graph, on both backends: maximum forests, new weights, what-ifs, clusters.

Every answer is checked against an independent reference: Kruskal over the query's order on exact
Python numbers (on new weights; on ``(-weight, edge_id)`` for ``max``; with the excluded edges
removed), SciPy's ``connected_components`` for labels, and ``scipy.cluster.hierarchy`` on a
complete graph's distances for dendrograms and cuts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial.distance import pdist, squareform

import gpu_core
from gpu_core.errors import GraphValidationError, NonFiniteWeightError, UnsupportedDtypeError, VertexIdError

from ...utils.backends import BACKENDS
from ...utils.graphs import EdgeGraph, random_graph, rmat_graph
from ...utils.oracles import UnionFind

DTYPES = [np.dtype(t) for t in (np.int32, np.int64, np.float32, np.float64)]


def kruskal(graph: EdgeGraph, weight: Any = None, *, objective: str = "min", exclude: Any = ()) -> list[int]:
    """Kruskal under ``(w, id)`` (or ``(-w, id)``) on exact Python numbers, without ``exclude``."""
    w = np.asarray(graph.weight if weight is None else weight).tolist()
    s, d = graph.src.tolist(), graph.dst.tolist()
    gone = {int(e) for e in np.asarray(exclude).tolist()}
    sign = 1 if objective == "min" else -1
    uf = UnionFind(graph.num_vertices)
    order = sorted((i for i in range(len(w)) if i not in gone), key=lambda i: (sign * w[i], i))
    return sorted(i for i in order if uf.union(s[i], d[i]))


def scipy_labels(n: int, src: Any, dst: Any) -> list[int]:
    adj = coo_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
    return connected_components(adj, directed=False)[1].tolist()


def graphs(dtype: np.dtype[Any]) -> list[EdgeGraph]:
    found = [
        random_graph(seed, n, m, dtype=dtype, num_weights=w, components=c, isolated=i)
        for seed, (n, m, w, c, i) in enumerate(
            [(30, 80, 3, 1, 0), (50, 400, 5, 2, 2), (200, 2000, None, 3, 5), (120, 200, 2, 1, 0)]
        )
    ]
    found.append(rmat_graph(10, 8, seed=3, dtype=dtype))  # average degree >= 4: the filtered path
    return found


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_maximum_forest_and_what_if_match_kruskal(backend: str, dtype: np.dtype[Any]) -> None:
    rng = np.random.default_rng(7)
    for graph in graphs(dtype):
        g = gpu_core.Graph(*graph.arrays, graph.num_vertices, backend=backend)  # type: ignore[arg-type]
        assert g.maximum_spanning_forest().edge_ids.tolist() == kruskal(graph, objective="max"), graph
        assert g.minimum_spanning_forest().edge_ids.tolist() == kruskal(graph), graph  # and back again
        again = g.minimum_spanning_forest(objective="max")
        assert again.edge_ids.tolist() == kruskal(graph, objective="max"), graph
        assert again.weights.dtype == dtype
        tree = g.minimum_spanning_forest().edge_ids
        # what-ifs: drop forest edges (the answer must change) and arbitrary ones
        for exclude in (tree[: max(1, tree.size // 3)], rng.choice(graph.num_edges, 25, replace=False)):
            got = g.minimum_spanning_forest(exclude=exclude)
            assert got.edge_ids.tolist() == kruskal(graph, exclude=exclude), graph
            assert not set(got.edge_ids.tolist()) & set(np.asarray(exclude).tolist())
            got_max = g.maximum_spanning_forest(exclude=exclude).edge_ids.tolist()
            assert got_max == kruskal(graph, objective="max", exclude=exclude), graph
        assert g.minimum_spanning_forest().edge_ids.tolist() == kruskal(graph)  # the what-if left no trace


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_new_weights_match_kruskal(backend: str, dtype: np.dtype[Any]) -> None:
    rng = np.random.default_rng(11)
    for graph in graphs(dtype):
        g = gpu_core.Graph(*graph.arrays, graph.num_vertices, backend=backend)  # type: ignore[arg-type]
        g.prepare()
        g.maximum_spanning_forest()  # both orders planned before the weights change
        weight = graph.weight.copy()
        for round_ in range(3):
            new = rng.integers(-6, 7, graph.num_edges).astype(dtype)
            g.set_weights(new)
            weight = new
            assert g.weights_version == 2 * round_ + 1
            assert g.minimum_spanning_forest().edge_ids.tolist() == kruskal(graph, weight), graph
            assert g.maximum_spanning_forest().edge_ids.tolist() == kruskal(graph, weight, objective="max")
            ids = rng.choice(graph.num_edges, 10, replace=False)
            values = rng.integers(-9, 10, ids.size)  # int64 values, cast exactly to the graph's dtype
            g.update_weights(ids, values)
            weight = weight.copy()
            weight[ids] = values
            forest = g.minimum_spanning_forest()
            assert forest.edge_ids.tolist() == kruskal(graph, weight), graph
            assert forest.weights.tolist() == weight[forest.edge_ids].tolist()


@pytest.mark.parametrize("backend", BACKENDS)
def test_set_weights_may_change_the_dtype(backend: str) -> None:
    graph = random_graph(5, 60, 300, dtype=np.int32, num_weights=4)
    g = gpu_core.Graph(*graph.arrays, graph.num_vertices, backend=backend)  # type: ignore[arg-type]
    g.minimum_spanning_forest()
    for dtype in ("float64", "int64", "float32", "int32"):
        new = np.random.default_rng(1).random(graph.num_edges).astype(dtype) * 10
        new = new.astype(dtype)
        g.set_weights(new)
        forest = g.minimum_spanning_forest()
        assert g.weight_dtype == np.dtype(dtype) and forest.weights.dtype == np.dtype(dtype)
        assert forest.edge_ids.tolist() == kruskal(graph, new)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_query_arguments_are_named(backend: str) -> None:
    graph = random_graph(3, 20, 40, dtype=np.int32)
    g = gpu_core.Graph(*graph.arrays, graph.num_vertices, backend=backend)  # type: ignore[arg-type]
    with pytest.raises(VertexIdError, match=r"exclude\[1\]' = 40"):
        g.minimum_spanning_forest(exclude=[0, 40])
    with pytest.raises(UnsupportedDtypeError, match="exclude"):
        g.minimum_spanning_forest(exclude=[0.5])
    with pytest.raises(ValueError, match="objective"):
        g.minimum_spanning_forest(objective="median")
    with pytest.raises(GraphValidationError, match="40 weights"):
        g.set_weights(np.ones(39))
    with pytest.raises(NonFiniteWeightError, match=r"weight\[2\]"):
        g.set_weights(np.array([1.0, 2.0, np.nan] + [1.0] * 37))
    with pytest.raises(UnsupportedDtypeError, match="exactly"):
        g.update_weights([1], [0.5])  # int32 graph: 0.5 is not an int32
    with pytest.raises(UnsupportedDtypeError, match="exactly"):
        g.update_weights([1], [2**40])
    with pytest.raises(VertexIdError, match="edge_ids"):
        g.update_weights([-1], [1])
    assert g.weights_version == 0  # nothing refused changed anything
    assert g.minimum_spanning_forest().edge_ids.tolist() == kruskal(graph)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_component_labels_match_scipy(backend: str, dtype: np.dtype[Any]) -> None:
    rng = np.random.default_rng(3)
    for graph in graphs(dtype):
        g = gpu_core.Graph(*graph.arrays, graph.num_vertices, backend=backend)  # type: ignore[arg-type]
        labels = g.component_labels()
        assert labels.dtype == np.int64
        assert labels.tolist() == scipy_labels(graph.num_vertices, graph.src, graph.dst), graph
        exclude = rng.choice(graph.num_edges, graph.num_edges // 2, replace=False)
        keep = np.setdiff1d(np.arange(graph.num_edges), exclude)
        expected = scipy_labels(graph.num_vertices, graph.src[keep], graph.dst[keep])
        assert g.component_labels(exclude=exclude).tolist() == expected


def _complete_graph(points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    distances = squareform(pdist(points))
    src, dst = np.triu_indices(points.shape[0], 1)
    return src, dst, distances[src, dst]


def _same_partition(a: Any, b: Any) -> bool:
    pairs = set(zip(np.asarray(a).tolist(), np.asarray(b).tolist(), strict=True))
    return len(pairs) == len(set(np.asarray(a).tolist())) == len(set(np.asarray(b).tolist()))


@pytest.mark.parametrize("backend", BACKENDS)
def test_dendrogram_and_cuts_match_scipy_single_linkage(backend: str) -> None:
    rng = np.random.default_rng(5)
    for n in (2, 3, 17, 60, 150):
        points = rng.random((n, 3))
        g = gpu_core.Graph(*_complete_graph(points), n, backend=backend)  # type: ignore[arg-type]
        expected = linkage(points, "single")
        got = g.single_linkage()
        assert got.shape == (n - 1, 4) and got.dtype == np.float64
        np.testing.assert_array_equal(got[:, [0, 1, 3]], expected[:, [0, 1, 3]])
        np.testing.assert_allclose(got[:, 2], expected[:, 2], rtol=1e-12)
        for k in sorted({1, 2, min(3, n), max(n // 2, 1), n}):
            labels = g.cluster_labels(k=k)
            assert len(set(labels.tolist())) == k
            assert _same_partition(labels, fcluster(expected, k, "maxclust")), (n, k)
        height = float(np.median(expected[:, 2]))
        assert _same_partition(g.cluster_labels(threshold=height), fcluster(expected, height, "distance"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_cuts_follow_the_tie_rule_and_components(backend: str) -> None:
    # a path 0-1-2-3 of equal weights plus an isolated vertex 4: cutting one edge removes the
    # heaviest by (weight, edge_id), i.e. the highest edge id among the equal ones
    src, dst, w = np.array([0, 1, 2]), np.array([1, 2, 3]), np.array([5, 5, 5], dtype=np.int32)
    g = gpu_core.Graph(src, dst, w, 5, backend=backend)  # type: ignore[arg-type]
    assert g.cluster_labels(k=2).tolist() == [0, 0, 0, 0, 1]
    assert g.cluster_labels(k=3).tolist() == [0, 0, 0, 1, 2]
    assert g.cluster_labels(k=4).tolist() == [0, 0, 1, 2, 3]
    assert g.cluster_labels(threshold=5).tolist() == [0, 0, 0, 0, 1]
    assert g.cluster_labels(threshold=4.5).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(GraphValidationError, match=r"\[2, 5\]"):
        g.cluster_labels(k=1)
    with pytest.raises(GraphValidationError, match="exactly one"):
        g.cluster_labels()
    with pytest.raises(GraphValidationError, match="connected graph"):
        g.single_linkage()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forests_after_prepare_what_ifs_and_new_weights_are_exact(backend: str, dtype: np.dtype[Any]) -> None:
    """``prepare`` in any order between what-ifs, new weights (of another dtype too: the run's CUDA
    graph reads the new buffers) and either objective: every forest is the oracle's."""
    rng = np.random.default_rng(11)
    for graph in graphs(dtype):
        g = gpu_core.Graph(*graph.arrays, graph.num_vertices, backend=backend)  # type: ignore[arg-type]
        g.prepare()
        assert g.minimum_spanning_forest().edge_ids.tolist() == kruskal(graph)
        out = rng.choice(graph.num_edges, size=max(graph.num_edges // 4, 1), replace=False)
        g.prepare()
        assert g.minimum_spanning_forest(exclude=out).edge_ids.tolist() == kruskal(graph, exclude=out)
        assert g.minimum_spanning_forest().edge_ids.tolist() == kruskal(graph)
        new = graph.weight[rng.permutation(graph.num_edges)]
        g.set_weights(new)
        assert g.minimum_spanning_forest().edge_ids.tolist() == kruskal(graph, new)
        g.prepare("max")
        assert g.minimum_spanning_forest().edge_ids.tolist() == kruskal(graph, new)
        assert g.maximum_spanning_forest().edge_ids.tolist() == kruskal(graph, new, objective="max")
        other = new.astype(np.float64 if dtype.kind == "i" else np.int64)  # new buffers
        g.set_weights(other)
        got = g.minimum_spanning_forest()
        assert got.edge_ids.tolist() == kruskal(graph, other)
        assert got.weights.dtype == other.dtype
