"""``forest_total``: the exact total weight of a forest, whatever its dtype and size."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_core._forest import forest_total


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
