"""``kernels/metrics.cu`` (with ``detmath.cuh``) compiled for the host by g++ and run thread by thread:
its unit vectors, distances of keys and ``pow`` are the host backend's (``gpu_core._points.metrics``
and ``detmath``) bit for bit, operation for operation. CUDA's ``__dadd_rn`` and friends are IEEE
operations rounded to nearest, so the stand-ins are the plain operators with contraction off; a GPU
run checks the device itself (``test_metrics_gpu.py``). Also: ``detmath`` against NumPy's libm.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpu_core
from gpu_core._points import detmath
from gpu_core._points.metrics import MAP_HALF, MAP_HAVERSINE, MAP_IDENTITY, MAP_ROOT, MAP_SQRT, host_distances
from tests.utils.host_cuda import compile_for_host, host_compiler_available, run_on_host

KERNEL = Path(gpu_core.__file__).parent / "kernels" / "metrics.cu"
PRELUDE = r"""
#include <algorithm>
#include <cmath>
#include <cstring>
using std::min;
using std::fabs; using std::fmax; using std::fmin; using std::frexp; using std::ldexp; using std::rint;
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __dsqrt_rn(double a) { return std::sqrt(a); }
static inline long long __double_as_longlong(double v) { long long r; std::memcpy(&r, &v, 8); return r; }
static inline double __longlong_as_double(long long v) { double r; std::memcpy(&r, &v, 8); return r; }
#define __shared__
static inline void __syncthreads() {}
"""
NAMES = ("unit_rows", "unit_vectors", "key_distances", "pow_elements")

pytestmark = pytest.mark.skipif(not host_compiler_available(), reason="g++ is not on PATH")


@functools.cache
def _library() -> Any:
    return compile_for_host(KERNEL, PRELUDE, NAMES, ("-ffp-contract=off", "-fno-fast-math"))


def _run(name: str, work: int, args: tuple[Any, ...]) -> None:
    from tests.utils import host_cuda

    host_cuda.SCALARS.setdefault(np.dtype(np.float64), __import__("ctypes").c_double)
    run_on_host(_library(), name, ((work + 63) // 64,), (64,), args, seed=7)


def _values(rng: np.random.Generator) -> np.ndarray:
    """Keys across every scale the maps meet (zero, denormals, tiny, huge, near 4 for chords)."""
    return np.concatenate([
        [0.0, 5e-324, 1e-310, 1e-200, 1e-30, 1.0, 2.0, 3.999999999, 4.0, 4.0000000001],
        10.0 ** rng.uniform(-300, 300, 3000),
        rng.uniform(0, 4, 3000),
    ])  # fmt: skip


def test_unit_rows_are_the_hosts() -> None:
    rng = np.random.default_rng(1)
    x = np.ascontiguousarray(rng.normal(size=(300, 37)) * 10.0 ** rng.integers(-5, 5, size=(300, 1)))
    norm2, out = np.empty(300), np.empty_like(x)
    _run("unit_rows", 300, (x, np.int64(300), np.int32(37), norm2, out))
    from gpu_core._points.metrics import unit_rows

    assert np.array_equal(out, unit_rows(x))


def test_unit_vectors_are_the_hosts() -> None:
    rng = np.random.default_rng(2)
    lat = np.concatenate([[-np.pi / 2, np.pi / 2, 0.0, -0.0], rng.uniform(-np.pi / 2, np.pi / 2, 4000)])
    lon = np.concatenate([[-2 * np.pi, 2 * np.pi, np.pi, -np.pi], rng.uniform(-2 * np.pi, 2 * np.pi, 4000)])
    x = np.ascontiguousarray(np.column_stack((lat, lon)))
    out = np.empty((x.shape[0], 3))
    _run("unit_vectors", x.shape[0], (x, np.int64(x.shape[0]), out))
    from gpu_core._points.metrics import unit_vectors

    assert np.array_equal(out, unit_vectors(x))


@pytest.mark.parametrize("distance_map", [MAP_SQRT, MAP_HALF, MAP_HAVERSINE, MAP_IDENTITY, MAP_ROOT])
@pytest.mark.parametrize("alpha", [1.0, 1.7])
def test_key_distances_are_the_hosts(distance_map: int, alpha: float) -> None:
    keys = _values(np.random.default_rng(3))
    if distance_map == MAP_HAVERSINE:
        keys = keys[keys <= 4.0000000001]
    out = np.empty_like(keys)
    inverse_p = 1.0 / 3.3
    _run(
        "key_distances", keys.size, (keys, np.int64(keys.size), np.int32(distance_map), inverse_p, alpha, out)
    )
    assert np.array_equal(out, host_distances(keys, distance_map, inverse_p, alpha))


@pytest.mark.parametrize("p", [1.5, 3.0, 7.25])
def test_pow_is_the_hosts(p: float) -> None:
    x = _values(np.random.default_rng(4))
    x = x[(x < 1e40)]
    out = np.empty_like(x)
    _run("pow_elements", x.size, (x, np.int64(x.size), p, out))
    assert np.array_equal(out, detmath.pow_(x, p))


def _ulps(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got - want) / np.spacing(np.maximum(np.abs(want), np.finfo(float).tiny))))


def test_detmath_is_within_an_ulp_or_two_of_libm() -> None:
    rng = np.random.default_rng(5)
    x = rng.uniform(-np.pi / 2, np.pi / 2, 200_000)
    s, c = detmath.sin_cos(x)
    assert _ulps(s, np.sin(x)) <= 1 and _ulps(c, np.cos(x)) <= 1
    wide = rng.uniform(-4 * np.pi, 4 * np.pi, 200_000)
    s, c = detmath.sin_cos(wide)
    assert np.abs(s - np.sin(wide)).max() <= 2.3e-16 and np.abs(c - np.cos(wide)).max() <= 2.3e-16
    y = rng.uniform(0, 1, 200_000)
    assert _ulps(detmath.asin(y), np.arcsin(y)) <= 1
    z = np.exp(rng.uniform(-740, 700, 200_000))
    assert _ulps(detmath.log(z), np.log(z)) <= 1
    w = rng.uniform(-700, 700, 200_000)
    assert _ulps(detmath.exp(w), np.exp(w)) <= 1
    b = rng.uniform(0, 100, 200_000)
    # pow carries p log x's rounding: |p log x| <= 16 here, so within 2^5 ulps
    assert _ulps(detmath.pow_(b, 3.5), np.power(b, 3.5)) <= 32
    assert detmath.pow_(np.zeros(1), 2.5)[0] == 0.0
