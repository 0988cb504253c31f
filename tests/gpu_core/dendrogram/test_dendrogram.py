"""The device dendrogram's algorithm and driver, checked on the CPU: ``build_linkage`` run on NumPy
with the kernels of ``kernels/dendrogram.cu`` simulated in Python (every work item of a launch in
a random order) and, where g++ is installed, with the ``.cu`` file itself compiled for the host.
Both must give :func:`gpu_core.linkage_from_sorted_edges`'s matrix exactly, and its errors.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpu_core
from gpu_core._dendrogram.gpu import MAX_POINTS, build_linkage
from gpu_core.errors import DisconnectedForestError, GraphTooLargeError, GraphValidationError
from tests.utils.dendrogram import (
    host_launch,
    random_tree,
    simulated_launch,
    trees,
    with_cycle,
)
from tests.utils.host_cuda import host_compiler_available

LAUNCHERS = {
    "simulated": simulated_launch,
    "host-compiled": host_launch,
}
SIZES = (2, 3, 4, 5, 8, 9, 31, 64, 65, 100, 127, 300)


def _launcher(kind: str, seed: int):
    if kind == "host-compiled" and not host_compiler_available():
        pytest.skip("g++ is not installed: the .cu file cannot be compiled for the host")
    return LAUNCHERS[kind](seed)


@pytest.mark.parametrize("kind", sorted(LAUNCHERS))
@pytest.mark.parametrize(("tail", "spacing"), [(1, 2), (4, 32), (64, 4), (1024, 1)])
def test_equals_the_host_union_find(kind: str, tail: int, spacing: int) -> None:
    checked = 0
    for tree in trees(seed=tail + spacing, sizes=SIZES):
        want = gpu_core.linkage_from_sorted_edges(tree.n, tree.src, tree.dst, tree.weights)
        launch = _launcher(kind, seed=tree.n)
        got = build_linkage(np, launch, tree.n, tree.src, tree.dst, tree.weights, tail=tail, spacing=spacing)
        assert got.dtype == np.float64 and got.shape == (tree.n - 1, 4), tree.name
        assert np.array_equal(got, want), tree.name
        checked += 1
    assert checked == 9 * len(SIZES)


@pytest.mark.parametrize("kind", sorted(LAUNCHERS))
def test_many_random_trees(kind: str) -> None:
    rng = np.random.default_rng(7)
    for _ in range(60):
        tree = random_tree(rng, int(rng.integers(2, 300)), ties=bool(rng.integers(0, 2)))
        want = gpu_core.linkage_from_sorted_edges(tree.n, tree.src, tree.dst, tree.weights)
        launch = _launcher(kind, seed=tree.n)
        got = build_linkage(np, launch, tree.n, tree.src, tree.dst, tree.weights, tail=8)
        assert np.array_equal(got, want), tree.name


def test_a_large_tree_with_the_default_tuning() -> None:
    if not host_compiler_available():
        pytest.skip("g++ is not installed")
    for tree in trees(seed=3, sizes=(5000,)):
        want = gpu_core.linkage_from_sorted_edges(tree.n, tree.src, tree.dst, tree.weights)
        got = build_linkage(np, host_launch(1), tree.n, tree.src, tree.dst, tree.weights)
        assert np.array_equal(got, want), tree.name


@pytest.mark.parametrize("kind", sorted(LAUNCHERS))
def test_a_cycle_raises_the_host_error(kind: str) -> None:
    for tree in trees(seed=11, sizes=(3, 10, 77)):
        bad = with_cycle(tree)
        with pytest.raises(DisconnectedForestError) as host:
            gpu_core.linkage_from_sorted_edges(bad.n, bad.src, bad.dst, bad.weights)
        with pytest.raises(DisconnectedForestError) as device:
            build_linkage(np, _launcher(kind, seed=1), bad.n, bad.src, bad.dst, bad.weights, tail=2)
        assert str(device.value) == str(host.value)
        assert device.value.num_components == host.value.num_components


def test_bad_input_raises_the_host_errors() -> None:
    tree = random_tree(np.random.default_rng(2), 40)
    launch = simulated_launch(0)
    out_of_range = tree.dst.copy()
    out_of_range[5] = 40
    negative = tree.src.copy()
    negative[3] = -1
    unsorted = tree.weights.copy()
    unsorted[[10, 11]] = unsorted[[11, 10]] + np.array([1.0, 0.0])
    cases = [
        (40, tree.src, out_of_range, tree.weights, GraphValidationError),
        (40, negative, tree.dst, tree.weights, GraphValidationError),
        (40, tree.src, tree.dst, unsorted, GraphValidationError),
        (40, tree.src[:-1], tree.dst[:-1], tree.weights[:-1], DisconnectedForestError),
        (40, tree.src, tree.dst[:-1], tree.weights, GraphValidationError),
    ]
    for n, src, dst, w, error in cases:
        with pytest.raises(error) as host:
            gpu_core.linkage_from_sorted_edges(n, src, dst, w)
        with pytest.raises(error) as device:
            build_linkage(np, launch, n, src, dst, w)
        assert str(device.value) == str(host.value)


def test_one_point_and_limits() -> None:
    empty = np.zeros(0, dtype=np.int64)
    got = build_linkage(np, simulated_launch(0), 1, empty, empty, np.zeros(0))
    assert got.shape == (0, 4)
    with pytest.raises(GraphTooLargeError):
        build_linkage(np, simulated_launch(0), MAX_POINTS + 1, empty, empty, np.zeros(0))
    with pytest.raises(ValueError, match="powers of two"):
        build_linkage(np, simulated_launch(0), 3, empty, empty, np.zeros(0), tail=3)
