"""``.npy`` files to device arrays through pinned pieces (``gpu_core._backend.staging``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpu_core._backend import staging as _staging
from gpu_core.errors import GraphValidationError


def _saved(tmp_path: Path, array: np.ndarray[Any, Any]) -> Path:
    path = tmp_path / "a.npy"
    np.save(path, array)
    return path


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("length", "dtype"),
    [
        (0, "int32"),
        (1, "float32"),
        (1000, "uint8"),
        (_staging.PIECE // 8, "float64"),  # exactly one piece
        (_staging.PIECE // 4 * 2, "int32"),  # exactly two
        (_staging.PIECE // 8 * 3 + 5, "int64"),  # three and a bit: a reader each
        (_staging.PIECE // 4 * 9 + 3, "float32"),  # 10 pieces: readers reuse their two buffers
        (1_000_003, ">f8"),  # big-endian: swapped to native
    ],
)
def test_round_trip(tmp_path: Path, length: int, dtype: str) -> None:
    import cupy as cp

    host = np.random.default_rng(length).integers(0, 250, length).astype(dtype)
    device = _staging.npy_to_device(_saved(tmp_path, host))
    assert isinstance(device, cp.ndarray) and device.dtype == host.dtype.newbyteorder("=")
    assert np.array_equal(cp.asnumpy(device), host)


def test_a_truncated_file_is_refused_before_any_device_work(tmp_path: Path) -> None:
    path = _saved(tmp_path, np.arange(100, dtype=np.int64))
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(GraphValidationError, match="800 bytes of data, the file has 797"):
        _staging.npy_to_device(path)


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.array(["a", "b"]), "not numbers"),
        (np.asfortranarray(np.ones((3, 2))), "Fortran order"),
    ],
)
def test_what_is_not_a_plain_array_of_numbers_is_refused(tmp_path: Path, array: Any, message: str) -> None:
    with pytest.raises(GraphValidationError, match=message):
        _staging.npy_to_device(_saved(tmp_path, array))


def test_a_file_that_is_not_npy_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.npy"
    path.write_bytes(b"PK\x03\x04 not an npy")
    with pytest.raises(GraphValidationError, match=r"not a valid \.npy"):
        _staging.npy_to_device(path)
