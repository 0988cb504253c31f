"""``estimate_device_bytes`` against what the backends really hold and allocate.

CPU backend (everywhere): ``resident`` equals ``Graph.nbytes`` exactly for graphs without
self-loops, and ``peak`` bounds the build's peak as ``tracemalloc`` traces it (NumPy reports
its allocations there), within a factor of 2. GPU (marked ``gpu``): ``resident`` is within
1 % of ``Graph.nbytes``, and ``peak`` bounds the live bytes of CuPy's pool during the build
(a counting allocator over the pool) within a factor of 1.6.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import numpy as np
import pytest

import gpu_core
from gpu_core import estimate_device_bytes
from gpu_core._backend.memory import pool_peak

SIZES = [(1_000, 3_000), (50_000, 400_000), (400_000, 800_000), (20, 300_000)]
WEIGHTS = [np.int32, np.int64, np.float32, np.float64]


def loop_free_edges(n: int, m: int, id_dtype: Any, weight_dtype: Any, seed: int = 0) -> tuple[Any, Any, Any]:
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    dst = np.where(src == dst, (dst + 1) % n, dst)
    return src.astype(id_dtype), dst.astype(id_dtype), rng.integers(-99, 99, m).astype(weight_dtype)


@pytest.mark.parametrize(("n", "m"), SIZES)
@pytest.mark.parametrize("weight_dtype", WEIGHTS)
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
def test_cpu_estimate_bounds_the_build(n: int, m: int, weight_dtype: Any, id_dtype: Any) -> None:
    src, dst, weight = loop_free_edges(n, m, id_dtype, weight_dtype)
    tracemalloc.start()
    try:
        graph = gpu_core.Graph(src, dst, weight, n, backend="cpu")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    estimate = estimate_device_bytes(n, m, weight_dtype, backend="cpu")
    assert estimate.resident == graph.nbytes
    assert peak <= estimate.peak <= max(2 * peak, peak + (2 << 20)), (peak, estimate)


def test_estimate_grows_with_the_graph_and_refuses_nonsense() -> None:
    small = estimate_device_bytes(1000, 10_000, np.float32)
    assert estimate_device_bytes(1000, 20_000, np.float32).peak > small.peak
    assert estimate_device_bytes(1000, 10_000, np.float64).peak > small.peak
    assert estimate_device_bytes(10**9, 10, np.int32).resident > 10**10  # vertices count too
    assert small.peak >= small.resident > 0
    with pytest.raises(ValueError, match="non-negative"):
        estimate_device_bytes(-1, 5, np.int32)
    with pytest.raises(ValueError, match="backend"):
        estimate_device_bytes(1, 5, np.int32, backend="tpu")  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def graph_kernels_warm() -> None:
    """The graph kernels loaded once for the module (a first build's one-off allocations, such as
    CuPy's kernel arguments, would otherwise count in the first measured peak)."""
    from gpu_core._graphs.warm_up import warm_up_graphs

    warm_up_graphs("gpu", sizes=(2**10, 2**20))


@pytest.mark.gpu
@pytest.mark.usefixtures("graph_kernels_warm")
@pytest.mark.parametrize(("n", "m"), [*SIZES, (2_000_000, 10_000_000), (10_000_000, 20_000_000)])
@pytest.mark.parametrize("weight_dtype", WEIGHTS)
def test_gpu_estimate_bounds_the_pool(n: int, m: int, weight_dtype: Any) -> None:
    src, dst, weight = loop_free_edges(n, m, np.int32, weight_dtype)
    with pool_peak() as seen:
        graph = gpu_core.Graph(src, dst, weight, n, backend="gpu")
    peak = seen.peak
    estimate = estimate_device_bytes(n, m, weight_dtype, backend="gpu")
    assert abs(estimate.resident - graph.nbytes) <= 0.01 * graph.nbytes, (estimate, graph.nbytes)
    assert peak <= estimate.peak <= 1.6 * peak + (2 << 20), (peak, estimate)
