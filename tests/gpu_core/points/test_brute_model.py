"""The device engine's host side, on the CPU: its batches, blocks, skips, stops, relaunches and device
split, driven by a NumPy model of its two kernels (``tests/utils/fused_model.py``).

The model does what ``fused_select`` and ``fused_flush`` do with the same arguments (float16
products summed in float32, float32 thresholds rounded up, compaction, stops); ``DeviceEngine``'s
own code does the rest. Every search must equal the host engine's float64 search bit for bit, and
every tree the O(n²) oracle: with the default buffers, with buffers so small that rows stop and
are launched again, with one-block batches, with 64-row blocks, with a streamed build, and split
over three emulated devices; and the builds' shared memory and choice (``variant_for``). What the
model cannot check (the kernels' fragments, races) is for the GPU tests.
"""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpu_core
from gpu_core._points import brute_gpu
from gpu_core._points.brute import boruvka, split_rows
from gpu_core._points.brute_cpu import HostEngine
from gpu_core._points.tree import finish_tree
from gpu_core.errors import PointSetShapeError
from tests.gpu_core.points.test_brute import assert_oracle, far_clusters
from tests.utils.fused_model import ModelEngine, split_every_search
from tests.utils.points import PointSet, blobs, duplicated, random_points

#: engine options that meet every path: defaults; stops (buffers of 384: near-ties fill them) and
#: batches of one block; 64-row blocks; three devices; a streamed build (its name and shared memory:
#: the model reads no stage) with stops
KNOBS = [
    {},
    {"cap": 384, "batch": 100},
    {"rows_per_block": 64, "batch": 64},
    {"chunk": 32, "devices": [0, 1, 2]},
    {"stream": True, "cap": 384, "batch": 100},
]


def sets() -> list[PointSet]:
    return [
        duplicated(2, 300, 40),  # exact ties
        blobs(4, 300, 96, centers=6, spread=0.2),
        far_clusters(8, 300, 48),  # near-ties inside the filter's margin: its own order is wrong
        random_points(5, 150, 200),
    ]


def same(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], name: str) -> None:
    assert np.array_equal(a[0], b[0]), name
    assert np.array_equal(a[1], b[1]), name  # bit for bit


@pytest.mark.parametrize("knobs", KNOBS, ids=["defaults", "stops", "rows64", "devices3", "streamed"])
def test_the_searches_equal_the_hosts(knobs: dict) -> None:
    for ps in sets():
        coords = np.ascontiguousarray(ps.points, dtype=np.float64)
        model, host = ModelEngine(coords, **knobs), HostEngine(coords)
        n = coords.shape[0]
        for width in (1, 7, 26):
            same(model.nearest(width), host.nearest(width), f"{ps.name} nearest {width}")
        queries = np.concatenate([coords[:20] + 1e-3, coords[20:30]])
        same(model.query(queries, 9), host.query(queries, 9), f"{ps.name} query")
        comp = np.arange(n) // 11  # components of 11 points: blocks of one component skip their own
        comp[::7] = 0  # and one big component
        core2 = host.nearest(5)[1][:, 4].copy()
        rows = np.arange(0, n, 2)
        for c2 in (None, core2):
            same(model.outside(rows, comp, c2, 12), host.outside(rows, comp, c2, 12), f"{ps.name} outside")


def test_rows_that_stop_are_launched_again_from_where_they_stopped() -> None:
    """1,100 points in two clusters far from their mean: every point of a cluster is inside the
    margin, more than a buffer of 384 holds, so rows stop (twice or more) and resume."""
    launches: list[bool] = []
    original = brute_gpu._LocalSearch._launch_all

    def counting(self, blocks, slots, start):
        launches.append(slots is not None)
        return original(self, blocks, slots, start)

    ps = far_clusters(3, 1100, 40)
    coords = np.ascontiguousarray(ps.points)
    model, host = ModelEngine(coords, cap=384, batch=300), HostEngine(coords)
    brute_gpu._LocalSearch._launch_all = counting  # type: ignore[method-assign]
    try:
        same(model.nearest(12), host.nearest(12), "nearest")
        assert any(launches), "the rows should have stopped"
        launches.clear()
        comp = np.arange(1100) // 7
        core2 = host.nearest(6)[1][:, 5].copy()
        rows = np.arange(0, 1100, 3)
        same(model.outside(rows, comp, core2, 10), host.outside(rows, comp, core2, 10), "outside")
        assert any(launches)
    finally:
        brute_gpu._LocalSearch._launch_all = original  # type: ignore[method-assign]


