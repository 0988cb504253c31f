"""HDBSCAN*'s dendrogram-to-labels path written for any array module
(``gpu_core._clustering.dendrogram_labels``).

With NumPy (here, CI) it must give the host paths' labels and probabilities bit for bit: the
compiled passes (``labels_from_edges`` / ``labels_from_tree`` with ``compiled=True``: union-find
and sequential passes, no shared code with the vectorized path) and the NumPy path. With the
segment kernels of ``kernels/hdbscan_tree.cu`` compiled for the host (g++) the same. With CuPy
(marked ``gpu``) the same, from a dendrogram copied to the device, up to 10^6 points. The
stabilities' chunked summation order is checked against a plain-Python oracle of its definition,
on clusters of several chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import gpu_core
from gpu_core._clustering import condense as _condense
from gpu_core._clustering import dendrogram_labels as _dendrogram_labels
from gpu_core._clustering import hdbscan as _hdbscan
from gpu_core._clustering import passes as _passes
from gpu_core._clustering import select as _select
from gpu_core._clustering.dendrogram_labels import dendrogram_labels, labels_from_dendrogram
from tests.utils import condensed_rows, fake_device
from tests.utils.hdbscan_kernels import host_compiler_available, host_launch
from tests.utils.points import blobs, collinear, duplicated, integer_grid, random_points

Tree = tuple[str, np.ndarray, np.ndarray, np.ndarray]


def random_tree(rng: np.random.Generator, n: int, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random spanning tree in merge order: heavy ties and zeros, distinct weights, or long chains."""
    attach = (rng.random(n - 1) * np.arange(1, n)).astype(np.int64)  # vertex i + 1 under an earlier one
    if kind == "chain":  # long paths: large clusters that absorb single points
        attach = np.maximum(np.arange(1, n) - 1 - rng.integers(0, 3, n - 1), 0)
    perm = rng.permutation(n)
    u, v = perm[1:], perm[attach]
    if kind == "ties":
        w = rng.integers(0, rng.integers(2, 12), n - 1).astype(np.float64)
    else:
        w = rng.random(n - 1) ** 3
    order = np.argsort(w, kind="stable")
    return u[order], v[order], w[order]


def point_tree(name: str, points: np.ndarray, min_samples: int) -> Tree:
    tree = gpu_core.euclidean_mst(points, min_samples=min_samples, backend="cpu")
    return f"{name}-k{min_samples}", tree.src, tree.dst, tree.weights


def trees() -> Iterator[Tree]:
    """Point sets (random, blobs, duplicates: zero distances and inf lambdas, integer grids and
    collinear points: many ties) and random trees, small and several chunks large."""
    makers: list[tuple[Callable[..., Any], int, int]] = [
        (random_points, 700, 2), (blobs, 1500, 2), (duplicated, 900, 2), (integer_grid, 1200, 2),
        (collinear, 500, 1), (blobs, 3000, 3), (duplicated, 2500, 3), (integer_grid, 4000, 3),
    ]  # fmt: skip
    for seed, (maker, n, d) in enumerate(makers):
        points = maker(seed, n, d).points
        yield point_tree(f"{maker.__name__}-{n}x{d}", points, 1 + seed % 5)
    rng = np.random.default_rng(7)
    for n in (40, 600, 5000, 12000):
        for kind in ("ties", "distinct", "chain"):
            yield (f"{kind}-{n}", *random_tree(rng, n, kind))


TREES = list(trees())


