"""The GPU's brute-force path returns the CPU backend's arrays bit for bit (and both equal brute force).

Marked ``gpu``: skipped where no CUDA device is visible. The same boundaries as test_brute.py, on
the device's float16 tensor-core filter: 33 to 1,024 coordinates, exact ties, near-ties closer than
the filter's error, duplicates, norms 10^6 apart, huge and tiny coordinates, blocks and batches that
do not divide n, buffers so small that rows stop and are launched again, 64-row blocks, a search
split over two devices (the same GPU twice), lists wider than the device merges (the host's
searches), CuPy points, prediction; and the kernel's products against the float16 rows' own. The
streamed builds (the block's rows loaded stage by stage; the default where the resident rows leave
one block a multiprocessor), forced: their products, lists and trees the resident builds', bit for bit.
On compute capability 9.0 the wgmma builds (the default there) against the mma.sync builds: the same
products, lists and trees, bit for bit; the mma.sync builds stay covered there by ``wgmma=False``.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import gpu_core
from gpu_core._points import brute_gpu
from gpu_core._points.brute_gpu import BruteGpuIndex, Variant, variant_for
from gpu_core._points.index import build_index
from gpu_core._points.neighbours import kth_distances, query_neighbours
from tests.gpu_core.points.test_brute import assert_oracle, boundary_sets, far_clusters
from tests.utils.fused_model import split_every_search
from tests.utils.points import PointSet, blobs, point_sets, random_points

pytestmark = pytest.mark.gpu


def same(gpu: gpu_core.EuclideanTree, cpu: gpu_core.EuclideanTree, name: str) -> None:
    assert gpu.backend == "gpu" and cpu.backend == "cpu"
    same_trees(gpu, cpu, name)


def device_tree(points: np.ndarray, k: int, **engine) -> gpu_core.EuclideanTree:
    index = BruteGpuIndex(np.ascontiguousarray(points, dtype=np.float64), **engine)
    return index.tree(k, time.perf_counter(), True, False)


@pytest.mark.parametrize("d", [33, 64, 128, 768, 1024])
@pytest.mark.parametrize("k", [1, 2, 10])
def test_gpu_equals_cpu_at_many_coordinates(d: int, k: int) -> None:
    sets = (*point_sets(150, d, seed=d), blobs(d, 2000, d, centers=7, spread=0.2))
    for ps in sets:
        gpu = gpu_core.euclidean_mst(ps.points, min_samples=k, backend="gpu")
        cpu = gpu_core.euclidean_mst(ps.points, min_samples=k, backend="cpu")
        same(gpu, cpu, f"{ps.name} k={k}")
        if ps.points.shape[0] <= 150:
            assert_oracle(cpu, ps.points, k, ps.name)


#: engine options that meet every path of kernels/brute.cu: defaults; buffers of 384 (rows stop and
#: are launched again) in batches of one block; 64-row blocks; two devices (the same GPU twice)
KNOBS = [
    {},
    {"cap": 384, "batch": 100},
    {"rows_per_block": 64, "batch": 200},
    {"chunk": 32, "devices": [0, 0]},
    {"wgmma": False, "cap": 384, "batch": 100},
]


@pytest.mark.parametrize("knobs", KNOBS, ids=["defaults", "stops", "rows64", "devices2", "mma-sync-stops"])
def test_blocks_batches_buffers_and_devices(knobs: dict) -> None:
    sets = (
        far_clusters(8, 160, 48),  # near-ties inside the filter's error: its own order is wrong
        far_clusters(3, 1100, 40),  # more near-ties than a buffer holds: rows stop
        *point_sets(300, 40, seed=4),  # duplicates, collinear points, grids: exact ties
        blobs(5, 1001, 96, centers=5, spread=0.3),
    )
    for ps in sets:
        for k in (1, 3, 12):
            gpu = device_tree(ps.points, k, **knobs)
            same(gpu, gpu_core.euclidean_mst(ps.points, min_samples=k, backend="cpu"), f"{ps.name} k={k}")


@pytest.mark.parametrize("ps", boundary_sets(), ids=lambda ps: ps.name)
def test_the_float16_filters_boundaries(ps: PointSet) -> None:
    """Norms 10^6 apart, huge and tiny coordinates, near duplicates, d = 1,024, far clusters."""
    for k in (1, 5):
        gpu = gpu_core.euclidean_mst(ps.points, min_samples=k, backend="gpu")
        same(gpu, gpu_core.euclidean_mst(ps.points, min_samples=k, backend="cpu"), f"{ps.name} k={k}")


SHAPES = [
    (300, 33, 128, 64),
    (280, 70, 128, 32),
    (257, 100, 64, 32),
    (200, 768, 128, 32),
    (130, 1024, 64, 32),
]


@pytest.mark.parametrize(("n", "d", "rows", "chunk"), SHAPES)
def test_the_kernels_products_are_the_float16_rows_products(n: int, d: int, rows: int, chunk: int) -> None:
    """Every product the kernel holds (its tensor-core fragments written out) against the float16
    rows' exact products, within float32 accumulation: each row and column where it belongs."""

    points = np.random.default_rng(n + d).normal(size=(n, d))
    engine = BruteGpuIndex(points, rows_per_block=rows, chunk=chunk).engine
    assert (engine.variant.rows, engine.variant.chunk) == (rows, chunk)
    products_of_the_float16_rows(engine, n)