@pytest.mark.parametrize("knobs", KNOBS[1:4], ids=["stops", "rows64", "devices3"])
def test_trees_equal_the_oracle(knobs: dict) -> None:
    for ps in sets()[:3]:
        coords = np.ascontiguousarray(ps.points, dtype=np.float64)
        engine = ModelEngine(coords, **knobs)
        for k in (1, 3, 12):
            lo, hi, w2, core2 = boruvka(engine, k, {})
            tree = finish_tree(
                lo, hi, w2, n=engine.n, d=engine.d, min_samples=k, core2=core2, backend="cpu",
                started=time.perf_counter(), timings_ms={},
            )  # fmt: skip
            assert_oracle(tree, ps.points, k, f"{ps.name} {knobs} k={k}")


def test_the_kernels_products_are_the_float16_rows_products() -> None:
    ps = random_points(3, 150, 70)
    model = ModelEngine(np.ascontiguousarray(ps.points))
    got = model.dump_products(10, 140)
    half = model.half.astype(np.float64)
    want = half[10:140] @ half.T
    assert got.shape == (130, 150) and not np.isnan(got).any()
    assert np.allclose(got, want, rtol=1e-5, atol=1e-3 * float(np.abs(want).max()))


def test_rows_are_split_in_runs_of_about_equal_size() -> None:
    rng = np.random.default_rng(4)
    for parts in (1, 2, 3, 8):
        for count in (0, 1, 5, 100):
            sizes = rng.integers(1, 129, count)
            runs = split_rows(sizes, parts)
            assert len(runs) == parts
            assert [r[0] for r in runs[1:]] == [r[1] for r in runs[:-1]]  # consecutive
            assert runs[0][0] == 0 and runs[-1][1] == count
            if count:
                share = [int(sizes[a:b].sum()) for a, b in runs]
                assert max(share) - min(share) <= 2 * 128 + int(sizes.sum()) // (parts * 8)


def test_devices_are_refused_where_no_brute_force_search_runs_on_the_gpu() -> None:
    points = np.random.default_rng(1).random((50, 40))
    with pytest.raises(PointSetShapeError, match="devices"):
        gpu_core.build_point_index(points, backend="cpu", devices=[0, 1])
    index = gpu_core.build_point_index(points, backend="cpu", devices=None)
    assert index.backend == "cpu"


#: the most shared memory one block may take: an H200's (and H100's), an A100's
H200, A100 = 232448, 166912


