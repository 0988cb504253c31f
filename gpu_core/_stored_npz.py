"""The arrays of a stored (uncompressed) ``.npz`` archive, found in its bytes where they lie.

``numpy.load`` reads an archive through :mod:`zipfile` and a Python file object per member, a
cost a service's small requests feel (docs/performance.md). Here each ``.npy`` member is located
from its zip entry, its CRC-32 checked (zlib-ng: SIMD, the same checksum as :func:`zlib.crc32`),
its header parsed (each distinct header once) and its data taken where it lies. Anything that is
not that simple (compressed or encrypted members, zip64 records, an archive comment, object arrays,
Fortran-ordered matrices, format 3.0 headers) answers None, and the caller falls back to
``numpy.load``, whose errors then say what is wrong.

The service's spool reads its files with it (:mod:`service.storage.npzio`, which writes them with
the same records), and the bundled client the forests it downloads (:mod:`service.client`).
"""

from __future__ import annotations

import functools
import io
import math
import struct
from typing import Any

import numpy as np
from zlib_ng.zlib_ng import crc32

__all__ = [
    "CENTRAL_ENTRY",
    "END_RECORD",
    "LOCAL_HEADER",
    "UNSUPPORTED_FLAGS",
    "member_layout",
    "read_npy_header",
    "stored_npz",
]

LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # a member's local file header (30 bytes)
CENTRAL_ENTRY = struct.Struct("<4s4B4HL2L5H2L")  # a member's central directory entry (46 bytes)
END_RECORD = struct.Struct("<4s4H2LH")  # end of central directory (22 bytes)
_ZIP64_LOCATOR_SIZE = 20  # the zip64 end of central directory locator, right before the end record
_STORED = 0  # zipfile.ZIP_STORED
_MAX_VERSION = 63  # zipfile.MAX_EXTRACT_VERSION: it refuses members that need a later one
#: flags of members zipfile refuses (or asks a password for): encrypted, compressed patched data,
#: strong encryption
UNSUPPORTED_FLAGS = 0x1 | 0x20 | 0x40


def read_npy_header(head: bytes) -> tuple[tuple[int, ...], bool, np.dtype[Any], int] | None:
    """(shape, fortran order, dtype, offset of the data) of an ``.npy`` header, None if it is not one.

    The header's dictionary is parsed by numpy (``ast.literal_eval``, slow beside the rest);
    requests of one kind repeat the same few headers, so the parse of each distinct header is kept.
    """
    if len(head) < 10 or head[:6] != b"\x93NUMPY" or head[6:8] not in (b"\x01\x00", b"\x02\x00"):
        return None
    fixed = 10 if head[6] == 1 else 12
    if len(head) < fixed:
        return None
    length = int.from_bytes(head[8:fixed], "little")
    if fixed + length > len(head):
        return None
    parsed = _parse_npy_header(head[: fixed + length])
    return None if parsed is None else (*parsed, fixed + length)


@functools.lru_cache(maxsize=256)
def _parse_npy_header(head: bytes) -> tuple[tuple[int, ...], bool, np.dtype[Any]] | None:
    fp = io.BytesIO(head)
    try:
        version = np.lib.format.read_magic(fp)
        reader = (
            np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        )
        shape, fortran, dtype = reader(fp)
    except ValueError:
        return None
    return tuple(int(x) for x in shape), bool(fortran), dtype


def member_layout(
    view: memoryview, header_offset: int, name: bytes, size: int, crc: int
) -> tuple[int, np.dtype[Any], tuple[int, ...]] | None:
    """(offset of the data in the archive, dtype, shape) of one stored ``.npy`` member whose local
    header is at ``header_offset`` (named ``name``, ``size`` bytes, CRC-32 ``crc``, as its zip
    entry says), or None when it is not that simple, its local header disagrees or its CRC does
    not check (what :mod:`zipfile` checks when it opens a member)."""
    if header_offset + LOCAL_HEADER.size > len(view):
        return None
    sig, *_, name_len, extra_len = LOCAL_HEADER.unpack_from(view, header_offset)
    named = header_offset + LOCAL_HEADER.size
    if sig != b"PK\x03\x04" or bytes(view[named : named + name_len]) != name:
        return None
    begin = named + name_len + extra_len
    end = begin + size
    if end > len(view):
        return None
    member = view[begin:end]
    if crc32(member) != crc:
        return None
    parsed = read_npy_header(bytes(member[: min(len(member), 1 << 16)]))  # the header only
    if parsed is None:
        return None
    shape, fortran, dtype, offset = parsed
    if dtype.hasobject or (fortran and len(shape) > 1):
        return None
    if offset + math.prod(shape) * dtype.itemsize != len(member):
        return None
    return begin + offset, dtype, shape


def stored_npz(data: bytes | bytearray | memoryview) -> dict[str, np.ndarray[Any, Any]] | None:
    """Every member of a stored ``.npz`` archive held in memory, each an array of its own (aligned,
    writable: as ``numpy.load`` gives them), or None where ``numpy.load`` must decide.

    Narrower than :mod:`zipfile` on purpose: an archive it reads, zipfile reads the same; one with
    anything zipfile would read another way or refuse (bytes before the archive, a zip64 locator,
    extra fields in the directory, flags or versions it does not implement) is left to it.
    """
    view = memoryview(data).cast("B")
    end = len(view) - END_RECORD.size
    if end < 0:
        return None
    sig, _, _, _, count, directory_size, directory, comment = END_RECORD.unpack_from(view, end)
    if sig != b"PK\x05\x06" or comment or directory + directory_size != end:
        return None
    locator = end - _ZIP64_LOCATOR_SIZE
    if locator >= 0 and bytes(view[locator : locator + 4]) == b"PK\x06\x07":
        return None
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    at = directory
    while at < end:
        if at + CENTRAL_ENTRY.size > end:
            return None
        (sig, _, _, version, _, flags, method, _, _, crc, packed, size, name_len, extra_len, note_len,
         _, _, _, header_offset) = CENTRAL_ENTRY.unpack_from(view, at)  # fmt: skip
        if sig != b"PK\x01\x02" or extra_len or version > _MAX_VERSION or flags & UNSUPPORTED_FLAGS:
            return None
        if method != _STORED or packed != size:
            return None
        raw_name = bytes(view[at + CENTRAL_ENTRY.size : at + CENTRAL_ENTRY.size + name_len])
        try:
            name = raw_name.decode("utf-8" if flags & 0x800 else "cp437")
        except UnicodeDecodeError:
            return None
        at += CENTRAL_ENTRY.size + name_len + note_len
        if not name.endswith(".npy") or name[:-4] in arrays:
            return None
        layout = member_layout(view, header_offset, raw_name, size, crc)
        if layout is None:
            return None
        offset, dtype, shape = layout
        found = np.frombuffer(view, dtype=dtype, count=math.prod(shape), offset=offset)
        arrays[name[:-4]] = found.reshape(shape).copy()
    if at != end or len(arrays) != count:
        return None
    return arrays
