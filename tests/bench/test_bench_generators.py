"""The benchmark graph generators: deterministic by seed, right sizes, ids in range, simple when asked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench import generators as g
from bench.generators import GraphSpec, load_or_make

SMALL = {
    "grid": lambda **kw: g.grid_2d(40, 30, **kw),
    "road": lambda **kw: g.road(64, **kw),
    "delaunay": lambda **kw: g.delaunay(2000, **kw),
    "rmat": lambda **kw: g.rmat(10, 8, **kw),
    "kronecker": lambda **kw: g.kronecker(10, 16, **kw),
    "random": lambda **kw: g.uniform_random(3000, 4, **kw),
}


def _assert_valid(edges: g.Edges) -> None:
    src, dst, weight, n = edges  # unpacks as a 4-tuple
    assert src.dtype == dst.dtype == np.int32
    assert src.shape == dst.shape == weight.shape
    assert src.size > 0
    assert min(src.min(), dst.min()) >= 0 and max(src.max(), dst.max()) < n
    assert np.isfinite(weight.astype(np.float64)).all() and (weight > 0).all()


@pytest.mark.parametrize("kind", sorted(SMALL))
def test_valid_and_simple(kind: str) -> None:
    edges = SMALL[kind]()
    _assert_valid(edges)
    src, dst, _, n = edges
    # simple: each undirected edge once, src < dst, sorted by (src, dst), no self-loops
    assert (src < dst).all()
    key = src.astype(np.int64) * n + dst
    assert (np.diff(key) > 0).all()
    stats = edges.stats
    assert stats["simple"] is True
    assert stats["generated_edges"] - stats["self_loops_removed"] - stats["duplicates_removed"] == src.size
    assert edges.directed_edges == 2 * edges.num_edges == 2 * src.size


@pytest.mark.parametrize("kind", sorted(SMALL))
def test_deterministic_by_seed(kind: str) -> None:
    a = SMALL[kind](seed=3)
    b = SMALL[kind](seed=3)
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x, y)
    if kind != "grid":  # a grid's topology does not depend on the seed, its weights do
        c = SMALL[kind](seed=4)
        assert (
            c.src.shape != a.src.shape or not np.array_equal(c.src, a.src) or not np.array_equal(c.dst, a.dst)
        )
    assert not np.array_equal(SMALL[kind](seed=4).weight, a.weight)


@pytest.mark.parametrize("kind", ["rmat", "kronecker", "random"])
def test_not_simple_keeps_what_was_drawn(kind: str) -> None:
    raw = SMALL[kind](simple=False)
    _assert_valid(raw)
    assert raw.stats["simple"] is False
    assert raw.num_edges == raw.stats["generated_edges"]
    assert raw.stats["self_loops"] == int((raw.src == raw.dst).sum())
    simple = SMALL[kind]()
    assert simple.num_edges < raw.num_edges


def test_grid_counts() -> None:
    edges = g.grid_2d(1024)
    assert edges.num_vertices == 1024 * 1024
    assert edges.num_edges == 2_095_104  # the issue-2 table: 4,190,208 directed
    small = g.grid_2d(3, 5)
    assert small.num_edges == 3 * 4 + 5 * 2


def test_rmat_16_matches_the_reference_shape() -> None:
    edges = g.rmat(16, 8)
    assert edges.num_vertices == 65_536
    assert edges.stats["generated_edges"] == 8 * 65_536
    # issue 2: 1,041,386 directed edges (self-loops and duplicates removed)
    assert abs(edges.directed_edges - 1_041_386) / 1_041_386 < 0.005


def test_rmat_quadrant_probabilities() -> None:
    src, dst, _, n = g.rmat(12, 16, simple=False)
    top = n // 2
    # first level: the source's top bit is set with probability c + d, the destination's with b + d
    assert abs((src >= top).mean() - 0.40) < 0.01
    assert abs((dst >= top).mean() - 0.40) < 0.01
    both = ((src >= top) & (dst >= top)).mean()
    assert abs(both - 0.25) < 0.01


def test_kronecker_is_relabelled_rmat() -> None:
    plain = g.rmat(10, 16, a=0.57, b=0.19, c=0.19, simple=False)
    kron = g.kronecker(10, 16, simple=False)
    degree_plain = np.bincount(np.concatenate([plain.src, plain.dst]), minlength=1024)
    degree_kron = np.bincount(np.concatenate([kron.src, kron.dst]), minlength=1024)
    # the same draws, vertex labels permuted (Graph500): vertex 0 is no longer the hub
    assert np.array_equal(np.sort(degree_plain), np.sort(degree_kron))
    assert degree_plain.argmax() == 0 and degree_kron.argmax() != 0


def test_random_neighbours() -> None:
    edges = g.uniform_random(5000, 4, simple=False)
    assert edges.num_edges == 20_000
    assert np.array_equal(np.bincount(edges.src, minlength=5000), np.full(5000, 4))


def test_delaunay_edge_count() -> None:
    edges = g.delaunay(5000)
    # a planar triangulation has 3n - 3 - h edges, h the hull size (small for random points)
    hull = 3 * 5000 - 3 - edges.num_edges
    assert 3 <= hull <= 100


def test_road_is_sparse() -> None:
    edges = g.road(200)
    average_degree = edges.directed_edges / edges.num_vertices
    assert 2.0 <= average_degree <= 3.0


@pytest.mark.parametrize(
    ("kind", "dtype"),
    [
        ("int", np.int32),
        ("int64", np.int64),
        ("float", np.float32),
        ("float64", np.float64),
        ("ties", np.int32),
    ],
)
def test_weight_kinds(kind: str, dtype: type) -> None:
    w = g.make_weights(10_000, kind, seed=1)
    assert w.dtype == dtype
    assert (w > 0).all() and np.isfinite(w).all()
    if kind == "ties":
        assert (w == 1).all()
    else:
        assert np.unique(w).size > 9_000
    assert np.array_equal(w, g.make_weights(10_000, kind, seed=1))


def test_unknown_weight_kind() -> None:
    with pytest.raises(ValueError, match="unknown weight kind"):
        g.make_weights(3, "complex")


def test_cache_round_trip(tmp_path: Path) -> None:
    spec = GraphSpec("t", "rmat", (("scale", 8), ("edge_factor", 4)), weights="float")
    first, how = load_or_make(spec, tmp_path)
    assert how["source"] == "generated"
    assert len(list(tmp_path.glob("*.npz"))) == 1
    second, how = load_or_make(spec, tmp_path)
    assert how["source"] == "cache"
    for x, y in zip(first, second, strict=True):
        assert np.array_equal(x, y)
    assert second.stats["duplicates_removed"] == first.stats["duplicates_removed"]
    # a different weight kind reuses the topology
    ties, how = load_or_make(GraphSpec("t2", "rmat", spec.params, weights="ties"), tmp_path)
    assert how["source"] == "cache" and np.array_equal(ties.src, first.src)
    # a torn file is made again
    next(tmp_path.glob("*.npz")).write_bytes(b"not a zip")
    _, how = load_or_make(spec, tmp_path)
    assert how["source"] == "generated"
