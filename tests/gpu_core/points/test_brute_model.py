"""The device engine's host side, on the CPU: its batches, blocks, skips, stops, relaunches and device
split, driven by a NumPy model of its two kernels (``tests/utils/fused_model.py``).

The model does what ``fused_select`` and ``fused_flush`` do with the same arguments (float16
products summed in float32, float32 thresholds rounded up, compaction, stops); ``DeviceEngine``'s
own code does the rest. Every search must equal the host engine's float64 search bit for bit, and
every tree the O(n²) oracle: with the default buffers, with buffers so small that rows stop and
are launched again, with one-block batches, with 64-row blocks, and split over three emulated
devices. What the model cannot check (the kernels' fragments, races) is for the GPU tests.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import gpu_core
from gpu_core._points import brute_gpu
from gpu_core._points.brute import boruvka, split_rows
from gpu_core._points.brute_cpu import HostEngine
from gpu_core._points.tree import finish_tree
from gpu_core.errors import PointSetShapeError
from tests.gpu_core.points.test_brute import assert_oracle, far_clusters
from tests.utils.fused_model import ModelEngine
from tests.utils.points import PointSet, blobs, duplicated, random_points

#: engine options that meet every path: defaults; stops (buffers of 384: near-ties fill them) and
#: batches of one block; 64-row blocks; three devices
KNOBS = [
    {},
    {"cap": 384, "batch": 100},
    {"rows_per_block": 64, "batch": 64},
    {"chunk": 32, "devices": [0, 1, 2]},
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


@pytest.mark.parametrize("knobs", KNOBS, ids=["defaults", "stops", "rows64", "devices3"])
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


@pytest.mark.parametrize("knobs", KNOBS[1:], ids=["stops", "rows64", "devices3"])
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
