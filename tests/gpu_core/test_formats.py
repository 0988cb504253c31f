"""Graph file readers: each format round-trips a graph written here, malformed files are refused.

The writers below are written from the format descriptions (ECL's .egr layout,
Matrix Market, DIMACS 9th challenge), independently of ``gpu_core.formats``.
"""

from __future__ import annotations

import io
import zipfile
from typing import Any

import numpy as np
import pytest

import gpu_core
from gpu_core.errors import GraphValidationError, NonFiniteWeightError, VertexIdError
from tests.utils.graphs import EdgeGraph, random_graph
from tests.utils.oracles import assert_matches_oracles


def sample_graph(dtype: Any = np.int64, seed: int = 0) -> EdgeGraph:
    """Ties, a self-loop, parallel edges (both directions), an isolated vertex (id 9, the last)."""
    g = random_graph(seed, 9, 30, dtype=dtype, num_weights=4, self_loops=0.1, parallel=0.2)
    assert np.any(g.src == g.dst) and g.src.max() < 9
    return EdgeGraph(g.src, g.dst, g.weight, 10, f"sample-{np.dtype(dtype)}")


def canonical(graph: EdgeGraph) -> EdgeGraph:
    """The graph with every edge as (min, max), sorted by (min, max), parallel edges in input order:
    the order in which a CSR file lists the edges."""
    u, v = np.minimum(graph.src, graph.dst), np.maximum(graph.src, graph.dst)
    order = np.lexsort((v, u))  # stable: parallel edges keep their order
    return EdgeGraph(u[order], v[order], graph.weight[order], graph.num_vertices, graph.name)


def text_number(x: Any) -> str:
    return repr(float(x)) if isinstance(x, float) else str(x)  # repr: shortest exact float text


# ---------------------------------------------------------------- writers


def write_npz(graph: EdgeGraph, *, with_n: bool = True) -> bytes:
    buf = io.BytesIO()
    if with_n:
        n = np.array(graph.num_vertices, dtype=np.int64)
        np.savez(buf, src=graph.src, dst=graph.dst, weight=graph.weight, num_vertices=n)
    else:
        np.savez(buf, src=graph.src, dst=graph.dst, weight=graph.weight)
    return buf.getvalue()


def write_egr(graph: EdgeGraph, *, weighted: bool = True) -> bytes:
    """ECL graph: int32 n, nnz, row_ptr[n+1], col[nnz], weight[nnz]; an undirected edge is stored in
    both rows, a self-loop once."""
    entries: list[tuple[int, int, int]] = []
    for u, v, w in zip(graph.src.tolist(), graph.dst.tolist(), graph.weight.tolist(), strict=True):
        entries.append((u, v, w))
        if u != v:
            entries.append((v, u, w))
    entries.sort(key=lambda e: (e[0], e[1]))  # stable
    n = graph.num_vertices
    row_ptr = np.zeros(n + 1, dtype=np.int64)
    for u, _, _ in entries:
        row_ptr[u + 1] += 1
    words = [n, len(entries), *np.cumsum(row_ptr).tolist(), *(e[1] for e in entries)]
    if weighted:
        words += [e[2] for e in entries]
    return np.array(words, dtype="<i4").tobytes()


def write_mtx(
    graph: EdgeGraph, field: str, symmetry: str = "general", shape: tuple[int, int] | None = None
) -> bytes:
    rows, cols = shape or (graph.num_vertices, graph.num_vertices)
    lines = [f"%%MatrixMarket matrix coordinate {field} {symmetry}", "% written by the tests", "%"]
    lines.append(f"{rows} {cols} {graph.num_edges}")
    for u, v, w in zip(graph.src.tolist(), graph.dst.tolist(), graph.weight.tolist(), strict=True):
        lines.append(f"{u + 1} {v + 1}" + ("" if field == "pattern" else f" {text_number(w)}"))
    return ("\n".join(lines) + "\n").encode()


def write_edgelist(graph: EdgeGraph, *, weighted: bool = True) -> bytes:
    lines = ["# src dst weight", "", "% another comment"]
    for i, (u, v, w) in enumerate(
        zip(graph.src.tolist(), graph.dst.tolist(), graph.weight.tolist(), strict=True)
    ):
        sep = "\t" if i % 2 else " "
        lines.append(sep.join([str(u), str(v)] + ([text_number(w)] if weighted else [])) + "  ")
        if i == 3:
            lines.append("   ")
    return ("\n".join(lines) + "\n").encode()


