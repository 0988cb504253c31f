"""``gpu_core._stored_npz``: a stored ``.npz`` archive's arrays read from its bytes equal
``numpy.load``'s, and anything it does not handle (or that is damaged) is left to ``numpy.load``."""

from __future__ import annotations

import io
import zipfile
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_core import _stored_npz as module
from gpu_core._stored_npz import read_npy_header, stored_npz
from service.storage.npzio import write_npz

ARRAYS: dict[str, Any] = {
    "edge_ids": np.arange(1000, dtype=np.int64),
    "weights": np.linspace(-1, 1, 1000, dtype=np.float32),
    "empty": np.zeros(0, dtype=np.uint16),
    "scalar": np.int64(2**40),
    "matrix": np.arange(12, dtype=np.float64).reshape(3, 4),
    "flags": np.array([True, False, True]),
    "half": np.array([0.5, -2.0], dtype=np.float16),
    "big_endian": np.arange(5, dtype=">i4"),
    "cube": np.arange(24, dtype=np.int8).reshape(2, 3, 4),
}


def _numpy_load(data: bytes) -> dict[str, np.ndarray[Any, Any]]:
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def _savez(**arrays: Any) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _write_npz(**arrays: Any) -> bytes:
    buf = io.BytesIO()
    write_npz(buf, arrays)
    return buf.getvalue()


def _same(got: dict[str, np.ndarray[Any, Any]] | None, expected: dict[str, np.ndarray[Any, Any]]) -> None:
    assert got is not None
    assert list(got) == list(expected)
    for name, array in expected.items():
        assert got[name].dtype == array.dtype and got[name].shape == array.shape, name
        np.testing.assert_array_equal(got[name], array)


@pytest.mark.parametrize("writer", [_savez, _write_npz], ids=["numpy.savez", "service.write_npz"])
@pytest.mark.parametrize("container", [bytes, bytearray, memoryview])
def test_equals_numpy_load(writer: Any, container: Any) -> None:
    data = writer(**ARRAYS)
    got = stored_npz(container(data))
    _same(got, _numpy_load(data))
    assert got is not None
    for array in got.values():  # arrays of their own, as numpy.load's: aligned, writable
        assert array.flags.owndata and array.flags.aligned and array.flags.writeable


def test_a_fortran_ordered_vector_is_read_and_a_matrix_left_to_numpy() -> None:
    _same(stored_npz(_savez(v=np.asfortranarray(np.arange(4)))), {"v": np.arange(4)})
    assert stored_npz(_savez(m=np.asfortranarray(np.arange(6).reshape(2, 3)))) is None


def test_what_it_does_not_handle_is_left_to_numpy_load() -> None:
    plain = _savez(a=np.arange(10))
    compressed = io.BytesIO()
    np.savez_compressed(compressed, a=np.arange(10))
    assert stored_npz(compressed.getvalue()) is None
    with_comment = io.BytesIO(plain)
    with zipfile.ZipFile(with_comment, "a") as archive:
        archive.comment = b"a note"
    assert stored_npz(with_comment.getvalue()) is None
    npy = io.BytesIO()
    np.save(npy, np.arange(3))
    for name, member in (("readme.txt", b"not an array"), ("b.npy", b"not an npy header")):
        other = io.BytesIO()
        with zipfile.ZipFile(other, "w") as archive:
            archive.writestr("a.npy", npy.getvalue())
            archive.writestr(name, member)
        assert stored_npz(other.getvalue()) is None, name
    assert stored_npz(_savez(o=np.array([1, "x"], dtype=object))) is None  # (numpy.load refuses it too)
    for body in (b"", b"PK", b"not an archive at all", np.arange(100).tobytes(), plain[:-1], plain[1:]):
        assert stored_npz(body) is None


def test_a_damaged_member_is_left_to_numpy_load_which_says_so() -> None:
    data = bytearray(_savez(a=np.arange(1000, dtype=np.int64)))
    data[len(data) // 2] ^= 0xFF  # inside the array's bytes: its CRC-32 no longer checks
    assert stored_npz(data) is None
    with pytest.raises(zipfile.BadZipFile):
        _numpy_load(bytes(data))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400), st.integers(min_value=0, max_value=10**6))
def test_any_damage_is_either_read_exactly_or_refused(noise: bytes, where: int) -> None:
    """Bytes of a valid archive overwritten anywhere: the answer is numpy.load's arrays or None."""
    data = bytearray(_write_npz(a=np.arange(50, dtype=np.int32), b=np.ones(3)))
    at = where % len(data)
    data[at : at + len(noise)] = noise
    got = stored_npz(bytes(data))
    if got is not None:
        _same(got, _numpy_load(bytes(data)))


def test_the_parse_of_a_repeated_npy_header_is_kept() -> None:
    """Archives of one kind repeat a few ``.npy`` headers: each distinct one is parsed once."""
    module._parse_npy_header.cache_clear()
    src, weight = np.arange(5, dtype=np.int32), np.ones(5, dtype=np.float64)
    for i in range(3):
        _same(stored_npz(_savez(src=src + i, weight=weight + i)), {"src": src + i, "weight": weight + i})
    info = module._parse_npy_header.cache_info()
    assert (info.misses, info.hits) == (2, 4)  # two distinct headers, each met three times
    assert read_npy_header(b"\x93NUMPY\x01\x00\xff\x00{'descr'") is None  # cut short
    assert read_npy_header(b"\x93NUMPY\x03\x00" + b"\x00" * 8) is None  # unknown version