def products_of_the_float16_rows(engine: brute_gpu.DeviceEngine, n: int) -> np.ndarray:
    """Rows 3 to ``n``'s products as the kernel holds them, checked against the float16 rows'
    exact products within float32 accumulation."""
    import cupy

    got = cupy.asnumpy(engine.dump_products(3, n))
    half = cupy.asnumpy(engine.half).astype(np.float64)
    want = half[3:] @ half.T
    scale = np.abs(half[3:]) @ np.abs(half).T
    assert not np.isnan(got).any()
    assert np.all(np.abs(got - want) <= engine.dpad * 2.0**-22 * scale + 1e-30)
    return got


def test_devices_of_the_public_entry_point() -> None:
    import cupy

    ps = blobs(2, 600, 64, centers=3, spread=0.3)
    here = cupy.cuda.Device().id
    index = gpu_core.build_point_index(ps.points, backend="gpu", devices=[here])
    same(
        gpu_core.euclidean_mst(index, min_samples=4),
        gpu_core.euclidean_mst(ps.points, min_samples=4, backend="cpu"),
        ps.name,
    )
    with pytest.raises(gpu_core.errors.PointSetShapeError, match="distinct"):
        gpu_core.build_point_index(ps.points, backend="gpu", devices=[here, here])


def test_equal_distances_and_duplicates_break_by_index() -> None:
    d = 40
    eye = np.eye(d)
    pts = np.concatenate([eye, -eye, 2 * eye, np.zeros((40, d))])  # many equidistant points, 40 copies
    for k in (1, 2, 6, 45):
        gpu = device_tree(pts, k, cap=384, batch=50)
        cpu = gpu_core.euclidean_mst(pts, min_samples=k, backend="cpu")
        same(gpu, cpu, f"lattice k={k}")
        assert_oracle(cpu, pts, k, "lattice")


def test_n_not_a_multiple_of_the_default_tile() -> None:
    ps = blobs(9, 16384 + 8192 + 5, 33, centers=12, spread=0.25)
    for k in (1, 10):
        same(
            gpu_core.euclidean_mst(ps.points, min_samples=k, backend="gpu"),
            gpu_core.euclidean_mst(ps.points, min_samples=k, backend="cpu"),
            ps.name,
        )


def test_lists_wider_than_the_device_sorts_use_the_host() -> None:
    ps = blobs(3, 700, 50, centers=3, spread=0.3)
    cpu = gpu_core.euclidean_mst(ps.points, min_samples=250, backend="cpu")
    same(device_tree(ps.points, 250), cpu, ps.name)


def test_brute_force_equals_the_hierarchy_below_33_coordinates() -> None:
    for d in (2, 8, 20, 32):
        for ps in (random_points(d, 3000, d), blobs(d, 3000, d, centers=6)):
            coords = np.ascontiguousarray(ps.points, dtype=np.float64)
            spatial = build_index(ps.points, coords, "gpu", False, search="spatial")
            brute = build_index(ps.points, coords, "gpu", False, search="brute")
            for k in (1, 5):
                a = gpu_core.euclidean_mst(spatial, min_samples=k)
                b = gpu_core.euclidean_mst(brute, min_samples=k)
                assert np.array_equal(a.src, b.src) and np.array_equal(a.dst, b.dst), ps.name
                assert np.array_equal(a.weights, b.weights), ps.name


