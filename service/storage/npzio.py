"""Fast ``.npz`` input and output for the spool: stored (uncompressed) zip archives of ``.npy`` members.

:func:`numpy.savez` goes through :mod:`zipfile`, which costs most of a
millisecond even for a few kilobytes, and :func:`numpy.load` of an archive
reads each member through a Python file object in 256 KiB pieces. Both are
on the hot paths of the service (a result per job, a graph per upload), so:

* :func:`write_npz` writes the same archive :func:`numpy.savez` writes
  (stored members ``<name>.npy`` in format 1.0, CRC-32 checked by any zip
  reader), straight from the arrays' buffers;
* :func:`read_npz` maps a stored archive into memory (read-only, pages
  populated in one go: page faults one by one cost more than a copy) and
  returns its arrays as read-only views of that map, checking each member's
  CRC-32 as :mod:`zipfile` does. It answers ``None``
  for anything it does not handle (compressed members, other names, format
  3.0 headers, Fortran-ordered matrices, object arrays...), and the caller then
  falls back to :func:`numpy.load`, so errors read the same as before.

CRC-32 comes from zlib-ng (SIMD): the same checksum as :func:`zlib.crc32`,
an order of magnitude faster, which matters as every result and every upload is
checksummed once.
"""

from __future__ import annotations

import io
import math
import mmap
import os
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
from zlib_ng.zlib_ng import crc32

from gpu_core._stored_npz import CENTRAL_ENTRY, END_RECORD, LOCAL_HEADER, UNSUPPORTED_FLAGS, member_layout
from gpu_core.formats import EdgeArrays

from .spool import start_write_out

_LIMIT = 0xFFFFFFFF  # beyond this an archive needs zip64 records: left to numpy.savez
_VERSION = 20  # 2.0: what zipfile writes for stored members without zip64
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux
#: files up to this size are read rather than mapped (a map's set-up and tear-down cost more)
_READ_LIMIT = 4 << 20


def _npy_header(array: np.ndarray[Any, Any]) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, np.lib.format.header_data_from_array_1_0(array))
    return buf.getvalue()


def _contiguous(value: Any) -> np.ndarray[Any, Any]:
    array = np.asarray(value)
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)  # keeps 0-d arrays 0-d


def _dos_time() -> tuple[int, int]:
    t = time.localtime()
    date = (t.tm_year - 1980) << 9 | t.tm_mon << 5 | t.tm_mday
    return date, t.tm_hour << 11 | t.tm_min << 5 | t.tm_sec // 2