def test_the_builds_shared_memory_and_kernels() -> None:
    """Each build's shared memory by kernels/brute.cu's layout (a streamed build's independent of
    d), and every build's kernel defined there."""
    source = (Path(brute_gpu.__file__).parents[1] / "kernels" / "brute.cu").read_text()
    kernel = r'extern "C" __global__ void __launch_bounds__\([^)]*\) (fused_select\w*)\('
    defined = set(re.findall(kernel, source))
    assert {v.kernel for v in brute_gpu.VARIANTS} == defined
    assert len({v.kernel for v in brute_gpu.VARIANTS}) == len(brute_gpu.VARIANTS)
    for d in (100, 384, 768, 1024):
        for chunk in (64, 32):
            resident, streamed = brute_gpu.Variant(128, chunk), brute_gpu.Variant(128, chunk, stream=True)
            dpad = -(-d // chunk) * chunk
            assert resident.smem(d) == 128 * (dpad + 8) * 2 + 3 * 128 * (chunk + 8) * 2 + 128 * 20
            assert streamed.smem(d) == 3 * 256 * (chunk + 8) * 2 + 128 * 24
            assert streamed.padded(d) == resident.padded(d) == dpad
            assert streamed.blocks(d, H200) >= 2  # two blocks of 128 rows at any width
    assert brute_gpu.Variant(128, 64).blocks(128, H200) == 2
    assert brute_gpu.Variant(128, 64).blocks(384, H200) == 1
    assert brute_gpu.Variant(128, 32).blocks(768, H200) == 1


def test_the_wgmma_builds_shared_memory_and_kernels() -> None:
    """The wgmma builds' shared memory by kernels/brute_wgmma.cu's layout (1,024 bytes to align,
    unpadded swizzled rows of 64 coordinates, a stage's tile norms, the rows' state with their
    source), and both builds' kernels defined there."""
    source = (Path(brute_gpu.__file__).parents[1] / "kernels" / "brute_wgmma.cu").read_text()
    kernel = r'extern "C" __global__ void __launch_bounds__\([^)]*\) (fused_select\w*)\('
    assert {v.kernel for v in brute_gpu.WGMMA_VARIANTS} == set(re.findall(kernel, source))
    resident, streamed = brute_gpu.WGMMA_VARIANTS
    assert resident == brute_gpu.Variant(128, 64, wgmma=True) and streamed.stream
    for d in (33, 128, 384, 640, 1024):
        dpad = -(-d // 64) * 64
        state = 3 * (128 * 64 * 2 + 128 * 4) + 128 * 24
        assert resident.smem(d) == 1024 + dpad // 64 * 128 * 64 * 2 + state
        assert streamed.smem(d) == 1024 + 3 * 128 * 64 * 2 + state
        assert streamed.blocks(d, H200) == 2 and streamed.blocks(d, A100) >= 1
        assert resident.padded(d) == streamed.padded(d) == dpad
    assert resident.blocks(128, H200) == resident.blocks(192, H200) == 2
    assert resident.blocks(256, H200) == 1


def test_the_wgmma_builds_are_chosen_where_the_device_has_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """On compute capability 9.0 (the model's ``wgmma``) the wgmma builds by the same rule (resident
    while two blocks fit, else streamed), unless a knob asks for a build they lack (64 rows,
    stages of 32) or ``MST_BRUTE_WGMMA=0``; ``wgmma=True`` where the device lacks them is an error.
    Their host side (the same arguments) equals the host engine's searches."""
    V = brute_gpu.Variant
    assert brute_gpu.variant_for(128, H200, wgmma=True) == V(128, 64, wgmma=True)
    assert brute_gpu.variant_for(384, H200, wgmma=True) == V(128, 64, stream=True, wgmma=True)
    assert brute_gpu.variant_for(384, H200, stream=False, wgmma=True) == V(128, 64, wgmma=True)
    assert brute_gpu.variant_for(768, H200, stream=False, wgmma=True) == V(128, 32)  # no resident wgmma fits
    assert brute_gpu.variant_for(128, H200, rows=64, wgmma=True) == V(64, 32)
    assert brute_gpu.variant_for(128, H200, chunk=32, wgmma=True) == V(128, 32)
    coords = np.random.default_rng(3).random((300, 40))
    monkeypatch.delenv(brute_gpu.WGMMA_ENV, raising=False)
    monkeypatch.delenv(brute_gpu.STREAM_ENV, raising=False)
    assert ModelEngine(coords).variant == V(128, 64)  # the model's device has no wgmma
    with pytest.raises(ValueError, match=r"compute capability 9\.0"):
        ModelEngine(coords, wgmma=True)
    monkeypatch.setattr(ModelEngine, "wgmma", True)
    assert ModelEngine(coords).variant == V(128, 64, wgmma=True)
    assert ModelEngine(coords, stream=True).variant.kernel == "fused_select_wgs"
    assert ModelEngine(coords, wgmma=False).variant == V(128, 64)
    assert ModelEngine(coords, rows_per_block=64).variant == V(64, 32)
    with pytest.raises(ValueError, match="no wgmma build"):
        ModelEngine(coords, chunk=32, wgmma=True)
    knobs_list: list[dict[str, Any]] = [{}, {"cap": 384, "batch": 100, "stream": True}]
    for knobs in knobs_list:
        engine = ModelEngine(coords, **knobs)
        assert engine.variant.wgmma
        same(engine.nearest(12), HostEngine(coords).nearest(12), f"wgmma {knobs}")
    monkeypatch.setenv(brute_gpu.WGMMA_ENV, "0")
    assert ModelEngine(coords).variant == V(128, 64)
    assert brute_gpu.wgmma_setting(None) and brute_gpu.wgmma_setting("") and brute_gpu.wgmma_setting("1")
    with pytest.raises(ValueError, match=brute_gpu.WGMMA_ENV):
        brute_gpu.wgmma_setting("no")


def test_the_default_streams_where_resident_rows_leave_one_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """No knob, no environment: the resident build while two of its blocks fit a multiprocessor,
    else a streamed one that fits two; ``stream`` forces or forbids; without the default
    (:data:`STREAM_WHEN_ONE_BLOCK` off) the first resident build that fits."""
    V = brute_gpu.Variant
    assert brute_gpu.STREAM_WHEN_ONE_BLOCK
    assert brute_gpu.variant_for(128, H200) == V(128, 64)  # two resident blocks already
    assert brute_gpu.variant_for(384, H200) == V(128, 64, stream=True)
    assert brute_gpu.variant_for(768, H200) == V(128, 64, stream=True)
    assert brute_gpu.variant_for(1024, H200) == V(128, 64, stream=True)
    assert brute_gpu.variant_for(768, A100) == V(128, 32, stream=True)  # 64: one block there
    resident = {100: V(128, 64), 384: V(128, 64), 768: V(128, 32), 1024: V(64, 32)}
    for d, v in resident.items():
        assert brute_gpu.variant_for(d, H200, stream=False) == v
        assert brute_gpu.variant_for(d, H200, stream=True) == V(128, 64, stream=True)
        assert brute_gpu.variant_for(d, H200, chunk=32, stream=True) == V(128, 32, stream=True)
        assert brute_gpu.variant_for(d, A100, stream=True) == V(128, 64, stream=True)
    with pytest.raises(ValueError, match="no fused_select build"):
        brute_gpu.variant_for(100, H200, rows=64, stream=True)
    monkeypatch.setattr(brute_gpu, "STREAM_WHEN_ONE_BLOCK", False)
    for d, v in resident.items():
        assert brute_gpu.variant_for(d, H200) == v


def test_the_environment_forces_or_forbids_the_streamed_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    coords = np.random.default_rng(2).random((50, 40))
    assert brute_gpu.stream_setting(None) is None and brute_gpu.stream_setting("") is None
    assert brute_gpu.stream_setting("1") is True and brute_gpu.stream_setting("0") is False
    with pytest.raises(ValueError, match=brute_gpu.STREAM_ENV):
        brute_gpu.stream_setting("yes")
    monkeypatch.setenv(brute_gpu.STREAM_ENV, "1")
    assert ModelEngine(coords).variant.kernel == "fused_select_128s"
    assert ModelEngine(coords, chunk=32).variant.kernel == "fused_select_128s_32"
    assert ModelEngine(coords, rows_per_block=64).variant.kernel == "fused_select_64"  # the knob wins
    assert ModelEngine(coords, stream=False).variant.kernel == "fused_select_128"
    same(ModelEngine(coords).nearest(5), HostEngine(coords).nearest(5), "streamed by the environment")
    monkeypatch.setenv(brute_gpu.STREAM_ENV, "0")
    assert ModelEngine(coords).variant.kernel == "fused_select_128"
    assert ModelEngine(coords, stream=True).variant.kernel == "fused_select_128s"
    with pytest.raises(ValueError, match="128 rows"):
        ModelEngine(coords, rows_per_block=64, stream=True)


def test_target_splits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows enough to fill the device where a search's blocks fill less than half of it; each
    window SPLIT_MIN_TILES tiles at least, SPLIT_MAX at most, the windows' rows one batch at most."""
    splits = brute_gpu.target_splits
    assert brute_gpu.SPLIT_MAX == 8  # by measurement: each window costs the host its setup
    assert splits(1, 1, 7813, 264, 1 << 16) == 8
    assert splits(11, 11, 782, 264, 1 << 16) == 8
    monkeypatch.setattr(brute_gpu, "SPLIT_MAX", 64)
    assert splits(200, 25_000, 7813, 264, 1 << 16) == 1  # the device is full already
    assert splits(132, 16_000, 7813, 264, 1 << 16) == 2
    assert splits(11, 11, 782, 264, 1 << 16) == 24
    assert splits(1, 1, 7813, 264, 1 << 16) == 64
    assert splits(1, 1, 40, 264, 1 << 16) == 40 // brute_gpu.SPLIT_MIN_TILES
    assert splits(1, 1, 10, 264, 1 << 16) == 1  # too few tiles for two windows
    assert splits(40, 5_000, 7813, 264, 16_384) == 3  # the buffers of one batch
    assert splits(0, 0, 100, 264, 1 << 16) == 1


def test_merge_lists_keeps_the_least_by_key_then_id() -> None:
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 6, (40, 30)).astype(np.float64)  # ties
    ids = np.stack([rng.permutation(1000)[:30] for _ in range(40)])
    keys[:, 25:] = np.inf
    ids[:, 25:] = -1
    parts = [(ids[:, i : i + 10], keys[:, i : i + 10]) for i in (0, 10, 20)]
    sorted_parts = []
    for pi, pk in parts:  # each list by (key, id), its empty entries last
        order = np.lexsort((np.where(pi < 0, np.iinfo(np.int64).max, pi), pk), axis=1)
        sorted_parts.append((np.take_along_axis(pi, order, 1), np.take_along_axis(pk, order, 1)))
    part_ids, part_keys = [i for i, _ in sorted_parts], [k for _, k in sorted_parts]
    got_ids, got_keys = brute_gpu.merge_lists(np, part_ids, part_keys, 12)
    for r in range(40):
        want = sorted(zip(keys[r][:25], ids[r][:25], strict=True))[:12]
        assert list(zip(got_keys[r], got_ids[r], strict=True)) == want


def test_small_searches_split_over_target_windows_equal_the_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A search of few blocks on a device of many multiprocessors: its targets in windows, each on
    its own stream, merged: the host's lists bit for bit, with rows that stop inside a window, and
    the trees of the rounds (whose last refreshes are a few rows) the oracle's; with several
    devices too."""
    windows = split_every_search(monkeypatch)
    cases: list[tuple[PointSet, dict[str, Any]]] = [(s, {}) for s in sets()[:3]]
    cases.append((far_clusters(3, 1100, 40), {"cap": 384, "batch": 300}))
    # several devices: a small search still splits its targets, on the first device alone (its
    # rows split over the devices would leave each a block or two)
    cases.append((sets()[1], {"devices": [0, 1, 2]}))
    for ps, knobs in cases:
        coords = np.ascontiguousarray(ps.points, dtype=np.float64)
        model, host = ModelEngine(coords, **knobs), HostEngine(coords)
        model.multiprocessors = 64
        n = coords.shape[0]
        windows.clear()
        same(model.nearest(9), host.nearest(9), f"{ps.name} nearest")
        same(model.query(coords[:10] + 1e-3, 7), host.query(coords[:10] + 1e-3, 7), f"{ps.name} query")
        comp = np.arange(n) // 11
        core2 = host.nearest(5)[1][:, 4].copy()
        rows = np.arange(0, n, 37)
        for c2 in (None, core2):
            same(model.outside(rows, comp, c2, 12), host.outside(rows, comp, c2, 12), f"{ps.name} outside")
        assert windows and min(windows) > 1, f"{ps.name}: the searches should have split"
        for k in (1, 5):
            lo, hi, w2, tree_core2 = boruvka(model, k, {})
            tree = finish_tree(
                lo, hi, w2, n=n, d=model.d, min_samples=k, core2=tree_core2, backend="cpu",
                started=time.perf_counter(), timings_ms={},
            )  # fmt: skip
            assert_oracle(tree, ps.points, k, f"{ps.name} split k={k}")


def test_batches_end_at_whole_waves_within_the_row_limit() -> None:
    """A search's launches: at most ``batch`` rows each, and a launch cut short by that limit holds
    whole waves of blocks (a last wave nearly empty idles most of the device)."""
    from gpu_core._points.brute_gpu import _batches

    uniform = np.full(782, 128)  # 10^5 rows of an H200 search: 264 blocks a wave
    assert _batches(uniform, 65536, 264) == [(0, 264), (264, 528), (528, 782)]
    assert _batches(uniform, 65536) == [(0, 512), (512, 782)]  # waves of one block: as many as fit
    plan = _batches(np.full(7813, 128), 65536, 264)
    assert all((b - a) % 264 == 0 for a, b in plan[:-1]) and len(plan) == 29
    assert _batches(np.array([50, 300, 30]), 100, 4) == [(0, 1), (1, 2), (2, 3)]  # one block past it
    rng = np.random.default_rng(3)
    for wave in (1, 7, 264):
        sizes = rng.integers(1, 129, 5000)
        plan = _batches(sizes, 4096, wave)
        assert plan[0][0] == 0 and plan[-1][1] == sizes.size
        assert all(a[1] == b[0] for a, b in itertools.pairwise(plan))  # every block once, in order
        for first, last in plan[:-1]:
            assert sizes[first:last].sum() <= 4096
            full = sizes[first : last + 1].sum() > 4096  # the next block does not fit
            assert full if last - first <= wave else (last - first) % wave == 0, (first, last, wave)