def write_dimacs(graph: EdgeGraph) -> bytes:
    lines = ["c 9th DIMACS challenge format", f"p sp {graph.num_vertices} {graph.num_edges}", "c arcs"]
    for u, v, w in zip(graph.src.tolist(), graph.dst.tolist(), graph.weight.tolist(), strict=True):
        lines.append(f"a {u + 1} {v + 1} {text_number(w)}")
    return ("\n".join(lines) + "\n").encode()


# ---------------------------------------------------------------- round trips


def assert_read_back(
    data: bytes, fmt: str, expected: EdgeGraph, *, dtype: Any, num_vertices: int | None
) -> None:
    got = gpu_core.read_graph(data, fmt)
    assert np.array_equal(got.src, expected.src) and np.array_equal(got.dst, expected.dst)
    assert got.weight.dtype == np.dtype(dtype), got.weight.dtype
    assert np.array_equal(got.weight, expected.weight.astype(dtype))
    assert got.num_vertices == num_vertices
    # the arrays read back make a valid graph with the forest of the original edge list
    n = num_vertices if num_vertices is not None else int(max(expected.src.max(), expected.dst.max())) + 1
    result = gpu_core.minimum_spanning_forest(
        got.src, got.dst, got.weight, num_vertices=got.num_vertices, backend="cpu"
    )
    assert_matches_oracles(result, expected.src, expected.dst, expected.weight.astype(dtype), n)


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64"])
@pytest.mark.parametrize("with_n", [True, False])
def test_npz_round_trip(dtype: str, with_n: bool) -> None:
    graph = sample_graph(dtype)
    data = write_npz(graph, with_n=with_n)
    assert_read_back(data, "npz", graph, dtype=dtype, num_vertices=10 if with_n else None)


@pytest.mark.parametrize("weighted", [True, False])
def test_egr_round_trip(weighted: bool) -> None:
    graph = canonical(sample_graph(np.int32))
    expected = graph if weighted else graph.with_weight(np.ones(graph.num_edges, dtype=np.int32))
    assert_read_back(write_egr(graph, weighted=weighted), "egr", expected, dtype=np.int32, num_vertices=10)


@pytest.mark.parametrize(
    ("field", "dtype"), [("integer", np.int64), ("real", np.float64), ("pattern", np.int64)]
)
@pytest.mark.parametrize("symmetry", ["general", "symmetric"])
def test_mtx_round_trip(field: str, dtype: Any, symmetry: str) -> None:
    graph = sample_graph(np.float64 if field == "real" else np.int64, seed=1)
    if field == "real":  # values that are not integers, so the reader must keep them as floats
        graph = graph.with_weight(graph.weight + 0.25)
    if symmetry == "symmetric":  # symmetric files store the lower triangle
        graph = EdgeGraph(
            np.maximum(graph.src, graph.dst), np.minimum(graph.src, graph.dst), graph.weight, 10, graph.name
        )
    expected = graph if field != "pattern" else graph.with_weight(np.ones(graph.num_edges, dtype=np.int64))
    assert_read_back(write_mtx(graph, field, symmetry), "mtx", expected, dtype=dtype, num_vertices=10)


def test_mtx_rectangular_size_counts_the_larger_side() -> None:
    graph = sample_graph(np.int64)
    data = write_mtx(graph, "integer", shape=(9, 12))
    assert_read_back(data, "mtx", graph, dtype=np.int64, num_vertices=12)


@pytest.mark.parametrize(("dtype", "weighted"), [(np.int64, True), (np.float64, True), (np.int64, False)])
def test_edgelist_round_trip(dtype: Any, weighted: bool) -> None:
    graph = sample_graph(dtype, seed=2)
    if dtype == np.float64:
        graph = graph.with_weight(graph.weight + 1 / 3)  # needs all 17 digits of repr
    expected = graph if weighted else graph.with_weight(np.ones(graph.num_edges, dtype=np.int64))
    assert_read_back(
        write_edgelist(graph, weighted=weighted), "edgelist", expected, dtype=dtype, num_vertices=None
    )


@pytest.mark.parametrize("dtype", [np.int64, np.float64])
def test_dimacs_round_trip(dtype: Any) -> None:
    graph = sample_graph(dtype, seed=3)
    assert_read_back(write_dimacs(graph), "dimacs", graph, dtype=dtype, num_vertices=10)


def test_empty_files_that_are_valid() -> None:
    empty = gpu_core.read_graph(b"# nothing here\n", "edgelist")
    assert empty.src.size == empty.dst.size == empty.weight.size == 0
    assert (
        gpu_core.Graph(empty.src, empty.dst, empty.weight, empty.num_vertices, backend="cpu").num_vertices
        == 0
    )
    isolated = gpu_core.read_graph(b"p sp 4 0\n", "dimacs")
    assert isolated.num_vertices == 4 and isolated.weight.size == 0
    forest = gpu_core.minimum_spanning_forest(
        isolated.src, isolated.dst, isolated.weight, num_vertices=isolated.num_vertices, backend="cpu"
    )
    assert forest.num_components == 4


