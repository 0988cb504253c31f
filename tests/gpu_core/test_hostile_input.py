"""Hostile files and graphs: refused with a typed error before they cost memory, never unpickled.

Zip bombs, npy headers that lie about their size, lying zip directories, objects in archives,
text headers announcing absurd counts, and vertex counts past the 32-bit index (both backends).
"""

from __future__ import annotations

import io
import struct
import tracemalloc
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpu_core
from gpu_core import Backend
from gpu_core.errors import GraphTooLargeError, GraphValidationError
from gpu_core.formats import RATIO_FLOOR, read_graph, read_npz
from tests.utils.backends import BACKENDS

MiB = 1 << 20


def npy(array: np.ndarray[Any, Any]) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array, allow_pickle=False)
    return buf.getvalue()


def archive(members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in members.items():
            z.writestr(f"{name}.npy", data)
    return buf.getvalue()


def bomb(inflated_bytes: int) -> bytes:
    """An npz whose ``src`` member is ``inflated_bytes`` of zeros (deflate: about 1000x smaller)."""
    zeros = np.zeros(inflated_bytes // 8, dtype=np.int64)
    return archive({"src": npy(zeros), "dst": npy(zeros[:1]), "weight": npy(zeros[:1])})


def peak_bytes(work: Any) -> int:
    """The peak of Python-tracked allocations (NumPy's included) while ``work()`` runs."""
    tracemalloc.start()
    try:
        work()
    except Exception:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_a_zip_bomb_is_refused_by_its_ratio_before_inflating() -> None:
    data = bomb(256 * MiB)
    assert len(data) < MiB  # a quarter GiB of zeros in a few hundred kB
    with pytest.raises(GraphTooLargeError) as info:
        read_npz(data, max_inflated_bytes=1 << 40, max_ratio=100)
    assert "inflates to" in info.value.message and "100 times its size" in info.value.message
    assert info.value.actual is not None and info.value.actual > 256 * MiB
    assert peak_bytes(lambda: read_npz(data, max_ratio=100)) < 4 * MiB  # nothing was inflated


def test_the_inflated_size_cap_holds_whatever_the_ratio() -> None:
    data = bomb(32 * MiB)
    with pytest.raises(GraphTooLargeError) as info:
        read_npz(data, max_inflated_bytes=16 * MiB)
    assert info.value.limit == 16 * MiB
    assert "more than the limit of 16777216" in info.value.message


def test_small_archives_are_not_held_to_the_ratio() -> None:
    """A compressed npz of a small all-ones graph compresses far better than 100x; it is fine."""
    n = 10_000
    src = np.arange(n - 1, dtype=np.int64)
    data = archive({"src": npy(src), "dst": npy(src + 1), "weight": npy(np.ones(n - 1, dtype=np.int64))})
    assert sum(i.file_size for i in zipfile.ZipFile(io.BytesIO(data)).infolist()) < RATIO_FLOOR
    edges = read_npz(data, max_inflated_bytes=MiB, max_ratio=1.5)
    assert edges.src.tolist() == src.tolist() and int(edges.weight.sum()) == n - 1


def test_an_npy_header_that_lies_about_its_shape_is_refused_before_allocating() -> None:
    buf = io.BytesIO()  # 2**37 int64 (1 TiB) announced, 16 bytes of data
    np.lib.format.write_array_header_1_0(buf, {"descr": "<i8", "fortran_order": False, "shape": (1 << 37,)})
    lying = buf.getvalue() + bytes(16)
    data = archive({"src": lying, "dst": npy(np.zeros(1)), "weight": npy(np.zeros(1))})
    with pytest.raises(GraphValidationError) as info:
        read_npz(data)
    assert "does not match" in info.value.message and "'src'" in info.value.message


def _lie_about_size(data: bytes, name: bytes, size: int, crc: int) -> bytes:
    """Rewrite the sizes and CRC the local header and central directory give member ``name``."""
    out = bytearray(data)
    for sig, crc_at, usize_at, name_at in ((b"PK\x03\x04", 14, 22, 30), (b"PK\x01\x02", 16, 24, 46)):
        start = out.find(sig)
        while start >= 0:
            if out[start + name_at : start + name_at + len(name)] == name:
                struct.pack_into("<L", out, start + crc_at, crc)
                struct.pack_into("<L", out, start + usize_at, size)
            start = out.find(sig, start + 1)
    return bytes(out)


def test_a_member_never_inflates_past_its_declared_size() -> None:
    """The directory says 1 kB; the deflate stream holds 256 MiB. Only the declared bytes come out."""
    small = npy(np.zeros(100, dtype=np.int8))
    stream = small + bytes(256 * MiB)
    data = archive({"src": stream, "dst": npy(np.zeros(100, dtype=np.int8)), "weight": npy(np.ones(100))})
    data = _lie_about_size(data, b"src.npy", len(small), zlib.crc32(small))
    edges = read_npz(data)
    assert edges.src.shape == (100,)
    assert peak_bytes(lambda: read_npz(data)) < 4 * MiB


def test_a_lying_crc_is_an_invalid_graph() -> None:
    small = npy(np.zeros(100, dtype=np.int64))
    data = archive({"src": small, "dst": small, "weight": small})
    data = _lie_about_size(data, b"src.npy", len(small), zlib.crc32(small) ^ 1)
    with pytest.raises(GraphValidationError, match=r"CRC|crc"):
        read_npz(data)


class _Trap:
    """Unpickling it would create the file ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


def test_object_arrays_are_never_unpickled(tmp_path: Path) -> None:
    trap = tmp_path / "unpickled"
    objects = np.array([_Trap(str(trap))], dtype=object)
    buf = io.BytesIO()
    np.lib.format.write_array(buf, objects, allow_pickle=True)
    assert b"unpickled" in buf.getvalue()  # the payload really is a pickle
    ok = npy(np.zeros(1, dtype=np.int64))
    for method in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        data = archive({"src": ok, "dst": ok, "weight": buf.getvalue()}, method)
        with pytest.raises(GraphValidationError, match="never unpickled"):
            read_graph(data, "npz")
    assert not trap.exists()


def test_encrypted_and_unknown_compression_members_are_invalid_graphs() -> None:
    ok = npy(np.zeros(1, dtype=np.int64))
    data = bytearray(archive({"src": ok, "dst": ok, "weight": ok}, zipfile.ZIP_STORED))
    encrypted = bytes(data).replace(
        b"PK\x01\x02\x14\x03\x14\x00\x00\x00", b"PK\x01\x02\x14\x03\x14\x00\x01\x00", 1
    )
    unknown = bytearray(data)
    central = unknown.find(b"PK\x01\x02")
    struct.pack_into("<H", unknown, central + 10, 99)  # compression method 99 (AES)
    struct.pack_into("<H", unknown, 8, 99)
    for body in (encrypted, bytes(unknown)):
        with pytest.raises(GraphValidationError, match="not a valid npz graph"):
            read_npz(body)


def test_a_single_npy_body_is_named() -> None:
    with pytest.raises(GraphValidationError, match=r"single \.npy array"):
        read_npz(npy(np.zeros(3)))


def test_members_that_are_not_arrays_are_named() -> None:
    data = archive({"src": b"not an npy file", "dst": b"", "weight": b""})
    with pytest.raises(GraphValidationError, match="not a valid npz graph"):
        read_npz(data)


@pytest.mark.parametrize(
    ("fmt", "body", "fragment"),
    [
        ("mtx", b"%%MatrixMarket matrix coordinate integer general\n-5 -5 -1\n1 2 3\n", "negative count"),
        ("mtx", b"%%MatrixMarket matrix coordinate integer general\n3 3 1000000000000\n1 2 3\n", "announces"),
        ("dimacs", b"p sp -4 1\na 1 2 3\n", "cannot be negative"),
        ("dimacs", b"p sp 4 -1\na 1 2 3\n", "cannot be negative"),
        ("egr", np.array([10**9, 10**9], dtype="<i4").tobytes(), "does not match the file size"),
        ("egr", np.array([-1, 0], dtype="<i4").tobytes(), "does not match the file size"),
        ("edgelist", b"0 " + b"9" * 10_000 + b" 1\n", "vertex ids must be integers within int64"),
    ],
)
def test_text_headers_that_lie_are_refused_without_allocating(fmt: str, body: bytes, fragment: str) -> None:
    with pytest.raises(GraphValidationError) as info:
        read_graph(body, fmt)
    assert fragment in info.value.message


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("fmt", "body"),
    [
        ("mtx", b"%%MatrixMarket matrix coordinate integer general\n1000000000000 2 1\n1 2 3\n"),
        ("dimacs", b"p sp 1099511627776 1\na 1 2 3\n"),
        ("edgelist", b"0 1099511627776 1\n"),
    ],
)
def test_a_huge_vertex_count_from_a_header_is_too_large(backend: Backend, fmt: str, body: bytes) -> None:
    edges = read_graph(body, fmt)
    with pytest.raises(GraphTooLargeError) as info:
        gpu_core.Graph(edges.src, edges.dst, edges.weight, edges.num_vertices, backend=backend)
    assert info.value.limit == gpu_core.MAX_VERTICES == 2**31 - 1
    assert info.value.actual is not None and info.value.actual > 2**31


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [2**31, 2**40, 2**63 - 1])
def test_more_vertices_than_32_bits_index_are_refused_before_allocating(backend: Backend, n: int) -> None:
    one = np.array([0])
    with pytest.raises(GraphTooLargeError) as info:
        gpu_core.Graph(one, one + 1, np.array([1.0]), n, backend=backend)
    # measured on the second try: CuPy's first reductions load their kernels
    peak = peak_bytes(lambda: gpu_core.Graph(one, one + 1, np.array([1.0]), n, backend=backend))
    assert (info.value.limit, info.value.actual) == (2**31 - 1, n)
    assert f"got {n}" in info.value.message or str(n) in info.value.message
    assert peak < MiB


def test_the_largest_vertex_count_is_accepted() -> None:
    """2**31 - 1 vertices is the limit itself (built on the CPU, not computed: that needs 8 GiB)."""
    graph = gpu_core.Graph(np.array([0]), np.array([1]), np.array([1.0]), 2**31 - 1, backend="cpu")
    assert graph.num_vertices == 2**31 - 1


def test_a_parquet_bomb_is_refused_before_decoding() -> None:
    """20 million rows of zeros: a few hundred kB of zstd-compressed, dictionary-encoded columns."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    zeros = np.zeros(20_000_000, dtype=np.int64)
    buf = io.BytesIO()
    pq.write_table(pa.table({"src": zeros, "dst": zeros, "weight": zeros}), buf, compression="zstd")
    data = buf.getvalue()
    assert len(data) < 4 * MiB
    with pytest.raises(GraphTooLargeError, match="parquet file") as info:
        read_graph(data, "parquet", max_inflated_bytes=1 << 40, max_ratio=100)
    assert info.value.actual == 20_000_000 * 24
    with pytest.raises(GraphTooLargeError, match="more than the limit of 1000000"):
        read_graph(data, "parquet", max_inflated_bytes=1_000_000)
    small = io.BytesIO()
    pq.write_table(pa.table({"src": zeros[:10], "dst": zeros[:10] + 1, "weight": zeros[:10]}), small)
    assert read_graph(small.getvalue(), "parquet", max_inflated_bytes=MiB, max_ratio=1.5).src.shape == (10,)
