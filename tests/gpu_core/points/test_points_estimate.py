"""``gpu_core.estimate_point_set_bytes`` bounds what an index and a tree on it really take.

CPU: host memory traced with ``tracemalloc`` (NumPy's allocations are traced) from the copy of the
points a worker makes to the end of the tree, for the k-d tree and the brute-force path. GPU:
CuPy's pool high-water mark (``pool_peak``), the hierarchy and brute force (run on a GPU host).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import gpu_core
from gpu_core._backend.memory import pool_peak
from gpu_core._points.brute import BruteIndex

CASES = [
    (3000, 64, 10),
    (2000, 300, 1),
    (6000, 20, 5),
    (600, 1024, 3),
    (5000, 8, 10),
    (20000, 3, 1),
    (4000, 2, 40),
]


@pytest.mark.parametrize(("n", "d", "k"), CASES)
def test_cpu_estimate_bounds_the_traced_peak(n: int, d: int, k: int) -> None:
    points = np.random.default_rng(n + d).random((n, d))
    estimate = gpu_core.estimate_point_set_bytes(n, d, min_samples=k, backend="cpu")
    gpu_core.euclidean_mst(points[:50], min_samples=min(k, 50), backend="cpu")  # imports: not traced
    tracemalloc.start()
    try:
        coords = points.copy()
        index = gpu_core.build_point_index(coords, backend="cpu")
        resident = tracemalloc.get_traced_memory()[0]
        gpu_core.euclidean_mst(index, min_samples=k)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(index._state, BruteIndex) == (d > 12)
    assert resident <= estimate.resident <= 1.5 * resident + 2**16
    assert peak <= estimate.peak <= 2 * peak + 2**20


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        gpu_core.estimate_point_set_bytes(0, 3)
    with pytest.raises(ValueError, match="backend"):
        gpu_core.estimate_point_set_bytes(10, 3, backend="tpu")  # type: ignore[arg-type]
    big = gpu_core.estimate_point_set_bytes(10**6, 1024, min_samples=10, backend="gpu")
    assert 10 * 10**6 * 1024 <= big.resident < big.peak < 40 * 10**9  # planned for an 80 GB device


def _peak_before_float16(n: int, d: int, k: int) -> int:
    """The GPU brute-force path's peak as estimated before its float16 kernels (main at ae52513:
    the float32 copy, cuBLAS tiles of 8,192 x 16,384 products)."""
    resident = 12 * n * d + 8 * n
    width = min(n, 16 if k == 1 else k + 16)
    block = min(n, 8192)
    lists = n * width * 16 * 3
    rounds = n * width * 17 + 96 * n
    search = 4 * n * d + 24 * n
    block_work = block * (4 * min(n, 16384) + 8 * d + 4 * d + width * 16 + 256 * 4 + 64)
    return resident + lists + max(rounds, search) + block_work + 2**16 + 2**20


@pytest.mark.parametrize("n", [2000, 30000, 10**5, 10**6, 10**7])
@pytest.mark.parametrize("d", [33, 128, 384, 768, 1024])
def test_the_float16_path_needs_no_more_device_memory_than_before(n: int, d: int) -> None:
    for k in (1, 10, 100):
        now = gpu_core.estimate_point_set_bytes(n, d, min_samples=k, backend="gpu")
        assert now.peak <= _peak_before_float16(n, d, k), (n, d, k)


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "d", "k"), [(20000, 2, 5), (20000, 3, 1), (30000, 128, 10), (8000, 1024, 5)])
def test_gpu_estimate_bounds_the_pools_peak(n: int, d: int, k: int) -> None:
    import cupy

    points = np.random.default_rng(n + d).random((n, d))
    estimate = gpu_core.estimate_point_set_bytes(n, d, min_samples=k, backend="gpu")
    with pool_peak() as seen:
        index = gpu_core.build_point_index(cupy.asarray(points), backend="gpu")
        resident = index.nbytes
        tree = gpu_core.euclidean_mst(index, min_samples=k)
        cupy.cuda.Device().synchronize()
        del tree
    assert resident <= estimate.resident
    assert seen.peak <= estimate.peak + points.nbytes  # the device copy of the points is the caller's