def same_bits(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def columns(z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return z[:, 0], z[:, 1], z[:, 3], z[:, 2]


def references(u, v, w, mcs: int, method: str, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """The host paths' answer (the compiled ones and the NumPy one agree, or this fails)."""
    n = len(u) + 1
    z = gpu_core.linkage_from_sorted_edges(n, u, v, w)
    ref = _hdbscan.labels_from_tree(z, mcs, method, eps, compiled=False)
    if _passes.compiled_passes() is not None:
        for got in (
            _hdbscan.labels_from_tree(z, mcs, method, eps, compiled=True),
            _hdbscan.labels_from_edges(n, u, v, w, mcs, method, eps, compiled=True),
        ):
            assert same_bits(got[0], ref[0]) and same_bits(got[1], ref[1]), (n, mcs, method, eps)
    return ref


def parameters(w: np.ndarray, n: int) -> Iterator[tuple[int, str, float]]:
    positive = w[w > 0]
    epsilons = [0.0] + [float(np.quantile(positive, q)) for q in (0.3, 0.9)] if positive.size else [0.0]
    for mcs in sorted({2, 5, 17, max(2, n // 20)}):
        for method in ("eom", "leaf"):
            for eps in epsilons:
                yield mcs, method, eps


@pytest.mark.parametrize("tree", TREES, ids=[t[0] for t in TREES])
def test_numpy_module_equals_the_host_paths(tree: Tree) -> None:
    _, u, v, w = tree
    n = len(u) + 1
    z = gpu_core.linkage_from_sorted_edges(n, u, v, w)
    clustered = 0
    for mcs, method, eps in parameters(w, n):
        ref = references(u, v, w, mcs, method, eps)
        for compiled in (False, True) if _passes.compiled_passes() is not None else (False,):
            labels, prob = labels_from_dendrogram(*columns(z), mcs, method, eps, compiled=compiled)
            assert same_bits(labels, ref[0]) and same_bits(prob, ref[1]), (mcs, method, eps, compiled)
        clustered += int(ref[0].max() >= 1)
    assert clustered > 0  # some answers have two clusters or more: not a comparison of noise


@pytest.mark.parametrize("tree", TREES, ids=[t[0] for t in TREES])
def test_the_kernels_compiled_for_the_host_give_the_same_answer(tree: Tree) -> None:
    """The device path's driver with ``kernels/hdbscan_tree.cu`` itself (compiled by g++, each
    launch's threads in a shuffled order) instead of NumPy's reference reductions."""
    if not host_compiler_available():
        pytest.skip("g++ is not installed: the .cu file cannot be compiled for the host")
    _, u, v, w = tree
    n = len(u) + 1
    z = gpu_core.linkage_from_sorted_edges(n, u, v, w)
    for mcs, method, eps in parameters(w, n):
        ref = labels_from_dendrogram(*columns(z), mcs, method, eps)  # == the host paths (test above)
        launch = host_launch(seed=mcs)
        got = dendrogram_labels(np, launch, *columns(z), mcs, method, eps)
        assert same_bits(got[0], ref[0]) and same_bits(got[1], ref[1]), (mcs, method, eps)
        clusters = _condense.condense_columns(z[:, 0], z[:, 1], z[:, 2], z[:, 3], mcs)
        splits = clusters.parent.shape[0] > 1
        by_paths = (
            {"eom_above", "eom_up", "find_roots_counted"}
            if method == "eom" and eps == 0.0 and splits
            else set()
        )
        assert set(launch.launched) == {*by_paths, "find_roots", "segment_max", "segment_sums"}
        for a, b in zip(
            _condense.summaries(clusters, np, launch), _condense.summaries(clusters), strict=True
        ):
            assert same_nan_or_bits(a, b)  # the stabilities too: a changed order rarely changes a label


def same_nan_or_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bits, NaNs aside (inf - inf: a cluster born at lambda inf with points at inf; the
    host's and the device's NaNs may differ in sign)."""
    return np.array_equal(np.isnan(a), np.isnan(b)) and same_bits(np.nan_to_num(a), np.nan_to_num(b))


@pytest.mark.parametrize("tree", TREES[::3], ids=[t[0] for t in TREES[::3]])
def test_the_device_driver_on_a_stand_in_for_cupy(tree: Tree) -> None:
    """The driver as CuPy runs it (device arrays that NumPy refuses, CuPy's signatures, the
    kernels compiled for the host): the same answer, the host copies and syncs it promises."""
    if not host_compiler_available():
        pytest.skip("g++ is not installed: the .cu file cannot be compiled for the host")
    _, u, v, w = tree
    n = len(u) + 1
    z = gpu_core.linkage_from_sorted_edges(n, u, v, w)
    for mcs, method, eps in parameters(w, n):
        ref = labels_from_dendrogram(*columns(z), mcs, method, eps)
        xp, counters = fake_device.module()
        device_columns = [fake_device.to_device(xp, np.ascontiguousarray(c)) for c in columns(z)]
        launch = fake_device.unwrapping(host_launch(seed=n))
        left, right, sizes, dist = device_columns
        labels, prob = dendrogram_labels(xp, launch, left, right, sizes, dist, mcs, method, eps)
        if eps > 0.0:  # the clusters' parents, births and stabilities, for the host's selection
            assert counters.copies == 3
        else:  # by heavy paths: the paths per light depth and their first slots, for the launches
            splits = int(labels_from_dendrogram(*columns(z), mcs, "leaf", 0.0)[0].max()) >= 0
            assert counters.copies == (2 if method == "eom" and splits else 0)
        # a few array sizes, whatever the depth of the trees: no sync per level of a walk
        assert counters.syncs <= 6, counters.syncs
        assert isinstance(labels, fake_device.DeviceArray) and isinstance(prob, fake_device.DeviceArray)
        assert same_bits(labels.get(), ref[0]) and same_bits(prob.get(), ref[1]), (mcs, method, eps)


def test_integer_columns_give_the_same_answer() -> None:
    """The dendrogram's ids and sizes as int64 or int32 columns (a device dendrogram's), not floats."""
    _, u, v, w = TREES[1]
    z = gpu_core.linkage_from_sorted_edges(len(u) + 1, u, v, w)
    ref = labels_from_dendrogram(*columns(z), 10, "eom", 0.0)
    for dtype in (np.int64, np.int32):
        left, right, sizes = (np.ascontiguousarray(c, dtype=dtype) for c in (z[:, 0], z[:, 1], z[:, 3]))
        got = labels_from_dendrogram(left, right, sizes, z[:, 2].copy(), 10, "eom", 0.0)
        assert same_bits(got[0], ref[0]) and same_bits(got[1], ref[1])
    assert ref[0].max() >= 1


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_tiny_trees_and_min_cluster_size_above_n(n: int) -> None:
    rng = np.random.default_rng(n)
    for trial in range(12):
        u, v, w = random_tree(rng, n, "ties" if trial % 2 else "distinct") if n > 1 else (
            np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))  # fmt: skip
        z = gpu_core.linkage_from_sorted_edges(n, u, v, w)
        for mcs in (2, 3, 5, n + 1, n + 10):
            for method in ("eom", "leaf"):
                for eps in (0.0, float(w.max()) if n > 1 else 1.0):
                    ref = (
                        references(u, v, w, mcs, method, eps) if n > 1 else _hdbscan.labels_from_tree(z, mcs)
                    )
                    got = labels_from_dendrogram(*columns(z), mcs, method, eps)
                    assert same_bits(got[0], ref[0]) and same_bits(got[1], ref[1])
                    if mcs > n:
                        assert (got[0] == -1).all()


def python_stabilities(tree: condensed_rows.CondensedTree, count: int) -> list[float]:
    """The stability order's definition, in plain Python floats (one rounding per operation)."""
    n = tree.n
    birth = [0.0] * count
    for c, lam in zip(tree.child.tolist(), tree.lam.tolist(), strict=True):
        if c >= n:
            birth[c - n] = lam
    clusterpart = [0.0] * count
    table = list(
        zip(tree.parent.tolist(), tree.child.tolist(), tree.lam.tolist(), tree.size.tolist(), strict=True)
    )
    rows = sorted((c, p, lam, s) for p, c, lam, s in table if c >= n)
    for _, p, lam, size in rows:  # child clusters in number order
        clusterpart[p - n] = clusterpart[p - n] + (lam - birth[p - n]) * size
    points: list[list[float]] = [[] for _ in range(count)]
    for _, p, lam in sorted((c, p, lam) for p, c, lam, _ in table if c < n):
        points[p - n].append(lam - birth[p - n])  # points in index order
    out = []
    for c in range(count):
        pointpart = 0.0
        values = points[c]
        for start in range(0, len(values), _condense.CHUNK):
            chunk = 0.0
            for x in values[start : start + _condense.CHUNK]:
                chunk = chunk + x
            pointpart = pointpart + chunk
        out.append(clusterpart[c] + pointpart)
    return out


def plain_sequential(tree: condensed_rows.CondensedTree, count: int) -> list[float]:
    """The former order (cluster rows, then points, one running sum): to show the chunks matter."""
    n = tree.n
    birth = [0.0] * count
    for c, lam in zip(tree.child.tolist(), tree.lam.tolist(), strict=True):
        if c >= n:
            birth[c - n] = lam
    out = [0.0] * count
    for p, lam, size in zip(tree.parent.tolist(), tree.lam.tolist(), tree.size.tolist(), strict=True):
        out[p - n] = out[p - n] + (lam - birth[p - n]) * size
    return out


def test_stabilities_follow_the_chunked_order() -> None:
    """Bit for bit against the definition, on clusters of several chunks; the compiled passes too."""
    rng = np.random.default_rng(21)
    differs = 0
    multi_chunk = 0
    cases = [
        (*random_tree(rng, n, kind), mcs)
        for n, kind, mcs in (
            (12000, "chain", 40),
            (6000, "distinct", 7),
            (8000, "ties", 500),
            (9000, "distinct", 3000),
        )
    ]
    cases.append((*point_tree("blobs", blobs(3, 20000, 2, centers=6, spread=0.05).points, 5)[1:], 500))
    for u, v, w, mcs in cases:  # the blobs: six clusters of about 3300 points
        n = len(u) + 1
        tree = condensed_rows.condense(gpu_core.linkage_from_sorted_edges(n, u, v, w), mcs)
        count = int(tree.child.max()) - n + 1 if tree.child.max() >= n else 1
        expected = np.array(python_stabilities(tree, count))
        assert same_bits(condensed_rows.stability(tree, count), expected)
        counts = np.bincount(tree.parent[tree.child < n] - n, minlength=count)
        multi_chunk += int((counts > 2 * _condense.CHUNK).sum())
        differs += int((np.array(plain_sequential(tree, count)) != expected).sum())
        passes = _passes.compiled_passes()
        if passes is not None:
            parent, aux, p_lam = _hdbscan._work_arrays(n)
            bad, *segments = passes.condense_edges(n, u, v, w, mcs, parent, aux, p_lam)
            assert bad == -1
            *_, stability, _ = passes.cluster_tree(*segments, aux, p_lam)
            assert same_bits(stability, expected)
    assert multi_chunk >= 6  # clusters of three chunks and more were summed
    assert differs >= 1  # and the chunked order changed some bits: the oracle can tell the orders apart


def test_segment_reductions() -> None:
    rng = np.random.default_rng(3)
    values = rng.normal(size=5000) * 10.0 ** rng.integers(-8, 8, 5000)
    lengths = rng.integers(0, 40, 300)
    lengths[::17] = 0
    lengths[5] = 2000
    ends = np.minimum(np.cumsum(lengths), values.size)
    starts = ends - np.minimum(lengths, ends)
    sums = _condense.segment_sums(values, starts, ends)
    tops = _condense.segment_max(values, starts, ends)
    if host_compiler_available():  # the kernels, compiled for the host: the same bits
        launch = host_launch(seed=1)
        assert same_bits(_condense.segment_sums(values, starts, ends, np, launch), sums)
        assert same_bits(_condense.segment_max(values, starts, ends, np, launch), tops)
    for s, (a, b) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        total = 0.0
        for x in values[a:b].tolist():
            total = total + x
        assert sums[s] == total and np.signbit(sums[s]) == np.signbit(total)
        assert tops[s] == max([0.0, *values[a:b].tolist()])


def test_compiled_selection_equals_numpy_selection() -> None:
    passes = _passes.compiled_passes()
    if passes is None:
        pytest.skip("Numba is not installed")
    rng = np.random.default_rng(5)
    for size in (1, 2, 3, 9, 200, 3001):
        parent = np.zeros(size, dtype=np.int64)
        parent[1:] = (np.arange(1, size) - 1) // 2  # children after parents, pairs of siblings
        birth = np.zeros(size)
        for c in range(1, size):  # born after their parents
            birth[c] = birth[parent[c]] + rng.random()
        stability = rng.random(size) * rng.integers(1, 4, size)
        for method in ("eom", "leaf"):
            for eps in (0.0, 0.3, 1.0, 5.0):
                ref = _select.select_clusters(parent, birth, stability, method, eps)
                got = passes.select_clusters(parent, birth, stability, method == "leaf", eps)
                assert same_bits(got, ref), (size, method, eps)


def test_chunk_constants_agree() -> None:
    passes = _passes.compiled_passes()
    if passes is None:
        pytest.skip("Numba is not installed")
    assert passes.CHUNK == _condense.CHUNK


def test_numpy_inputs_stay_on_the_host() -> None:
    _, u, v, w = TREES[0]
    z = gpu_core.linkage_from_sorted_edges(len(u) + 1, u, v, w)
    labels, prob = labels_from_dendrogram(*columns(z), 5)
    assert type(labels) is np.ndarray and labels.dtype == np.int64
    assert type(prob) is np.ndarray and prob.dtype == np.float64
    assert _dendrogram_labels._module_of(z) is np


# --- on the device ---------------------------------------------------------------------------


def device_answer(u, v, w, mcs: int, method: str, eps: float, compiled: bool | None = None):
    import cupy

    z = cupy.asarray(gpu_core.linkage_from_sorted_edges(len(u) + 1, u, v, w))
    labels, prob = labels_from_dendrogram(
        z[:, 0], z[:, 1], z[:, 3], z[:, 2], mcs, method, eps, compiled=compiled
    )
    assert isinstance(labels, cupy.ndarray) and isinstance(prob, cupy.ndarray)
    return cupy.asnumpy(labels), cupy.asnumpy(prob)


@pytest.mark.gpu
@pytest.mark.parametrize("tree", TREES, ids=[t[0] for t in TREES])
def test_device_equals_the_host_paths(tree: Tree) -> None:
    _, u, v, w = tree
    n = len(u) + 1
    for mcs, method, eps in parameters(w, n):
        ref = references(u, v, w, mcs, method, eps)
        for compiled in (False, None):
            labels, prob = device_answer(u, v, w, mcs, method, eps, compiled)
            assert same_bits(labels, ref[0]) and same_bits(prob, ref[1]), (mcs, method, eps, compiled)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_device_tiny_trees(n: int) -> None:
    rng = np.random.default_rng(n)
    for trial in range(6):
        u, v, w = random_tree(rng, n, "ties" if trial % 2 else "distinct")
        for mcs in (2, 3, n + 1):
            for method in ("eom", "leaf"):
                for eps in (0.0, float(w.max())):
                    ref = references(u, v, w, mcs, method, eps)
                    got = device_answer(u, v, w, mcs, method, eps)
                    assert same_bits(got[0], ref[0]) and same_bits(got[1], ref[1])


@pytest.mark.gpu
def test_device_stabilities_and_deaths_equal_numpy() -> None:
    """The intermediate arrays too (NaN where a cluster born at lambda inf has points at inf:
    compared as NaN, its bits may differ between the host's and the device's NaN)."""
    import cupy

    for _, u, v, w in [*TREES[:8], ("big", *random_tree(np.random.default_rng(4), 200_000, "chain"))]:
        n = len(u) + 1
        z = gpu_core.linkage_from_sorted_edges(n, u, v, w)
        for mcs in (2, 5, 300):
            host = _condense.condense_columns(z[:, 0], z[:, 1], z[:, 2], z[:, 3], mcs)
            dz = cupy.asarray(z)
            dev = _condense.condense_columns(dz[:, 0], dz[:, 1], dz[:, 2], dz[:, 3], mcs, cupy)
            for field in ("parent", "birth", "size", "point_cluster", "point_lam"):
                assert same_bits(getattr(dev, field).get(), getattr(host, field)), field
            device_summaries = _condense.summaries(dev, cupy, _dendrogram_labels._cupy_launch)
            for a, b in zip(device_summaries, _condense.summaries(host), strict=True):
                assert same_nan_or_bits(a.get(), b)


@pytest.mark.gpu
def test_device_segment_kernels() -> None:
    import cupy

    rng = np.random.default_rng(8)
    values = rng.normal(size=300_000) * 10.0 ** rng.integers(-8, 8, 300_000)
    lengths = rng.integers(0, 1100, 500)
    lengths[::7] = 0
    ends = np.minimum(np.cumsum(lengths), values.size)
    starts = ends - np.minimum(lengths, ends)
    dv, ds, de = cupy.asarray(values), cupy.asarray(starts), cupy.asarray(ends)
    launch = _dendrogram_labels._cupy_launch
    sums = _condense.segment_sums(dv, ds, de, cupy, launch)
    tops = _condense.segment_max(dv, ds, de, cupy, launch)
    assert same_bits(sums.get(), _condense.segment_sums(values, starts, ends))
    assert same_bits(tops.get(), _condense.segment_max(values, starts, ends))
    empty = cupy.zeros(0, dtype=cupy.int64)
    assert _condense.segment_sums(dv, empty, empty, cupy, launch).shape == (0,)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [100_000, 1_000_000])
def test_device_equals_the_host_at_scale(n: int) -> None:
    rng = np.random.default_rng(n)
    sets = [("ties", *random_tree(rng, n, "ties")), ("distinct", *random_tree(rng, n, "distinct"))]
    if n == 100_000:
        sets.append(point_tree("blobs", blobs(1, n, 2, centers=20, spread=0.1).points, 5))
        sets.append(point_tree("grid", integer_grid(2, n, 2).points, 5))
    for _, u, v, w in sets:
        for mcs, method, eps in ((5, "eom", 0.0), (50, "leaf", 0.0), (5, "eom", float(np.quantile(w, 0.5)))):
            ref = references(u, v, w, mcs, method, eps)
            got = device_answer(u, v, w, mcs, method, eps)
            assert same_bits(got[0], ref[0]) and same_bits(got[1], ref[1]), (n, mcs, method, eps)
            assert ref[0].max() >= 1


@pytest.mark.gpu
def test_device_warm_up_runs() -> None:
    _dendrogram_labels.warm_up_device()


@pytest.mark.gpu
def test_points_to_labels_on_the_device_equal_the_cpu_backend() -> None:
    """The path ``hdbscan`` takes on the GPU: tree, dendrogram, selection (with an epsilon, on the
    host) and labels on the device; the CPU backend's ``hdbscan`` of the same points, bit for bit."""
    import cupy

    from gpu_core._dendrogram.gpu import linkage_on_device

    for ps, k in (
        (blobs(4, 50_000, 2, centers=10, spread=0.1), 5),
        (integer_grid(5, 30_000, 3), 5),
        (duplicated(6, 20_000, 2), 3),
    ):
        n = ps.points.shape[0]
        tree = gpu_core.euclidean_mst(cupy.asarray(ps.points), min_samples=k, backend="gpu")
        z = linkage_on_device(n, tree.src, tree.dst, tree.weights)
        for mcs, method, eps in (
            (5, "eom", 0.0),
            (20, "leaf", 0.0),
            (10, "eom", float(cupy.median(tree.weights))),
        ):
            labels, prob = labels_from_dendrogram(z[:, 0], z[:, 1], z[:, 3], z[:, 2], mcs, method, eps)
            ref = gpu_core.hdbscan(
                ps.points, min_cluster_size=mcs, min_samples=k, cluster_selection_method=method,  # type: ignore[arg-type]
                cluster_selection_epsilon=eps, backend="cpu",
            )  # fmt: skip
            assert same_bits(labels.get(), ref.labels) and same_bits(prob.get(), ref.probabilities), ps.name
            assert ref.num_clusters >= 2