def test_formats_registry() -> None:
    assert set(gpu_core.FORMATS) == {"npz", "egr", "mtx", "edgelist", "dimacs", "arrow", "parquet"}
    assert all(callable(reader) for reader in gpu_core.FORMATS.values())


def test_unknown_format() -> None:
    with pytest.raises(GraphValidationError) as info:
        gpu_core.read_graph(b"0 1 1\n", "graphml")
    assert info.value.field == "format" and "'graphml'" in str(info.value)
    assert all(name in str(info.value) for name in gpu_core.FORMATS)


# ---------------------------------------------------------------- malformed files


def _npz(**arrays: Any) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _npy() -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.arange(6))
    return buf.getvalue()


def _zip_with_text() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("src.npy", b"not an npy array")
    return buf.getvalue()


def _egr(*words: int) -> bytes:
    return np.array(words, dtype="<i4").tobytes()


GOOD_NPZ = _npz(src=np.arange(3), dst=np.arange(1, 4), weight=np.ones(3))
MTX_INT = b"%%MatrixMarket matrix coordinate integer general\n"
MTX_REAL = b"%%MatrixMarket matrix coordinate real general\n"

MALFORMED: dict[str, tuple[str, bytes, str]] = {
    # name: (format, file, a fragment the message must contain)
    "npz-not-a-zip": ("npz", b"definitely not a zip archive", "not a valid npz graph"),
    "npz-empty": ("npz", b"", "not a valid npz graph"),
    "npz-truncated": ("npz", GOOD_NPZ[: len(GOOD_NPZ) // 2], "not a valid npz graph"),
    "npz-missing-weight": ("npz", _npz(src=np.arange(3), dst=np.arange(3)), "missing array(s) weight"),
    "npz-float-num-vertices": (
        "npz",
        _npz(src=np.arange(3), dst=np.arange(3), weight=np.ones(3), num_vertices=np.float64(4)),
        "'num_vertices' must be an integer scalar",
    ),
    "npz-vector-num-vertices": (
        "npz",
        _npz(src=np.arange(3), dst=np.arange(3), weight=np.ones(3), num_vertices=np.arange(2)),
        "'num_vertices' must be an integer scalar",
    ),
    "npz-object-array": (
        "npz",
        _npz(src=np.arange(2), dst=np.arange(2), weight=np.array([1, None], dtype=object)),
        "pickle",
    ),
    "npz-zip-of-garbage": ("npz", _zip_with_text(), "not a valid npz graph"),
    "npz-is-a-plain-npy": ("npz", _npy(), "not a valid npz graph"),
    "egr-odd-size": ("egr", b"\x01\x00\x00\x00\x02\x00\x00", "multiple of 4"),
    "egr-no-header": ("egr", _egr(3), "header"),
    "egr-size-mismatch": ("egr", _egr(3, 4, 0, 2, 3, 4, 1, 0, 2), "does not match the file size"),
    "egr-negative-n": ("egr", _egr(-2, 0), "does not match the file size"),
    "egr-row-ptr-not-from-0": ("egr", _egr(2, 2, 1, 2, 2, 1, 0), "row pointers"),
    "egr-row-ptr-decreasing": ("egr", _egr(3, 2, 0, 2, 1, 2, 1, 0), "row pointers"),
    "mtx-no-banner": ("mtx", b"3 3 1\n1 2 3\n", "%%MatrixMarket"),
    "mtx-array": ("mtx", b"%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n", "coordinate"),
    "mtx-complex": ("mtx", b"%%MatrixMarket matrix coordinate complex general\n2 2 1\n1 2 1 0\n", "complex"),
    "mtx-no-size-line": ("mtx", MTX_INT + b"% only comments\n", "size line"),
    "mtx-bad-size-line": ("mtx", MTX_INT + b"3 x 1\n1 2 3\n", "size line"),
    "mtx-too-few-entries": ("mtx", MTX_INT + b"3 3 2\n1 2 3\n", "announces 2 entries but the file has 1"),
    "mtx-too-many-entries": ("mtx", MTX_INT + b"3 3 1\n1 2 3\n2 3 4\n", "announces 1 entries"),
    "mtx-short-line": ("mtx", MTX_INT + b"3 3 2\n1 2 3\n2 3\n", "line 4 has 2 fields"),
    "mtx-float-in-integer-file": ("mtx", MTX_INT + b"3 3 1\n1 2 3.5\n", "non-integer"),
    "mtx-text-weight": ("mtx", MTX_REAL + b"3 3 1\n1 2 heavy\n", "weights must be numbers"),
    "mtx-float-ids": ("mtx", MTX_REAL + b"3 3 1\n1.5 2 3\n", "vertex ids must be integers"),
    "mtx-weight-beyond-int64": (
        "mtx",
        MTX_INT + b"3 3 1\n1 2 99999999999999999999\n",
        "not a valid mtx graph",
    ),
    "edgelist-text-id": ("edgelist", b"0 1 2\n0 x 1\n", "vertex ids must be integers"),
    "edgelist-missing-weight": ("edgelist", b"0 1 2\n1 2\n", "line 2 has 2 fields, expected at least 3"),
    "edgelist-one-field": ("edgelist", b"# header\n5\n", "line 2 has 1 fields"),
    "edgelist-text-weight": ("edgelist", b"0 1 2\n1 2 three\n", "weights must be numbers"),
    "edgelist-not-utf8": ("edgelist", b"\xff\xfe 1 2\n", "vertex ids must be integers"),
    "edgelist-id-beyond-int64": ("edgelist", b"0 99999999999999999999 1\n", "not a valid edgelist graph"),
    "edgelist-weight-beyond-int64": ("edgelist", b"0 1 99999999999999999999\n", "not a valid edgelist graph"),
    "dimacs-no-p-line": ("dimacs", b"c nothing\na 1 2 3\n", "'p sp N M'"),
    "dimacs-two-p-lines": ("dimacs", b"p sp 3 1\np sp 3 1\na 1 2 3\n", "'p sp N M'"),
    "dimacs-short-p-line": ("dimacs", b"p sp 3\na 1 2 3\n", "'p sp N M'"),
    "dimacs-text-n": ("dimacs", b"p sp many 1\na 1 2 3\n", "number of vertices"),
    "dimacs-unknown-line": ("dimacs", b"p sp 3 1\ne 1 2 3\n", "line 2 starts with 'e'"),
    "dimacs-short-arc": ("dimacs", b"p sp 3 2\na 1 2 3\na 2 3\n", "line 3 has 3 fields"),
    "dimacs-float-ids": ("dimacs", b"p sp 3 1\na 1.0 2 3\n", "vertex ids must be integers"),
    "dimacs-id-beyond-int64": (
        "dimacs",
        b"p sp 3 1\na 1 99999999999999999999 3\n",
        "not a valid dimacs graph",
    ),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_files_are_validation_errors(name: str) -> None:
    fmt, data, fragment = MALFORMED[name]
    with pytest.raises(GraphValidationError) as info:
        gpu_core.read_graph(data, fmt)
    message = str(info.value)
    assert message.startswith(f"not a valid {fmt} graph: "), message
    assert fragment in message, message
    assert info.value.field == "body"
    assert isinstance(info.value, ValueError)


def test_files_with_bad_edges_are_refused_when_the_graph_is_built() -> None:
    """The readers return arrays in file order; Graph then names the bad edge by its index."""
    dimacs = gpu_core.read_graph(b"p sp 3 2\na 1 2 1\na 0 3 2\n", "dimacs")  # vertex 0 in a 1-based file
    with pytest.raises(VertexIdError) as info:
        gpu_core.Graph(dimacs.src, dimacs.dst, dimacs.weight, dimacs.num_vertices, backend="cpu")
    assert (info.value.field, info.value.index) == ("src", 1)

    mtx = gpu_core.read_graph(MTX_INT + b"3 3 2\n1 2 5\n2 4 1\n", "mtx")  # 4 > size 3
    with pytest.raises(VertexIdError) as info:
        gpu_core.Graph(mtx.src, mtx.dst, mtx.weight, mtx.num_vertices, backend="cpu")
    assert (info.value.field, info.value.index) == ("dst", 1)

    text = gpu_core.read_graph(b"0 1 1.5\n1 2 nan\n2 0 inf\n", "edgelist")
    with pytest.raises(NonFiniteWeightError) as non_finite:
        gpu_core.Graph(text.src, text.dst, text.weight, text.num_vertices, backend="cpu")
    assert non_finite.value.index == 1

    egr = gpu_core.read_graph(_egr(2, 2, 0, 1, 2, 5, 0, 7, 7), "egr")  # neighbour 5 of vertex 0
    with pytest.raises(VertexIdError) as info:
        gpu_core.Graph(egr.src, egr.dst, egr.weight, egr.num_vertices, backend="cpu")
    assert (info.value.field, info.value.index) == ("dst", 0)