def test_cupy_points_hdbscan_and_prediction() -> None:
    import cupy

    ps = blobs(13, 3000, 128, centers=6, spread=0.2)
    on_device = gpu_core.euclidean_mst(cupy.asarray(ps.points), min_samples=5, backend="gpu")
    assert isinstance(on_device.src, cupy.ndarray) and isinstance(on_device.weights, cupy.ndarray)
    cpu = gpu_core.euclidean_mst(ps.points, min_samples=5, backend="cpu")
    assert np.array_equal(cupy.asnumpy(on_device.weights), cpu.weights)
    a = gpu_core.hdbscan(cupy.asarray(ps.points), min_cluster_size=20, backend="gpu")
    b = gpu_core.hdbscan(ps.points, min_cluster_size=20, backend="cpu")
    assert np.array_equal(a.labels, b.labels) and np.array_equal(a.probabilities, b.probabilities)
    gpu_model = gpu_core.HDBSCAN(min_cluster_size=20, backend="gpu").fit(ps.points)
    cpu_model = gpu_core.HDBSCAN(min_cluster_size=20, backend="cpu").fit(ps.points)
    new = ps.points[:200] + np.random.default_rng(1).normal(0, 0.05, (200, 128))
    got = gpu_core.approximate_predict(gpu_model, new)
    want = gpu_core.approximate_predict(cpu_model, new)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_query_lists_and_core_distances_equal_the_cpus() -> None:
    import cupy

    rng = np.random.default_rng(3)
    train = np.round(rng.random((2000, 64)) * 3)  # a coarse grid: many equal distances
    train[10:40] = train[0]
    queries = np.concatenate([train[:50], np.round(rng.random((300, 64)) * 3)])
    gpu = gpu_core.build_point_index(cupy.asarray(train), backend="gpu")
    cpu = gpu_core.build_point_index(train, backend="cpu")
    assert isinstance(gpu._state, BruteGpuIndex)
    for k in (1, 7, 40):
        ids, w2 = query_neighbours(gpu, cupy.asarray(queries), k)
        ids_c, w2_c = query_neighbours(cpu, queries, k)
        assert np.array_equal(cupy.asnumpy(ids), ids_c) and np.array_equal(cupy.asnumpy(w2), w2_c)
        assert np.array_equal(cupy.asnumpy(kth_distances(gpu, k)), kth_distances(cpu, k))


#: (n, d) of the streamed builds' tests: n not a multiple of 128; 768 and 1,024 coordinates have no
#: resident 128-row build of stages of 64 (1,024 none at all: the 64-row build is the default)
STREAMED = [(300, 100), (257, 384), (200, 768), (130, 1024)]


@pytest.mark.parametrize("chunk", [64, 32])
@pytest.mark.parametrize(("n", "d"), STREAMED)
def test_the_streamed_builds_products_are_the_resident_builds_bits(n: int, d: int, chunk: int) -> None:
    """Every product a streamed build holds (mode 2) is the resident build's of the same stage,
    bit for bit (the same fragments into the same mma instructions in the same order; 64-row
    blocks where no 128-row one fits), and the float16 rows' own within float32 accumulation."""
    import cupy

    points = np.random.default_rng(n + d).normal(size=(n, d))
    streamed = BruteGpuIndex(points, chunk=chunk, stream=True, wgmma=False).engine
    assert streamed.variant == Variant(128, chunk, stream=True)
    got = products_of_the_float16_rows(streamed, n)
    try:
        variant_for(d, streamed._shared_limit(), chunk=chunk, stream=False)
    except ValueError:
        return  # no resident build of stages of this width holds d coordinates
    resident = BruteGpuIndex(points, chunk=chunk, stream=False, wgmma=False).engine
    assert resident.variant.chunk == chunk and not resident.variant.stream
    assert resident.dpad == streamed.dpad
    assert np.array_equal(got.view(np.uint32), cupy.asnumpy(resident.dump_products(3, n)).view(np.uint32))