def write_npz(fileobj: BinaryIO, arrays: Mapping[str, Any]) -> None:
    """Write ``arrays`` as an uncompressed ``.npz`` archive (what :func:`numpy.savez` writes)."""
    prepared = {name: _contiguous(a) for name, a in arrays.items()}
    try:
        if any(a.dtype.hasobject for a in prepared.values()):
            raise ValueError("object arrays")
        headers = {name: _npy_header(a) for name, a in prepared.items()}
        if sum(a.nbytes + len(headers[name]) + 200 for name, a in prepared.items()) >= _LIMIT:
            raise ValueError("needs zip64")
    except ValueError:  # object arrays, huge headers, or big enough to need zip64 records
        np.savez(fileobj, **prepared)  # type: ignore[arg-type]
        return
    date, clock = _dos_time()
    central: list[bytes] = []
    offset = 0
    for name, array in prepared.items():
        member = f"{name}.npy".encode()
        header = headers[name]
        data = memoryview(array.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
        crc = crc32(data, crc32(header))
        size = len(header) + data.nbytes
        local = LOCAL_HEADER.pack(
            b"PK\x03\x04", _VERSION, 0, 0, 0, clock, date, crc, size, size, len(member), 0
        )
        fileobj.write(local + member + header)
        fileobj.write(data)
        central.append(
            CENTRAL_ENTRY.pack(
                b"PK\x01\x02",
                _VERSION,
                3,
                _VERSION,
                0,
                0,
                0,
                clock,
                date,
                crc,
                size,
                size,
                len(member),
                0,
                0,
                0,
                0,
                0o600 << 16,
                offset,
            )
            + member
        )
        offset += len(local) + len(member) + size
    directory = b"".join(central)
    end = END_RECORD.pack(b"PK\x05\x06", 0, 0, len(central), len(central), len(directory), offset, 0)
    fileobj.write(directory + end)


def write_npz_file(
    path: str | os.PathLike[str], arrays: Mapping[str, Any], *, sync: bool = False, write_out: bool = False
) -> None:
    """:func:`write_npz` to a new file at ``path``; with ``sync``, fsynced before it is closed.

    ``write_out``: hand the file to the disk now, without waiting (Linux's ``sync_file_range``).
    Results are not fsynced, but a stream of large ones left to the kernel's write-back piles up
    gigabytes of dirty pages, and every fsync of the file system (an upload's, SQLite's) then
    waits for them: an upload's ``durable`` step stalls for seconds under load.
    """
    with open(path, "wb") as f:
        write_npz(f, arrays)
        if sync or write_out:
            f.flush()
        if sync:
            os.fsync(f.fileno())
        elif write_out:
            start = start_write_out()
            if start is not None:
                start(f.fileno(), 0, 0)  # 0 bytes: to the end of the file


def map_file(fd: int, size: int) -> mmap.mmap:
    """A read-only shared map of ``size`` bytes of an open file, its pages populated up front."""
    return mmap.mmap(fd, size, flags=mmap.MAP_SHARED | _POPULATE, prot=mmap.PROT_READ)


def _member_layout(
    view: memoryview, info: zipfile.ZipInfo
) -> tuple[int, np.dtype[Any], tuple[int, ...]] | None:
    """(offset of the data in the archive, dtype, shape) of one stored ``.npy`` member whose CRC-32
    checks (:func:`gpu_core._stored_npz.member_layout`), or None when it is not that simple."""
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & UNSUPPORTED_FLAGS:
        return None
    name = info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437")
    return member_layout(view, info.header_offset, name, info.file_size, info.CRC)


def _member(view: memoryview, info: zipfile.ZipInfo) -> np.ndarray[Any, Any] | None:
    """One stored ``.npy`` member as a view of the mapped archive, or None when it is not that simple."""
    layout = _member_layout(view, info)
    if layout is None:
        return None
    offset, dtype, shape = layout
    return np.frombuffer(view, dtype=dtype, count=math.prod(shape), offset=offset).reshape(shape)


@dataclass(frozen=True)
class GraphLayout:
    """Where the arrays of a plain graph ``.npz`` lie in its file, found (and CRC-checked) once.

    :func:`plain_graph` finds it (:func:`graph_layout`), then takes the arrays at these offsets
    (:func:`map_layout`) without reading or checking the archive again. The file must not change
    in between.
    """

    path: str
    #: ``(offset, dtype, shape)`` of ``src``, ``dst`` and ``weight``
    src: tuple[int, str, tuple[int, ...]]
    dst: tuple[int, str, tuple[int, ...]]
    weight: tuple[int, str, tuple[int, ...]]
    num_vertices: int | None
    size: int


def graph_layout(path: str | os.PathLike[str]) -> GraphLayout | None:
    """The :class:`GraphLayout` of a plain graph ``.npz`` (what :func:`plain_graph` takes); None
    for anything else."""
    with open(path, "rb") as f:
        try:
            with zipfile.ZipFile(f) as archive:
                names = archive.infolist()
        except Exception:
            return None
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return None
        if size <= _READ_LIMIT:
            f.seek(0)
            view = memoryview(f.read())
        else:
            view = memoryview(map_file(f.fileno(), size))
    found: dict[str, tuple[int, np.dtype[Any], tuple[int, ...]]] = {}
    for info in names:  # every member checked, as read_npz does (what plain_graph takes, no more)
        name = info.filename[:-4]
        if not info.filename.endswith(".npy") or name in found:
            return None
        member = _member_layout(view, info)
        if member is None:
            return None
        found[name] = member
    if any(name not in found for name in ("src", "dst", "weight")):
        return None
    nv_value: int | None = None
    if "num_vertices" in found:
        offset, dtype, shape = found["num_vertices"]
        if shape != () or dtype.kind not in "iu":
            return None
        nv_value = int(np.frombuffer(view, dtype=dtype, count=1, offset=offset)[0])
    src, dst, weight = ((found[k][0], found[k][1].str, found[k][2]) for k in ("src", "dst", "weight"))
    return GraphLayout(str(path), src, dst, weight, nv_value, size)


def map_layout(layout: GraphLayout) -> EdgeArrays:
    """The edges a :class:`GraphLayout` describes: a small file's arrays read into arrays of their
    own (aligned: a member's data in the archive is not, and unaligned arrays take numpy's slow
    paths; and a map's set-up and tear-down cost more than the copy), a large one's as read-only
    views of the mapped file."""
    with open(layout.path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        if size != layout.size:
            raise OSError(f"{layout.path} changed after it was parsed: {size} bytes, not {layout.size}")
        if size > _READ_LIMIT:
            data = map_file(f.fileno(), size)
            src, dst, weight = (_view(data, member) for member in (layout.src, layout.dst, layout.weight))
        else:
            src, dst, weight = (_read_array(f, member) for member in (layout.src, layout.dst, layout.weight))
    return EdgeArrays(src, dst, weight, layout.num_vertices)


def _view(data: mmap.mmap, member: tuple[int, str, tuple[int, ...]]) -> np.ndarray[Any, Any]:
    offset, dtype, shape = member
    return np.frombuffer(data, dtype=np.dtype(dtype), count=math.prod(shape), offset=offset).reshape(shape)


def _read_array(f: Any, member: tuple[int, str, tuple[int, ...]]) -> np.ndarray[Any, Any]:
    offset, dtype, shape = member
    array = np.empty(shape, dtype=np.dtype(dtype))
    if array.nbytes:
        f.seek(offset)
        if f.readinto(array.data.cast("B")) != array.nbytes:
            raise OSError(f"{f.name} is shorter than its layout says")
    array.flags.writeable = False
    return array


def plain_graph(path: str | os.PathLike[str]) -> EdgeArrays | None:
    """The edges of a plain graph ``.npz`` (``src``, ``dst``, ``weight``, optionally an integer
    ``num_vertices``); None for anything else (the engine's reader decides and words it). A small
    file's arrays are read into arrays of their own (aligned, see :func:`map_layout`), a large
    one's are views of the mapped file."""
    if os.stat(path).st_size <= _READ_LIMIT:
        layout = graph_layout(path)
        return None if layout is None else map_layout(layout)
    arrays = read_npz(path, ("src", "dst", "weight"))
    if arrays is None:
        return None
    nv = arrays.get("num_vertices")
    if nv is not None and not (nv.shape == () and nv.dtype.kind in "iu"):
        return None
    return EdgeArrays(arrays["src"], arrays["dst"], arrays["weight"], None if nv is None else int(nv))


def read_npz(
    path: str | os.PathLike[str], required: tuple[str, ...]
) -> dict[str, np.ndarray[Any, Any]] | None:
    """The arrays of a stored ``.npz`` file, mapped read-only; None where numpy.load must decide.

    ``required`` members must all be there (``<name>.npy``); every member must be
    a plain array. The map lives as long as the arrays do.
    """
    with open(path, "rb") as f:
        try:
            with zipfile.ZipFile(f) as archive:
                names = archive.infolist()
        except Exception:  # not a zip archive numpy.load would take: it says why
            return None
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return None
        mapped = map_file(f.fileno(), size)
    view = memoryview(mapped)
    out: dict[str, np.ndarray[Any, Any]] = {}
    for info in names:
        if not info.filename.endswith(".npy") or info.filename[:-4] in out:
            return None
        array = _member(view, info)
        if array is None:
            return None
        out[info.filename[:-4]] = array
    if any(name not in out for name in required):
        return None
    return out
