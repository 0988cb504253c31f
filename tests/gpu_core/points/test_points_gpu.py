"""The GPU point-set backend returns the CPU backend's arrays bit for bit (and both equal brute force).

Marked ``gpu``: skipped where no CUDA device is visible. Quick (seconds) and decisive: many small
sets with every kind of tie, one larger set per dimension, and the HDBSCAN labels on top.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import gpu_core
from tests.utils.points import blobs, point_sets, prim_tree, random_points, weight_matrix

pytestmark = pytest.mark.gpu


def assert_same_tree(gpu: gpu_core.EuclideanTree, cpu: gpu_core.EuclideanTree, name: str) -> None:
    assert gpu.backend == "gpu" and cpu.backend == "cpu"
    assert np.array_equal(gpu.src, cpu.src), name
    assert np.array_equal(gpu.dst, cpu.dst), name
    assert np.array_equal(gpu.weights, cpu.weights), name
    if cpu.core_distances is None:
        assert gpu.core_distances is None
    else:
        assert gpu.core_distances is not None
        assert np.array_equal(gpu.core_distances, cpu.core_distances), name


@pytest.mark.parametrize("d", [1, 2, 3, 8])
@pytest.mark.parametrize("min_samples", [1, 2, 5])
def test_gpu_equals_cpu_and_brute_force(d: int, min_samples: int) -> None:
    for n in (2, 7, 120):
        if min_samples > n:
            continue
        for which, ps in enumerate(point_sets(n, d, seed=31 * n + d)):
            gpu = gpu_core.euclidean_mst(ps.points, min_samples=min_samples, backend="gpu")
            cpu = gpu_core.euclidean_mst(ps.points, min_samples=min_samples, backend="cpu")
            assert_same_tree(gpu, cpu, ps.name)
            if n == 120 and which < 2:  # and one independent oracle, besides the CPU backend
                src, dst, w = prim_tree(weight_matrix(ps.points, min_samples))
                assert np.array_equal(gpu.src, src) and np.array_equal(gpu.dst, dst)
                assert np.array_equal(gpu.weights, w)


@pytest.mark.parametrize(("d", "min_samples"), [(2, 1), (3, 16), (5, 70), (2, 5), (2, 30), (3, 64), (1, 8)])
def test_gpu_equals_cpu_on_larger_sets(d: int, min_samples: int) -> None:
    sets = (random_points(d, 8_000, d), blobs(d, 8_000, d, centers=8), point_sets(8_000, d, seed=d)[-1])
    for ps in sets:
        gpu = gpu_core.euclidean_mst(ps.points, min_samples=min_samples, backend="gpu")
        cpu = gpu_core.euclidean_mst(ps.points, min_samples=min_samples, backend="cpu")
        assert_same_tree(gpu, cpu, ps.name)


def test_cupy_input_and_hdbscan_labels() -> None:
    import cupy

    ps = blobs(9, 3000, 2, centers=6, spread=0.2)
    for k in (1, 5):  # CuPy points: the tree stays on the device, same arrays
        on_device = gpu_core.euclidean_mst(cupy.asarray(ps.points), min_samples=k, backend="gpu")
        arrays = (on_device.src, on_device.dst, on_device.weights)
        assert all(isinstance(a, cupy.ndarray) for a in arrays)
        assert (on_device.core_distances is None) == (k == 1)
        core = None if on_device.core_distances is None else cupy.asnumpy(on_device.core_distances)
        host = dataclasses.replace(
            on_device, src=cupy.asnumpy(on_device.src), dst=cupy.asnumpy(on_device.dst),
            weights=cupy.asnumpy(on_device.weights), core_distances=core,
        )  # fmt: skip
        cpu = gpu_core.euclidean_mst(ps.points, min_samples=k, backend="cpu")
        assert_same_tree(host, cpu, ps.name)
        assert on_device.total_weight == pytest.approx(cpu.total_weight, rel=1e-12)
        from_host = gpu_core.euclidean_mst(ps.points, min_samples=k, backend="gpu")
        assert from_host.total_weight == cpu.total_weight  # the same NumPy sum of the same array
    c = gpu_core.hdbscan(cupy.asarray(ps.points), min_cluster_size=10, backend="gpu")
    a = gpu_core.hdbscan(ps.points, min_cluster_size=10, backend="gpu")
    assert np.array_equal(a.labels, c.labels) and np.array_equal(a.probabilities, c.probabilities)
    b = gpu_core.hdbscan(ps.points, min_cluster_size=10, backend="cpu")
    assert np.array_equal(a.labels, b.labels) and np.array_equal(a.probabilities, b.probabilities)
    assert np.array_equal(
        gpu_core.single_linkage(ps.points, backend="gpu"), gpu_core.single_linkage(ps.points)
    )
