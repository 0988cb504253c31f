"""The spool's own npz writer and mapped reader agree with numpy's, and step aside when unsure."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.storage import npzio

DTYPES = ["<i4", ">i4", "<i8", ">i8", "<f4", "<f8", ">f8", "bool"]


def sample(dtype: str, n: int = 257) -> np.ndarray:
    rng = np.random.default_rng(len(dtype) + n)
    values = rng.normal(size=n) * 1000
    return values.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_written_archives_load_with_numpy(dtype: str) -> None:
    arrays: dict[str, Any] = {
        "edge_ids": np.arange(257, dtype=np.int64),
        "weights": sample(dtype),
        "n": np.int64(7),
    }
    buf = io.BytesIO()
    npzio.write_npz(buf, arrays)
    assert zipfile.ZipFile(io.BytesIO(buf.getvalue())).testzip() is None  # CRCs right
    with np.load(io.BytesIO(buf.getvalue()), allow_pickle=False) as npz:
        assert sorted(npz.files) == ["edge_ids", "n", "weights"]
        for name, value in arrays.items():
            assert npz[name].dtype == np.asarray(value).dtype and npz[name].shape == np.asarray(value).shape
            assert np.array_equal(npz[name], value)


def test_empty_and_non_contiguous_arrays() -> None:
    buf = io.BytesIO()
    npzio.write_npz(buf, {"a": np.zeros(0, np.float32), "b": np.arange(10)[::3]})
    with np.load(io.BytesIO(buf.getvalue())) as npz:
        assert npz["a"].shape == (0,) and npz["a"].dtype == np.float32
        assert npz["b"].tolist() == [0, 3, 6, 9]


@pytest.mark.parametrize("writer", ["numpy", "ours"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_reader_maps_stored_archives(tmp_path: Path, writer: str, dtype: str) -> None:
    arrays: dict[str, Any] = {
        "src": np.arange(50, dtype=np.int32),
        "dst": np.arange(50)[::-1],
        "weight": sample(dtype, 50),
    }
    path = tmp_path / "g.npz"
    if writer == "numpy":
        np.savez(path, **arrays, num_vertices=np.int64(60))
    else:
        npzio.write_npz_file(path, {**arrays, "num_vertices": np.int64(60)}, sync=True)
    got = npzio.read_npz(path, ("src", "dst", "weight"))
    assert got is not None
    for name, value in arrays.items():
        assert got[name].dtype == value.dtype and np.array_equal(got[name], value)
    assert got["num_vertices"].shape == () and int(got["num_vertices"]) == 60
    with pytest.raises(ValueError, match="read-only"):
        got["weight"][0] = 0  # views of a read-only map: the file is never modified


def test_reader_steps_aside(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    src = np.arange(100)
    np.savez_compressed(path, src=src, dst=src, weight=src)
    assert npzio.read_npz(path, ("src",)) is None  # compressed: numpy decides
    np.savez(path, src=src, dst=src)
    assert npzio.read_npz(path, ("src", "dst", "weight")) is None  # a required array is missing
    buf = io.BytesIO()
    np.savez(buf, src=src)
    damaged = bytearray(buf.getvalue())
    damaged[150] ^= 0xFF  # inside the array's bytes: the CRC no longer matches
    path.write_bytes(bytes(damaged))
    assert npzio.read_npz(path, ("src",)) is None
    for body in (b"", b"not a zip", np.arange(3).tobytes()):
        path.write_bytes(body)
        assert npzio.read_npz(path, ("src",)) is None
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("src.npy", b"not an npy header")
    assert npzio.read_npz(path, ("src",)) is None


def test_a_result_written_out_at_once_is_the_same_file(tmp_path: Path) -> None:
    """``write_out``: the file handed to the disk at once (``sync_file_range`` on Linux, which must
    accept the call) holds what one left to the kernel's write-back holds."""
    import sys

    from service.storage.spool import start_write_out

    arrays = {"edge_ids": np.arange(100_000, dtype=np.int64), "weights": np.linspace(0, 1, 100_000)}
    plain, written_out = tmp_path / "plain.npz", tmp_path / "out.npz"
    npzio.write_npz_file(plain, arrays)
    npzio.write_npz_file(written_out, arrays, write_out=True)
    assert plain.stat().st_size == written_out.stat().st_size
    for path in (plain, written_out):
        with np.load(path) as npz:
            assert all(np.array_equal(npz[k], v) and npz[k].dtype == v.dtype for k, v in arrays.items())
    if sys.platform.startswith("linux"):
        start = start_write_out()
        assert start is not None
        with open(written_out, "rb") as f:
            assert start(f.fileno(), 0, 0) == 0


@pytest.mark.parametrize("size", [50, 600_000])  # read into arrays of their own / mapped (> 4 MB file)
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_graph_layout_gives_the_plain_graph_arrays(tmp_path: Path, dtype: str, size: int) -> None:
    """A front parses a one-shot once and sends where its arrays lie (``GraphLayout``); the worker's
    arrays from it are exactly those ``plain_graph`` reads, aligned where they are read."""
    path = tmp_path / "g.npz"
    arrays: dict[str, np.ndarray[Any, Any]] = {
        "src": np.arange(size, dtype=np.int32),
        "dst": np.arange(size)[::-1],
        "weight": sample(dtype, size),
    }
    extras: list[dict[str, Any]] = [{}, {"num_vertices": np.int64(size + 3)}, {"note": np.arange(3)}]
    for extra in extras:
        np.savez(path, **{**arrays, **extra})
        layout = npzio.graph_layout(path)
        plain = npzio.plain_graph(path)
        assert layout is not None and plain is not None
        got = npzio.map_layout(layout)
        assert got.num_vertices == plain.num_vertices == (size + 3 if extra.get("num_vertices") else None)
        for name, value in arrays.items():
            array = getattr(got, name)
            assert array.dtype == value.dtype and np.array_equal(array, value)
            assert array.tobytes() == getattr(plain, name).tobytes()
            assert not array.flags.writeable
            if size == 50:
                assert array.flags.aligned  # numpy's fast paths (a member's data in the file is not aligned)


def test_a_graph_layout_is_only_for_plain_graphs(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    src = np.arange(10)
    np.savez(path, src=src, dst=src)
    assert npzio.graph_layout(path) is None  # no weight
    np.savez(path, src=src, dst=src, weight=src, num_vertices=np.arange(2))
    assert npzio.graph_layout(path) is None and npzio.plain_graph(path) is None  # num_vertices not a scalar
    np.savez_compressed(path, src=src, dst=src, weight=src)
    assert npzio.graph_layout(path) is None
    path.write_bytes(b"not a zip")
    assert npzio.graph_layout(path) is None
    np.savez(path, src=src, dst=src, weight=src)
    layout = npzio.graph_layout(path)
    assert layout is not None
    with open(path, "ab") as f:
        f.write(b"more")
    with pytest.raises(OSError, match="changed after it was parsed"):
        npzio.map_layout(layout)
