"""The client with SciPy matrices and NetworkX graphs (up, and forests back as either); progress bars."""

from __future__ import annotations

import io
import json
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import minimum_spanning_tree as scipy_mst

import service.client.progress as client_module
from service.client import Client, main, progress
from service.client.interop import graph_source

from .live import LiveServer


def nx_graph(multigraph: bool, seed: int = 0) -> nx.Graph:
    rng = np.random.default_rng(seed)
    G = nx.MultiGraph() if multigraph else nx.Graph()
    G.graph["name"] = "roads"
    G.add_nodes_from(f"v{i}" for i in rng.permutation(40))
    G.nodes["v3"]["color"] = "red"
    for _ in range(120):
        u, v = (f"v{int(x)}" for x in rng.integers(0, 40, 2))
        attrs = {"label": "e"} if rng.random() < 0.2 else {"weight": int(rng.integers(1, 4)), "label": "e"}
        G.add_edge(u, v, **attrs)  # ties, missing weights (1), self-loops, parallel edges
    return G


@pytest.mark.parametrize("multigraph", [False, True], ids=["Graph", "MultiGraph"])
def test_networkx_graph_up_and_its_forest_back_as_networkx_computes_it(live: LiveServer, multigraph):
    G = nx_graph(multigraph)
    expected = nx.minimum_spanning_tree(G)
    with Client(live.url) as mst:
        record = mst.upload_graph(G)
        assert record["num_vertices"] == 40 and record["num_edges"] == G.number_of_edges()
        job = mst.wait(mst.submit(record["id"])["id"])
        tree = mst.result(job["id"], output="networkx")
        assert type(tree) is type(G)
        assert tree.graph == expected.graph and tree._node == expected._node
        assert tree._adj == expected._adj  # the same edges (keys, attribute dicts) as NetworkX's Kruskal
        one = mst.one_shot_graph(G, output="networkx")
        assert one._adj == expected._adj
        matrix = mst.result(job["id"], output="scipy")
        assert matrix.shape == (40, 40) and matrix.nnz == expected.number_of_edges()
        assert matrix.sum() == expected.size(weight="weight")


def random_sparse(seed: int, n: int = 60) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    dense = np.where(rng.random((n, n)) < 0.1, rng.integers(1, 5, (n, n)), 0).astype(np.float32)
    return sp.csr_matrix(dense)  # asymmetric: both directions stored with different weights


def test_scipy_matrix_up_and_its_forest_back_as_scipy_computes_it(live: LiveServer):
    matrix = random_sparse(1)
    expected = scipy_mst(matrix)
    with Client(live.url) as mst:
        record = mst.upload_graph(matrix)
        assert record["weight_dtype"] == "float32" and record["num_edges"] == matrix.nnz
        job = mst.wait(mst.submit(record["id"])["id"])
        tree = mst.result(job["id"], output="scipy")
        assert tree.shape == expected.shape
        assert tree.toarray().tolist() == expected.toarray().tolist()  # same entries, same orientation
        assert mst.one_shot_graph(sp.coo_array(matrix), output="scipy").toarray().tolist() == (
            expected.toarray().tolist()
        )
        graph = mst.result(job["id"], output="networkx")
        assert sorted(graph.nodes) == list(range(60)) and graph.number_of_edges() == expected.nnz


def test_forests_of_graphs_uploaded_otherwise_need_the_source(live: LiveServer):
    matrix = random_sparse(2, 20)
    source = graph_source(matrix)
    with Client(live.url) as mst:
        record = mst.upload_arrays(source.src, source.dst, source.weight, source.num_vertices)
        job = mst.wait(mst.submit(record["id"])["id"])
        with pytest.raises(ValueError, match="pass source="):
            mst.result(job["id"], output="scipy")
        tree = mst.result(job["id"], output="scipy", source=matrix)
        assert tree.toarray().tolist() == scipy_mst(matrix).toarray().tolist()
        with pytest.raises(ValueError, match="output must be one of"):
            mst.result(job["id"], output="pandas")


def test_what_cannot_be_sent_exactly_is_refused_before_sending():
    with pytest.raises(TypeError, match="SciPy sparse matrix or array or a NetworkX graph"):
        graph_source(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="square"):
        graph_source(sp.csr_array((2, 3)))
    with pytest.raises(ValueError, match="complex128"):
        graph_source(sp.csr_array(np.array([[0, 1j], [0, 0]])))
    with pytest.raises(ValueError, match="NaN"):
        graph_source(nx.Graph([(0, 1, {"weight": float("nan")})]))
    with pytest.raises(ValueError, match="undirected"):
        graph_source(nx.DiGraph([(0, 1)]))
    widened = graph_source(sp.csr_array(np.array([[0, 3], [0, 0]], dtype=np.int8)))
    assert widened.weight.dtype == np.int32


def test_progress_bar_draws_on_its_stream():
    stream = io.StringIO()
    bar = progress.ProgressBar("upload", 10_000_000, stream)
    bar.update(5_000_000)
    bar.update(5_000_000)
    bar.close()
    text = stream.getvalue()
    assert text.startswith("\rupload [") and "100%" in text and "10.0 MB / 10.0 MB" in text
    assert text.endswith("\n")
    assert progress.wanted(None, io.StringIO()) is False  # not a terminal
    assert progress.wanted(True, io.StringIO()) is True


def test_cli_progress_bars_for_large_transfers(
    live: LiveServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(client_module, "MIN_BYTES", 10_000)  # "a few MB" scaled to the test's sizes
    n = 3000
    path = tmp_path / "path.txt"
    path.write_text("".join(f"{i} {i + 1} {i % 7}\n" for i in range(n - 1)))
    assert main(["--url", live.url, "--no-progress", "upload", str(path)]) == 0
    assert "upload [" not in capsys.readouterr().err
    assert main(["--url", live.url, "--progress", "upload", str(path)]) == 0
    captured = capsys.readouterr()
    assert "upload [" in captured.err and "100%" in captured.err
    graph = json.loads(captured.out)
    assert main(["--url", live.url, "mst", graph["id"], "--wait", "30"]) == 0
    job = json.loads(capsys.readouterr().out)
    out = tmp_path / "forest.npz"
    assert main(["--url", live.url, "--progress", "result", job["id"], "--out", str(out)]) == 0
    assert "download [" in capsys.readouterr().err
    assert main(["--url", live.url, "--progress", "oneshot", str(path)]) == 0
    captured = capsys.readouterr()
    assert "upload [" in captured.err and "download [" in captured.err
    assert json.loads(captured.out)["num_components"] == 1
    small = tmp_path / "small.txt"
    small.write_text("0 1 1\n")
    assert main(["--url", live.url, "--progress", "upload", str(small)]) == 0
    assert "upload [" not in capsys.readouterr().err  # under the threshold: no bar
