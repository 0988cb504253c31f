"""The JSON weight-dtype rule and the Accept negotiation, in process."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_core
from service.api.encoders import negotiate
from service.api.uploads import weights_array
from service.errors import InvalidUploadError, NotAcceptableError
from service.models import GraphFormat, WeightDtype


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
    ("accept", "chosen"),
    [
        (None, "json"),
        ("", "json"),
        ("application/octet-stream", "npz"),
        ("application/json, application/octet-stream", "json"),
        ("application/octet-stream, application/json", "npz"),
        ("application/json;q=0.9, application/octet-stream;q=1.0", "npz"),
        ("text/html, */*;q=0.8", "json"),
        ("application/octet-stream;q=0.5, */*;q=0.9", "json"),
        ("application/*", "json"),
        ("application/vnd.apache.arrow.stream", "arrow"),
        ("application/json;q=0.5, application/vnd.apache.arrow.stream", "arrow"),
        ("application/vnd.apache.arrow.stream;q=0.1, application/octet-stream;q=0.2", "npz"),
        ("*/*;q=0.1, application/vnd.apache.arrow.stream;q=0", "json"),
    ],
)
def test_negotiate(accept: str | None, chosen: str) -> None:
    assert negotiate(accept) == chosen


@pytest.mark.parametrize(
    "accept", ["text/html", "application/octet-stream;q=0", "image/*", "application/json;q=0, text/csv"]
)
def test_negotiate_refuses_what_it_does_not_offer(accept: str) -> None:
    with pytest.raises(NotAcceptableError, match="offers application/json, application/octet-stream"):
        negotiate(accept)
