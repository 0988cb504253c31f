"""The NetworkX backend ``mst_service`` against NetworkX's own functions (the oracle), edge for edge.

The functions are called here as the dispatcher calls them (``BackendInterface``); one test runs
NetworkX in a subprocess that finds the backend through the entry points of pyproject.toml.
NetworkX's own test module runs against the backend in CI (``.ci/run``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import textwrap
import tomllib
from fractions import Fraction
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

import gpu_core
from gpu_core._interop import nx_backend as backend

ROOT = Path(__file__).parents[3]
FUNCTIONS = ["minimum_spanning_edges", "maximum_spanning_edges"]
TREES = ["minimum_spanning_tree", "maximum_spanning_tree"]


def call(name: str, G, *args, **kwargs):
    """Call a backend function the way NetworkX does: can_run first, then the function."""
    assert backend.can_run(name, (G, *args), kwargs) is True
    return getattr(backend.BackendInterface, name)(backend.convert_from_nx(G), *args, **kwargs)


def random_graph(seed: int, n: int, m: int, multigraph: bool, pool: list) -> nx.Graph:
    rng = np.random.default_rng(seed)
    G = nx.MultiGraph() if multigraph else nx.Graph()
    G.add_nodes_from(rng.permutation(n).tolist())  # node order differs from the ids
    for _ in range(m):
        u, v = (int(x) for x in rng.integers(0, n, 2))
        attrs = {} if rng.random() < 0.1 else {"weight": pool[int(rng.integers(len(pool)))]}
        G.add_edge(u, v, **attrs)
    return G


POOLS: dict[str, list] = {
    "ties-int": [1, 2, 3],
    "ties-float": [0.5, -1.25, 2.0, 1.0],
    "mixed": [1, 2.5, 3, -4, np.int32(2), np.float32(2.5)],
    "distinct": list(range(-50, 1000)),
}


@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("multigraph", [False, True], ids=["Graph", "MultiGraph"])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_kruskal_edges_are_networkx_edges_in_networkx_order(name, multigraph, pool):
    for seed in range(6):
        G = random_graph(seed, 30, 80, multigraph, POOLS[pool])
        for keys, data in itertools.product([True, False], repeat=2):
            expected = list(getattr(nx, name)(G, keys=keys, data=data))
            assert call(name, G, keys=keys, data=data) is not None
            actual = list(call(name, G, keys=keys, data=data))
            assert actual == expected, (seed, keys, data)


@pytest.mark.parametrize("multigraph", [False, True], ids=["Graph", "MultiGraph"])
@pytest.mark.parametrize("name", TREES)
def test_trees_equal_networkx_trees(name, multigraph):
    for seed in range(5):
        G = random_graph(seed, 25, 60, multigraph, POOLS["ties-int"])
        G.graph["name"] = "g"
        G.nodes[0]["color"] = "red"
        expected = getattr(nx, name)(G)
        actual = call(name, G)
        assert type(actual) is type(G)
        assert actual.graph == expected.graph and actual._node == expected._node
        assert actual._adj == expected._adj  # same edges, keys and attribute dicts


def test_weight_attribute_and_default_weight_one():
    G = nx.Graph()
    G.add_edge("a", "b", cost=5)
    G.add_edge("b", "c")  # no cost: counts 1
    G.add_edge("a", "c", cost=2)
    for name in FUNCTIONS:
        assert list(call(name, G, weight="cost")) == list(getattr(nx, name)(G, weight="cost"))
    assert [e[:2] for e in call("minimum_spanning_edges", G, weight="cost")] == [("b", "c"), ("a", "c")]


def test_nan_raises_when_iterated_and_is_skipped_with_ignore_nan():
    G = nx.MultiGraph()
    G.add_edge(1, 2, key="n", weight=float("nan"))
    G.add_edge(1, 2, key="x", weight=3)
    G.add_edge(2, 3, weight=2)
    for name in FUNCTIONS:
        edges = call(name, G)  # a generator, as NetworkX's: the error comes when it is iterated
        with pytest.raises(ValueError, match="NaN found as an edge weight"):
            list(edges)
        assert list(call(name, G, ignore_nan=True)) == list(getattr(nx, name)(G, ignore_nan=True))
    with pytest.raises(ValueError, match="NaN"):
        call("minimum_spanning_tree", G)
    tree = call("minimum_spanning_tree", G, ignore_nan=True)
    assert sorted(tree.edges(keys=True)) == [(1, 2, "x"), (2, 3, 0)]


def test_errors_networkx_raises():
    with pytest.raises(nx.NetworkXNotImplemented):
        call("minimum_spanning_tree", nx.DiGraph([(0, 1)]))
    with pytest.raises(ValueError, match=r"random is not a valid choice for an algorithm\."):
        call("maximum_spanning_edges", nx.Graph(), algorithm="random")
    with pytest.raises(nx.NetworkXNotImplemented):
        call("minimum_spanning_edges", nx.MultiGraph([(0, 1)]), algorithm="boruvka")


@pytest.mark.parametrize("algorithm", ["prim", "boruvka"])
@pytest.mark.parametrize("minimum", [True, False], ids=["min", "max"])
def test_prim_and_boruvka_run_only_where_the_forest_is_unique(algorithm, minimum):
    kind = "minimum" if minimum else "maximum"
    light, heavy = (1, 5) if minimum else (5, 1)
    G = nx.Graph()  # ties, yet one forest: the odd edge of the triangle is the one left out
    G.add_weighted_edges_from([(0, 1, light), (1, 2, light), (0, 2, heavy), (2, 3, light)])
    result = call(f"{kind}_spanning_tree", G, algorithm=algorithm)
    assert result._adj == getattr(nx, f"{kind}_spanning_tree")(G, algorithm=algorithm)._adj
    edges = call(f"{kind}_spanning_edges", G, algorithm=algorithm, data=False)
    assert sorted(map(sorted, edges)) == [[0, 1], [1, 2], [2, 3]]
    G.add_edge(0, 3, weight=light)  # now the 4-cycle of equal weights has four forests
    reason = backend.can_run(f"{kind}_spanning_tree", (G,), {"algorithm": algorithm})
    assert isinstance(reason, str) and "more than one spanning forest" in reason
    assert backend.can_run(f"{kind}_spanning_tree", (G,), {}) is True  # kruskal: NetworkX's tie rule


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("3", "is not an int or float"),
        (Fraction(1, 3), "is not an int or float"),
        (2**63, "does not fit in int64"),
        (math.inf, "infinite"),
        (np.longdouble(1.5), "is not an int or float"),
    ],
)
def test_can_run_refuses_weights_it_cannot_compute_exactly(value, why):
    G = nx.Graph([(0, 1, {"weight": 1.0}), (1, 2, {"weight": value})])
    reason = backend.can_run("minimum_spanning_edges", (G,), {})
    assert isinstance(reason, str) and why in reason


def test_can_run_refuses_big_integers_next_to_floats():
    G = nx.Graph([(0, 1, {"weight": 0.5}), (1, 2, {"weight": 2**53 + 1})])
    assert "2**53" in str(backend.can_run("minimum_spanning_tree", (G,), {}))
    G[0][1]["weight"] = 1  # integers only: exact in int64
    assert backend.can_run("minimum_spanning_tree", (G,), {}) is True
    assert call("minimum_spanning_tree", G).number_of_edges() == 2


def test_can_run_names_what_it_does_not_implement():
    assert "does not implement" in str(backend.can_run("random_spanning_tree", (nx.Graph(),), {}))


def test_empty_and_edgeless_graphs():
    for G in (nx.Graph(), nx.empty_graph(3), nx.MultiGraph([(0, 0), (1, 1)])):
        for name in FUNCTIONS:
            assert list(call(name, G)) == []
        assert sorted(call("minimum_spanning_tree", G)) == sorted(G)


def test_info_lists_the_functions():
    info = backend.get_info()
    assert info["backend_name"] == "mst_service"
    assert sorted(info["functions"]) == sorted(FUNCTIONS + TREES)


def _entry_points() -> dict[str, dict[str, str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return project["entry-points"]


def test_networkx_finds_the_backend_through_the_entry_points(tmp_path):
    """A fresh interpreter that sees pyproject's entry points dispatches to the backend."""
    groups = _entry_points()
    assert groups["networkx.backends"] == {"mst_service": "gpu_core._interop.nx_backend:BackendInterface"}
    assert groups["networkx.backend_info"] == {"mst_service": "gpu_core._interop.nx_backend:get_info"}
    dist = tmp_path / "mst_service_entry_points-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mst-service-entry-points\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n"
            for group, eps in groups.items()
        )
    )
    script = textwrap.dedent(
        """
        import importlib.metadata, json, os, sys
        installed = importlib.metadata.entry_points(group="networkx.backends", name="mst_service")
        if len(installed) > 1:  # the package is installed (CI): use its own entry points only
            sys.path.remove(os.environ["FAKE_DIST"])
        import networkx as nx
        nx.config.warnings_to_ignore.add("cache")  # G is used twice; the backend reads it live
        G = nx.Graph()
        G.add_weighted_edges_from([(0, 1, 3), (1, 2, 1), (0, 2, 1), (3, 4, 2)])
        T = nx.minimum_spanning_tree(G, backend="mst_service")
        edges = list(nx.maximum_spanning_edges(G, backend="mst_service", data=False))
        from fractions import Fraction
        exact = nx.Graph([(0, 1, {"weight": Fraction(1, 3)}), (1, 2, {"weight": Fraction(1, 2)}),
                          (0, 2, {"weight": Fraction(1, 4)})])
        try:
            nx.minimum_spanning_tree(exact, backend="mst_service")
            refused = None
        except NotImplementedError as exc:
            refused = str(exc)
        nx.config.backend_priority.generators = ["mst_service"]  # automatic dispatch, with fallback
        fallback = sorted(nx.minimum_spanning_tree(exact).edges)
        import gpu_core._interop.nx_backend as engine_side
        calls, engine = [], engine_side.minimum_spanning_forest
        engine_side.minimum_spanning_forest = lambda *a, **k: calls.append(1) or engine(*a, **k)
        automatic = sorted(nx.minimum_spanning_tree(nx.Graph(G)).edges)
        print(json.dumps({"tree": sorted(T.edges), "max": edges, "refused": refused,
                          "fallback": fallback, "automatic": [automatic, len(calls)],
                          "backends": sorted(nx.utils.backends.backends)}))
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "FAKE_DIST": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "mst_service" in out["backends"]
    assert out["tree"] == [[0, 2], [1, 2], [3, 4]]
    assert out["max"] == [[0, 1], [3, 4], [0, 2]]  # ties: the first in G.edges order
    assert "mst_service" in out["refused"]  # asked for by name, it says it cannot
    assert out["fallback"] == [[0, 1], [0, 2]]  # by priority, NetworkX took over
    assert out["automatic"] == [out["tree"], 1]  # by priority, on the engine


@pytest.mark.gpu
@pytest.mark.parametrize("multigraph", [False, True], ids=["Graph", "MultiGraph"])
def test_on_a_gpu_host_the_backend_computes_on_the_gpu(monkeypatch, multigraph):
    """``backend="auto"``: where CuPy sees a device the engine runs there, with NetworkX's answer."""
    ran_on = []
    engine = gpu_core.minimum_spanning_forest  # the function the backend calls

    def recording(*args, **kwargs):
        forest = engine(*args, **kwargs)
        ran_on.append(forest.backend)
        return forest

    monkeypatch.setattr(backend, "minimum_spanning_forest", recording)
    G = random_graph(11, 3000, 20000, multigraph, POOLS["ties-float"])
    for name in TREES:
        assert call(name, G)._adj == getattr(nx, name)(G)._adj
    assert ran_on == ["gpu", "gpu"]
