"""``forest_total``: the exact total weight of a forest, whatever its dtype and size."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_core
from gpu_core._graphs.forest import forest_total, weight_bound


@pytest.mark.parametrize(
    "values, dtype",
    [
        ([2**31 - 1] * 5, np.int32),
        ([-(2**31)] * 5, np.int32),
        ([2**62, 2**62, 2**62], np.int64),  # the sum is beyond int64
        ([-(2**63), -(2**63), 5], np.int64),
        ([2**63 - 1, -(2**63), 7], np.int64),
        ([3, -4, 5], np.int64),
    ],
)
def test_integer_totals_are_exact(values: list[int], dtype: type) -> None:
    total = forest_total(np.array(values, dtype=dtype))
    assert isinstance(total, int) and total == sum(values)


def test_float_totals_sum_in_float64() -> None:
    weights = np.array([0.1, 0.2, 1e8], dtype=np.float32)
    assert forest_total(weights) == float(weights.astype(np.float64).sum())


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_empty_forest_totals_zero_of_the_dtype_kind(dtype: type) -> None:
    total = forest_total(np.empty(0, dtype=dtype))
    assert total == 0 and isinstance(total, int if np.dtype(dtype).kind == "i" else float)


@pytest.mark.parametrize(
    "values, bound",
    [([2**62, 2**62, -5], 2**62), ([7, -9, 3], 9), ([2**40] * 4, 2**61)],  # a graph's bound may be loose
)
def test_totals_with_the_graphs_bound_are_exact(values: list[int], bound: int) -> None:
    total = forest_total(np.array(values, dtype=np.int64), bound)
    assert isinstance(total, int) and total == sum(values)


def test_the_weight_bound_of_a_graph_comes_from_its_extremes() -> None:
    weight = np.array([5, -(2**63), 2**40, 0], dtype=np.int64)
    assert weight_bound(weight, np.argsort(weight, kind="stable")) == 2**63
    assert weight_bound(np.array([], dtype=np.int32), np.array([], dtype=np.int64)) == 0
    assert weight_bound(np.array([1.5]), np.array([0])) is None


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_backends_total_forests_near_the_int64_limit_exactly(dtype: str) -> None:
    info = np.iinfo(dtype)
    weight = np.array([info.max, info.max, info.max, info.min, 1], dtype=dtype)
    graph = gpu_core.Graph(np.array([0, 1, 2, 3, 4]), np.array([1, 2, 3, 4, 5]), weight, 6, backend="cpu")
    assert graph.minimum_spanning_forest().total_weight == sum(int(w) for w in weight)
