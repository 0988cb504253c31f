"""The JSON weight-dtype rule and the Accept negotiation, in process."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_core
from service.encoders import wants_binary
from service.errors import InvalidUploadError
from service.models import GraphFormat, WeightDtype
from service.uploads import weights_array


@pytest.mark.parametrize(
    ("values", "dtype", "expected"),
    [
        ([1, -2, 3], None, np.array([1, -2, 3], dtype=np.int64)),
        ([2**63 - 1], None, np.array([2**63 - 1], dtype=np.int64)),
        ([1, 0.5], None, np.array([1.0, 0.5])),
        ([2**53, 0.5], None, np.array([2.0**53, 0.5])),
        ([1, 2], "int32", np.array([1, 2], dtype=np.int32)),
        ([0.1, 3], "float32", np.array([0.1, 3], dtype=np.float32)),
        ([1, 2], "float64", np.array([1.0, 2.0])),
    ],
)
def test_weight_rule(values: list, dtype: str | None, expected: np.ndarray) -> None:
    got = weights_array(values, dtype)
    assert got.dtype == expected.dtype and got.tolist() == expected.tolist()


@pytest.mark.parametrize(
    ("values", "dtype", "index"),
    [
        ([0.5, 2**53 + 1], None, 1),
        ([1, 2**63], None, 1),
        ([1, 2**31], "int32", 1),
        ([-(2**31) - 1], "int32", 0),
        ([1, 1.5], "int64", 1),
    ],
)
def test_inexact_weights_are_refused_with_their_index(values: list, dtype: str | None, index: int) -> None:
    with pytest.raises(InvalidUploadError) as info:
        weights_array(values, dtype)
    assert (info.value.field, info.value.index) == ("weight", index)
    assert f"weight[{index}]" in info.value.message


def test_float32_overflow_becomes_inf_for_the_engine_to_name() -> None:
    assert np.isinf(weights_array([1e39], "float32")[0])


def test_literals_match_the_engine() -> None:
    assert set(GraphFormat.__args__) == set(gpu_core.FORMATS)  # type: ignore[attr-defined]
    assert set(WeightDtype.__args__) == {str(d) for d in gpu_core.WEIGHT_DTYPES}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("accept", "binary"),
    [
        (None, False),
        ("", False),
        ("application/octet-stream", True),
        ("application/octet-stream;q=0", False),
        ("application/json, application/octet-stream", False),
        ("application/octet-stream, application/json", True),
        ("application/json;q=0.9, application/octet-stream;q=1.0", True),
        ("text/html, */*;q=0.8", False),
        ("application/octet-stream;q=0.5, */*;q=0.9", False),
    ],
)
def test_wants_binary(accept: str | None, binary: bool) -> None:
    assert wants_binary(accept) is binary