def same_trees(a: gpu_core.EuclideanTree, b: gpu_core.EuclideanTree, name: str) -> None:
    """The same tree, bit for bit: edges, weights, total and core distances."""
    assert np.array_equal(a.src, b.src) and np.array_equal(a.dst, b.dst), name
    assert np.array_equal(a.weights, b.weights) and a.total_weight == b.total_weight, name
    if b.core_distances is None:
        assert a.core_distances is None, name
    else:
        assert a.core_distances is not None and np.array_equal(a.core_distances, b.core_distances), name


def record_relaunches(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """A record of each launch of a search's rows: True where it launches stopped rows again."""
    relaunches: list[bool] = []
    original = brute_gpu._LocalSearch._launch_all

    def counting(self, blocks, slots, start):
        relaunches.append(slots is not None)
        return original(self, blocks, slots, start)

    monkeypatch.setattr(brute_gpu._LocalSearch, "_launch_all", counting)
    return relaunches


Searches = tuple[dict[int, list[np.ndarray]], dict[int, gpu_core.EuclideanTree]]


def searches(index: BruteGpuIndex) -> Searches:
    """An index's nearest lists (k = 1 and 26) and its Euclidean and mutual-reachability (k = 5)
    trees."""
    import cupy

    lists = {k: [cupy.asnumpy(x) for x in index.nearest(k)] for k in (1, 26)}
    trees = {k: index.tree(k, time.perf_counter(), True, False) for k in (1, 5)}
    return lists, trees


def same_searches(index: BruteGpuIndex, want: Searches, name: str) -> None:
    """The index's searches are ``want``'s, bit for bit."""
    got_lists, got_trees = searches(index)
    for k, (ids, keys) in want[0].items():
        got_ids, got_keys = got_lists[k]
        assert np.array_equal(got_ids, ids) and np.array_equal(got_keys, keys), f"{name} nearest {k}"
    for k, tree in want[1].items():
        same_trees(got_trees[k], tree, f"{name} k={k}")


def stopping_cases(d: int) -> list[tuple[PointSet, dict]]:
    """Blobs of n not a multiple of 128, and far clusters whose rows stop (buffers of 384, batches
    of 100) and are launched again."""
    return [
        (blobs(d, 1001, d, centers=5, spread=0.3), {}),
        (far_clusters(d, 700, d), {"cap": 384, "batch": 100}),
    ]


@pytest.mark.parametrize("d", [100, 384, 768, 1024])
def test_the_streamed_builds_lists_and_trees_are_the_resident_builds(
    d: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The streamed builds' nearest lists and Euclidean and mutual-reachability trees equal the
    resident build's (:func:`stopping_cases`)."""
    relaunches = record_relaunches(monkeypatch)
    monkeypatch.delenv(brute_gpu.STREAM_ENV, raising=False)
    for ps, knobs in stopping_cases(d):
        points = np.ascontiguousarray(ps.points, dtype=np.float64)
        resident = BruteGpuIndex(points, stream=False, wgmma=False, **knobs)
        assert not resident.engine.variant.stream
        want = searches(resident)
        for chunk in (64, 32):
            relaunches.clear()
            streamed = BruteGpuIndex(points, chunk=chunk, stream=True, wgmma=False, **knobs)
            assert streamed.engine.variant == Variant(128, chunk, stream=True)
            name = f"{ps.name} {streamed.engine.variant.kernel}"
            same_searches(streamed, want, name)
            if knobs:
                assert any(relaunches), f"{name}: the rows should have stopped"


def needs_wgmma() -> None:
    """Skips the test where the device has no wgmma (compute capability other than 9.0)."""
    import cupy

    if str(cupy.cuda.Device().compute_capability) != "90":
        pytest.skip("the wgmma builds need compute capability 9.0")


@pytest.mark.parametrize(("n", "d"), [(300, 33), *STREAMED, (513, 200)])
def test_the_wgmma_builds_products_are_mma_syncs_bits(n: int, d: int) -> None:
    """Every product a wgmma build holds (mode 2; resident where its rows fit, and streamed) is the
    mma.sync build's of stages of 64 coordinates, bit for bit, and the float16 rows' own within
    float32 accumulation: each row and column where it belongs in the accumulators' layout."""
    import cupy

    needs_wgmma()
    points = np.random.default_rng(n + d).normal(size=(n, d))
    mma = BruteGpuIndex(points, chunk=64, stream=True, wgmma=False).engine
    want = cupy.asnumpy(mma.dump_products(3, n)).view(np.uint32)
    for stream in (False, True):
        try:
            engine = BruteGpuIndex(points, stream=stream, wgmma=True).engine
        except ValueError:
            assert not stream and d > 640  # no resident wgmma block holds these rows
            continue
        assert engine.variant == Variant(128, 64, stream=stream, wgmma=True)
        assert engine.dpad == mma.dpad
        got = products_of_the_float16_rows(engine, n)
        assert np.array_equal(got.view(np.uint32), want), engine.variant.kernel


@pytest.mark.parametrize("d", [40, 128, 384, 768])
def test_the_wgmma_builds_lists_and_trees_are_mma_syncs(d: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wgmma builds' nearest lists and Euclidean and mutual-reachability trees equal the mma.sync
    build's (:func:`stopping_cases`), and the default build the GPU itself picks is a wgmma one."""
    needs_wgmma()
    relaunches = record_relaunches(monkeypatch)
    monkeypatch.delenv(brute_gpu.STREAM_ENV, raising=False)
    monkeypatch.delenv(brute_gpu.WGMMA_ENV, raising=False)
    assert BruteGpuIndex(np.eye(d + 1, d), stream=None).engine.variant.wgmma
    for ps, knobs in stopping_cases(d):
        points = np.ascontiguousarray(ps.points, dtype=np.float64)
        want = searches(BruteGpuIndex(points, chunk=64, wgmma=False, **knobs))
        for stream in (False, True):
            if not stream and d > 640:
                continue  # no resident wgmma block holds these rows
            relaunches.clear()
            wg = BruteGpuIndex(points, stream=stream, wgmma=True, **knobs)
            assert wg.engine.variant == Variant(128, 64, stream=stream, wgmma=True)
            name = f"{ps.name} {wg.engine.variant.kernel}"
            same_searches(wg, want, name)
            if knobs:
                assert any(relaunches), f"{name}: the rows should have stopped"


def test_small_searches_split_over_target_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Searches of few blocks split their targets into windows on streams of their own (windows of
    one tile here, so small sets split): the lists, queries and trees the CPU backend's, bit for
    bit, with rows that stop inside a window (buffers of 384, far clusters)."""
    import cupy

    from gpu_core._points.brute_cpu import HostEngine

    windows = split_every_search(monkeypatch)
    cases: list[tuple[PointSet, dict]] = [
        (blobs(6, 1500, 200, centers=5, spread=0.3), {}),
        (far_clusters(3, 1100, 40), {"cap": 384, "batch": 300}),
    ]
    for ps, knobs in cases:
        coords = np.ascontiguousarray(ps.points, dtype=np.float64)
        device, host = brute_gpu.DeviceEngine(cupy.asarray(coords), **knobs), HostEngine(coords)
        n = coords.shape[0]
        windows.clear()
        for got, want, what in (
            (device.nearest(9), host.nearest(9), "nearest"),
            (device.query(cupy.asarray(coords[:10] + 1e-3), 7), host.query(coords[:10] + 1e-3, 7), "query"),
        ):
            assert np.array_equal(cupy.asnumpy(got[0]), want[0]), f"{ps.name} {what}"
            assert np.array_equal(cupy.asnumpy(got[1]), want[1]), f"{ps.name} {what}"
        comp = np.arange(n) // 11
        core2 = host.nearest(5)[1][:, 4].copy()
        rows = np.arange(0, n, 37)
        for c2 in (None, core2):
            on_device = None if c2 is None else cupy.asarray(c2)
            got = device.outside(cupy.asarray(rows), cupy.asarray(comp), on_device, 12)
            want = host.outside(rows, comp, c2, 12)
            assert np.array_equal(cupy.asnumpy(got[0]), want[0]), f"{ps.name} outside"
            assert np.array_equal(cupy.asnumpy(got[1]), want[1]), f"{ps.name} outside"
        assert windows and min(windows) > 1, f"{ps.name}: the searches should have split"
        for k in (1, 5):
            cpu = gpu_core.euclidean_mst(ps.points, min_samples=k, backend="cpu")
            same(device_tree(ps.points, k, **knobs), cpu, f"{ps.name} split k={k}")
