"""The brute-force path of points of many coordinates (CPU backend): exact under the tie rule.

Every tree is held against the O(n²) oracle of tests/utils/points.py (the contract's float64
squared distances, Prim under the ``(weight², min, max)`` order) or against the k-d tree's path on
the same points, bit for bit. The filter's margins are tested where they matter: exact ties
(duplicates, grids), near-ties closer than the filter's error (where the filtered order alone is
wrong, which the tests check first), the device's coarser filters (float32, TF32) run on the host,
d = 1,024, and tiles and blocks that do not divide n. The device's float16 filter is held to its
bound here with the device's arithmetic emulated (float16 inputs, float32 sums and epilogue), at
its boundaries: norms that differ by 10^6, huge and tiny coordinates, duplicates, d = 1,024.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

import gpu_core
from gpu_core._points.brute import list_width, plan_blocks
from gpu_core._points.brute_cpu import BruteCpuIndex, HostEngine
from gpu_core._points.filter import PRECISIONS, Precision, coefficient, float16_scale, threshold, upper
from gpu_core._points.index import SPATIAL_MAX_DIMENSIONS, build_index
from gpu_core._points.neighbours import kth_distances, query_neighbours
from tests.utils.points import (
    PointSet,
    blobs,
    core_squared,
    point_sets,
    prim_tree,
    random_points,
    squared_distance_matrix,
    weight_matrix,
)


def brute_tree(points: np.ndarray, k: int, **engine) -> gpu_core.EuclideanTree:
    coords = np.ascontiguousarray(points, dtype=np.float64)
    return BruteCpuIndex(coords, owns_coords=False, **engine).tree(k, time.perf_counter(), True, False)


def assert_oracle(tree: gpu_core.EuclideanTree, points: np.ndarray, k: int, name: str) -> None:
    src, dst, w = prim_tree(weight_matrix(points, k))
    assert np.array_equal(tree.src, src), name
    assert np.array_equal(tree.dst, dst), name
    assert np.array_equal(tree.weights, w), name  # bit for bit
    if k > 1:
        core = np.sqrt(core_squared(squared_distance_matrix(points), k))
        assert tree.core_distances is not None and np.array_equal(tree.core_distances, core), name
    else:
        assert tree.core_distances is None


def far_clusters(seed: int, n: int, d: int, offset: float = 1e6, spread: float = 1e-3) -> PointSet:
    """Two tight clusters far from their mean: the filter's error (relative to the norms) exceeds
    every distance inside a cluster, so its order there is noise and only the recheck decides."""
    rng = np.random.default_rng(seed)
    side = np.where(np.arange(n) % 2 == 0, offset, -offset)[:, None]
    base = rng.normal(0.0, spread, (n, d))
    base[n // 3] = base[n // 3 + 2]  # a duplicate inside a cluster (an exact tie)
    return PointSet(f"far-clusters-{n}x{d}", side + base)


def test_the_public_entry_points_take_the_brute_force_path_above_the_limit() -> None:
    d = SPATIAL_MAX_DIMENSIONS["cpu"] + 1
    ps = blobs(3, 200, d)
    index = gpu_core.build_point_index(ps.points, backend="cpu")
    assert isinstance(index._state, BruteCpuIndex) and index.dimensions == d
    tree = gpu_core.euclidean_mst(index, min_samples=4)
    assert_oracle(tree, ps.points, 4, ps.name)
    assert tree.timings_ms["rounds"] >= 1 and "lists_ms" in tree.timings_ms
    below = gpu_core.build_point_index(ps.points[:, :-1], backend="cpu")
    assert not isinstance(below._state, BruteCpuIndex)


@pytest.mark.parametrize("d", [17, 33, 64])
@pytest.mark.parametrize("k", [1, 2, 5, 20])
def test_trees_equal_the_oracle_with_every_kind_of_tie(d: int, k: int) -> None:
    for n in (2, 3, 9, 150):
        if k > n:
            continue
        for ps in point_sets(n, d, seed=5 * n + d):  # random, float32, blobs, duplicates, collinear, grid
            tree = gpu_core.euclidean_mst(ps.points, min_samples=k, backend="cpu")
            assert_oracle(tree, ps.points, k, ps.name)


@pytest.mark.parametrize("d", [2, 3, 8, 16])
@pytest.mark.parametrize("k", [1, 10])
def test_brute_force_equals_the_k_d_tree_path(d: int, k: int) -> None:
    for ps in point_sets(700, d, seed=d):
        coords = np.ascontiguousarray(ps.points, dtype=np.float64)
        spatial = build_index(ps.points, coords, "cpu", False, search="spatial")
        brute = build_index(ps.points, coords, "cpu", False, search="brute")
        assert isinstance(brute._state, BruteCpuIndex) and not isinstance(spatial._state, BruteCpuIndex)
        a, b = gpu_core.euclidean_mst(spatial, min_samples=k), gpu_core.euclidean_mst(brute, min_samples=k)
        assert np.array_equal(a.src, b.src) and np.array_equal(a.dst, b.dst), ps.name
        assert np.array_equal(a.weights, b.weights), ps.name
        if a.core_distances is None:
            assert b.core_distances is None
        else:
            assert b.core_distances is not None and np.array_equal(a.core_distances, b.core_distances)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_devices_filter_precisions_run_on_the_host_give_the_same_trees(precision: Precision) -> None:
    """float32 and TF32 (inputs truncated to 10 bits, as a GPU's tensor cores may) have margins
    thousands of times float64's: more candidates are rechecked, the answer is the same."""
    for ps in (*point_sets(120, 40, seed=2), blobs(4, 300, 96, centers=6, spread=0.2)):
        for k in (1, 3, 12):
            tree = brute_tree(ps.points, k, precision=precision, tile=37, block=16)
            assert_oracle(tree, ps.points, k, f"{ps.name} {precision} k={k}")


@pytest.mark.parametrize("precision", PRECISIONS)
def test_near_ties_closer_than_the_filters_error(precision: Precision) -> None:
    ps = far_clusters(8, 160, 48)
    engine = HostEngine(np.ascontiguousarray(ps.points), precision)
    # the filter alone orders the cluster's points wrongly: its nearest by F is not the nearest
    exact = squared_distance_matrix(ps.points) * engine.scale**2
    f = filtered_keys(engine)
    np.fill_diagonal(exact, np.inf)
    np.fill_diagonal(f, np.inf)
    wrong = np.argmin(f, axis=1) != np.argmin(exact, axis=1)
    assert wrong.any(), "the construction should defeat the filter's order"
    # ... and its error there stays inside the stated bound
    np.fill_diagonal(f, 0.0)
    np.fill_diagonal(exact, 0.0)
    assert_within_bound(engine, f, exact)
    for k in (1, 2, 7):
        assert_oracle(brute_tree(ps.points, k, precision=precision, tile=50, block=24), ps.points, k, ps.name)


def filtered_keys(engine: HostEngine, device: bool = False) -> np.ndarray:
    """Every pair's filtered key ``F`` (scaled units), as the host engine computes it, or with the
    device's arithmetic: float16 inputs summed in float32, ``v = fma(-2, s, ‖b̃‖²)`` in float32 (the
    norms rounded to float32), ``F = v + ‖ã‖²`` in float64."""
    c = engine.centered
    if not device:
        return engine.norm2[:, None] + engine.norm2[None, :] - 2.0 * (c @ c.T).astype(np.float64)
    s = (c.astype(np.float32) @ c.astype(np.float32).T).astype(np.float64)
    v = (engine.norm2.astype(np.float32).astype(np.float64)[None, :] - 2.0 * s).astype(np.float32)
    return v.astype(np.float64) + engine.norm2[:, None]


def assert_within_bound(engine: HostEngine, f: np.ndarray, exact: np.ndarray) -> float:
    """``|F - s²D| <= E(s²D)`` for every pair, ``upper(F) >= s²D`` and ``F <= threshold(s²D)``;
    returns the largest error over its bound (how much of the margin the pairs use)."""
    alpha, beta = engine.alpha[:, None], engine.beta[:, None]
    bound = alpha * np.sqrt(exact) + beta
    assert np.all(np.abs(f - exact) <= bound)
    assert np.all(upper(np, f, alpha, beta) >= exact)
    assert np.all(f <= threshold(np, exact, alpha, beta))
    return float(np.max(np.abs(f - exact) / bound))


def boundary_sets() -> list[PointSet]:
    """The float16 filter's boundaries: norms 10^6 apart, huge and tiny coordinates, exact and
    near duplicates (closer than float16's spacing), d = 1,024, a far offset."""
    rng = np.random.default_rng(46)
    direction = rng.normal(size=(300, 64))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    radii = np.where(np.arange(300) % 2 == 0, 1e-3, 1e3)[:, None]  # norms 10^6 apart
    spread = direction * radii
    near = np.repeat(rng.random((30, 96)), 5, axis=0)
    near[::5] += 1e-7  # closer than float16 resolves, next to exact duplicates
    return [
        PointSet("norms-1e6-apart", spread),
        PointSet("huge", rng.random((200, 40)) * 1e140),
        PointSet("tiny", rng.random((200, 40)) * 1e-140),
        PointSet("near-duplicates", near),
        random_points(9, 120, 1024, np.float32),
        far_clusters(4, 200, 33),
    ]


@pytest.mark.parametrize("ps", boundary_sets(), ids=lambda ps: ps.name)
def test_the_float16_filter_keeps_its_bound_with_the_devices_arithmetic(ps: PointSet) -> None:
    engine = HostEngine(np.ascontiguousarray(ps.points, dtype=np.float64), "float16")
    exact = squared_distance_matrix(ps.points) * engine.scale**2
    for device in (False, True):
        used = assert_within_bound(engine, filtered_keys(engine, device), exact)
        assert used < 1.0
    for k in (1, 4):
        assert_oracle(brute_tree(ps.points, k, precision="float16", tile=64, block=32), ps.points, k, ps.name)


def test_the_float16_scale_keeps_the_largest_coordinate_below_2_to_the_13() -> None:
    for largest in (1e-140, 3e-7, 0.49, 1.0, 8191.0, 8192.0, 8193.0, 1e140):
        scale = float16_scale(largest)
        assert scale is not None and 2.0**12 < largest * scale <= 2.0**13 and math.log2(scale).is_integer()
    assert float16_scale(0.0) == 1.0
    assert float16_scale(1e-160) is None and float16_scale(1e160) is None  # the host searches those


def test_equal_distances_break_by_index() -> None:
    """Points on a sphere's lattice: every point has many neighbours at exactly the same distance,
    so each choice is decided by the (min, max) rule alone."""
    d = 40
    eye = np.eye(d)
    pts = np.concatenate([eye, -eye, 2 * eye, np.zeros((3, d))])  # three duplicates of the origin
    for k in (1, 2, 6):
        assert_oracle(gpu_core.euclidean_mst(pts, min_samples=k, backend="cpu"), pts, k, "lattice")
        for precision in ("tf32", "float16"):
            tree = brute_tree(pts, k, precision=precision, tile=16, block=8)
            assert_oracle(tree, pts, k, f"lattice {precision}")


def test_one_thousand_and_twenty_four_coordinates() -> None:
    assert gpu_core.MAX_DIMENSIONS >= 1024
    for ps in (blobs(6, 180, 1024, centers=4, spread=0.3), random_points(7, 90, 1024, np.float32)):
        for k in (1, 5):
            tree = gpu_core.euclidean_mst(ps.points, min_samples=k, backend="cpu")
            assert_oracle(tree, ps.points, k, ps.name)


@pytest.mark.parametrize(("n", "tile", "block"), [(1000, 64, 32), (301, 300, 7), (257, 256, 256), (97, 1, 1)])
def test_tiles_and_blocks_that_do_not_divide_n(n: int, tile: int, block: int) -> None:
    ps = blobs(n, n, 24, centers=5, spread=0.4)
    for k in (1, 4):
        tree = brute_tree(ps.points, k, tile=tile, block=block)
        assert_oracle(tree, ps.points, k, f"{ps.name} {tile}/{block}")


@pytest.mark.slow
def test_default_tiles_past_one_tile_equal_the_k_d_tree() -> None:
    ps = blobs(12, 2 * 2048 + 3, 17, centers=9, spread=0.3)
    coords = np.ascontiguousarray(ps.points)
    spatial = build_index(ps.points, coords, "cpu", False, search="spatial")
    for k in (1, 8):
        a = gpu_core.euclidean_mst(spatial, min_samples=k)
        b = gpu_core.euclidean_mst(ps.points, min_samples=k, backend="cpu")  # d = 17: brute force
        assert np.array_equal(a.src, b.src) and np.array_equal(a.dst, b.dst)
        assert np.array_equal(a.weights, b.weights)


def test_queries_and_core_distances_are_exact_with_ties() -> None:
    """Prediction's searches: each query's k nearest by (d², index), duplicates and equidistant
    points included, and each point's k-th distance."""
    rng = np.random.default_rng(3)
    d = 50
    train = np.round(rng.random((400, d)) * 3)  # a coarse grid: many equal distances
    train[10:20] = train[0]  # duplicates
    queries = np.concatenate([train[:5], np.round(rng.random((30, d)) * 3), train[[0]] + 0.5])
    index = gpu_core.build_point_index(train, backend="cpu")
    assert isinstance(index._state, BruteCpuIndex)
    for k in (1, 7, 25):
        ids, w2 = query_neighbours(index, queries, k)
        exact = np.zeros((queries.shape[0], train.shape[0]))
        for j in range(d):
            diff = queries[:, j][:, None] - train[:, j][None, :]
            exact = exact + diff * diff
        order = np.lexsort((np.broadcast_to(np.arange(400), exact.shape), exact), axis=1)[:, :k]
        assert np.array_equal(ids, order)
        assert np.array_equal(w2, np.take_along_axis(exact, order, axis=1))
        core = np.sqrt(core_squared(squared_distance_matrix(train), k))
        assert np.array_equal(kth_distances(index, k), core)


def test_the_estimator_and_prediction_in_768_coordinates() -> None:
    ps = blobs(21, 600, 768, centers=4, spread=0.1)
    model = gpu_core.HDBSCAN(min_cluster_size=20, prediction_data=True, backend="cpu").fit(ps.points)
    assert model.labels_.max() == 3  # four clusters, as made
    labels, probabilities = gpu_core.approximate_predict(model, ps.points[:50] + 0.01)
    assert np.array_equal(labels, model.labels_[:50])
    assert np.all((probabilities > 0) & (probabilities <= 1))
    vectors = gpu_core.all_points_membership_vectors(model)
    assert vectors.shape == (600, 4) and np.all(vectors >= 0) and np.all(vectors.sum(axis=1) <= 1 + 1e-9)
    labeled = model.labels_ >= 0
    assert np.array_equal(np.argmax(vectors, axis=1)[labeled], model.labels_[labeled])


def test_the_filter_bound_and_the_list_widths() -> None:
    # tighter arithmetic, smaller margin; more coordinates, larger
    order = [coefficient(128, p) for p in ("float64", "float32", "float16", "tf32")]
    assert order == sorted(order)
    assert coefficient(64, "float32") < coefficient(1024, "float32")
    assert coefficient(1024, "tf32") < 1e-2 and coefficient(1024, "float16") < 5e-3  # a margin
    assert list_width(1000, 1) == 16 and list_width(1000, 10) == 26 and list_width(12, 10) == 12
    comp = np.array([0] * 100 + [1, 2, 3] + [4] * 20 + [5, 6])
    blocks = [(0, 64, 0), (64, 100, 0), (100, 103, -1), (103, 123, 4), (123, 125, -1)]
    assert plan_blocks(comp, 64) == blocks
