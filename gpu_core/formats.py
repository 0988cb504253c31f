"""Readers for graph files: NumPy ``.npz``, ECL ``.egr``, Matrix Market, plain edge lists, DIMACS,
Arrow IPC and Parquet (the last two with the optional ``pyarrow``: the ``arrow`` extra).

Every reader returns an :class:`EdgeArrays` (``src``, ``dst``, ``weight``,
``num_vertices``) in input order, so the edge id of an edge is its position in
the file; the arrays are then validated by :class:`gpu_core.Graph`. Malformed
files raise :class:`gpu_core.errors.GraphValidationError` naming the problem.
"""

from __future__ import annotations

import functools
import io
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import GraphTooLargeError, GraphValidationError


@dataclass(frozen=True)
class EdgeArrays:
    src: np.ndarray[Any, Any]
    dst: np.ndarray[Any, Any]
    weight: np.ndarray[Any, Any]
    num_vertices: int | None


def _bad(fmt: str, detail: str) -> GraphValidationError:
    return GraphValidationError(f"not a valid {fmt} graph: {detail}", field="body")


#: archives that inflate to at most this many bytes are not held to a compression ratio
RATIO_FLOOR = 16 << 20
#: what a malformed archive raises while it is read (encrypted members: RuntimeError; unknown
#: compression methods: NotImplementedError)
_NPZ_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, RuntimeError)


def _check_decoded(
    what: str, inflated: int, body_size: int, max_inflated_bytes: int | None, max_ratio: float | None
) -> None:
    if max_inflated_bytes is not None and inflated > max_inflated_bytes:
        raise GraphTooLargeError(
            f"the {what} inflates to {inflated} bytes, more than the limit of {max_inflated_bytes}.",
            limit=max_inflated_bytes,
            actual=inflated,
        )
    if max_ratio is not None and inflated > RATIO_FLOOR and inflated > max_ratio * max(body_size, 1):
        raise GraphTooLargeError(
            f"the {what} of {body_size} bytes inflates to {inflated} bytes, more than "
            f"{max_ratio:g} times its size.",
            limit=int(max_ratio * max(body_size, 1)),
            actual=inflated,
        )


def check_npz_sizes(
    infos: list[zipfile.ZipInfo], body_size: int, max_inflated_bytes: int | None, max_ratio: float | None
) -> int:
    """The bytes an archive declares it inflates to, refused (GraphTooLargeError) past the caps.

    Reads only the central directory, so a zip bomb is refused before anything is inflated.
    """
    inflated = sum(info.file_size for info in infos)
    _check_decoded("npz archive", inflated, body_size, max_inflated_bytes, max_ratio)
    return inflated


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray[Any, Any]:
    """One ``.npy`` member, its header checked against the member's declared size before any
    allocation, and never more bytes inflated than declared (a lying header fails its CRC)."""
    name = info.filename[:-4]
    with archive.open(info) as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise _bad("npz", f"array {name!r} has .npy format version {version}; write 1.0 or 2.0")
        if dtype.hasobject or dtype.itemsize == 0:
            detail = f"array {name!r} has dtype {dtype}; objects are never unpickled; send numeric arrays"
            raise _bad("npz", detail)
        count = int(np.prod(shape, dtype=object))
        header = f.tell()
        if header + count * dtype.itemsize != info.file_size:
            raise _bad(
                "npz",
                f"array {name!r} announces shape {shape} of {dtype}, which does not match its "
                f"{info.file_size - header} data bytes",
            )
        array = np.empty(count, dtype=dtype)
        view = memoryview(array.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
        got = 0
        while got < view.nbytes:
            chunk = f.read(min(view.nbytes - got, 1 << 20))
            if not chunk:
                raise _bad("npz", f"array {name!r} ends early")
            view[got : got + len(chunk)] = chunk
            got += len(chunk)
        if f.read(1):  # zipfile never inflates past the declared size; checked all the same
            raise _bad("npz", f"array {name!r} inflates past its declared size")
    if fortran and len(shape) > 1:
        return array.reshape(shape[::-1]).T
    return array.reshape(shape)


def npz_arrays(
    data: bytes, *, max_inflated_bytes: int | None = None, max_ratio: float | None = None
) -> dict[str, np.ndarray[Any, Any]]:
    """Every ``<name>.npy`` member of an ``.npz`` archive, read as :func:`read_npz` reads them
    (caps checked first, never unpickled); other members are not read."""
    try:
        if data[:6] == b"\x93NUMPY":
            raise _bad("npz", "the body is a single .npy array; send an .npz archive (numpy.savez)")
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = [i for i in archive.infolist() if not i.is_dir()]
            check_npz_sizes(infos, len(data), max_inflated_bytes, max_ratio)
            return {i.filename[:-4]: _read_member(archive, i) for i in infos if i.filename.endswith(".npy")}
    except _NPZ_ERRORS as exc:
        if isinstance(exc, (GraphValidationError, GraphTooLargeError)):
            raise
        raise _bad("npz", str(exc) or type(exc).__name__) from None


def read_npz(
    data: bytes, *, max_inflated_bytes: int | None = None, max_ratio: float | None = None
) -> EdgeArrays:
    """An ``.npz`` archive with arrays ``src``, ``dst``, ``weight`` and optionally ``num_vertices``.

    Never unpickles. ``max_inflated_bytes`` and ``max_ratio`` (inflated bytes over the archive's
    size) cap what a compressed archive may inflate to: the declared sizes are checked before
    anything is inflated (GraphTooLargeError), and no member inflates past its declared size.
    """
    try:
        if data[:6] == b"\x93NUMPY":
            raise _bad("npz", "the body is a single .npy array; send an .npz archive (numpy.savez)")
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = [i for i in archive.infolist() if not i.is_dir()]
            check_npz_sizes(infos, len(data), max_inflated_bytes, max_ratio)
            members = {i.filename[:-4]: i for i in infos if i.filename.endswith(".npy")}
            missing = [k for k in ("src", "dst", "weight") if k not in members]
            if missing:
                raise _bad(
                    "npz", f"missing array(s) {', '.join(missing)}; found {', '.join(members) or 'none'}"
                )
            n = None
            if "num_vertices" in members:
                nv = _read_member(archive, members["num_vertices"])
                if nv.shape != () or nv.dtype.kind not in "iu":
                    raise _bad("npz", "'num_vertices' must be an integer scalar")
                n = int(nv)
            src, dst, weight = (_read_member(archive, members[k]) for k in ("src", "dst", "weight"))
            return EdgeArrays(src, dst, weight, n)
    except _NPZ_ERRORS as exc:
        if isinstance(exc, (GraphValidationError, GraphTooLargeError)):
            raise
        raise _bad("npz", str(exc) or type(exc).__name__) from None


def read_egr(data: bytes) -> EdgeArrays:
    """ECL's binary CSR: int32 ``n``, ``nnz``, ``row_ptr[n+1]``, ``col[nnz]``, optional int32 ``weight[nnz]``.

    Each undirected edge is stored in both rows; the entry with ``src < dst``
    (and every self-loop entry) becomes one edge, in CSR order.
    """
    words = np.frombuffer(data, dtype="<i4", count=len(data) // 4) if len(data) % 4 == 0 else None
    if words is None or words.size < 2:
        raise _bad("egr", "the file size must be a multiple of 4 bytes and hold a header")
    n, nnz = int(words[0]), int(words[1])
    if n < 0 or nnz < 0 or words.size not in (2 + n + 1 + nnz, 2 + n + 1 + 2 * nnz):
        raise _bad("egr", f"header says {n} vertices and {nnz} entries, which does not match the file size")
    row_ptr = words[2 : 3 + n].astype(np.int64)
    if row_ptr[0] != 0 or row_ptr[-1] != nnz or np.any(np.diff(row_ptr) < 0):
        raise _bad("egr", "the row pointers are not a non-decreasing sequence from 0 to nnz")
    col = words[3 + n : 3 + n + nnz].astype(np.int64)
    weight = words[3 + n + nnz :].copy() if words.size > 3 + n + nnz else np.ones(nnz, dtype=np.int32)
    row = np.repeat(np.arange(n, dtype=np.int64), np.diff(row_ptr))
    once = row <= col
    return EdgeArrays(row[once], col[once], weight[once], n)


def _text_columns(data: bytes, fmt: str, comments: str, skip_prefix: str | None = None) -> list[list[str]]:
    rows = []
    for lineno, raw in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in comments:
            continue
        rows.append([*line.split(), f"@{lineno}"])
    if skip_prefix is not None:
        rows = [r for r in rows if r[0] != skip_prefix]
    return rows


def _numbers(tokens: list[str], fmt: str, where: str) -> np.ndarray[Any, Any]:
    try:
        return np.array([int(t) for t in tokens], dtype=np.int64)
    except OverflowError:
        raise _bad(fmt, f"{where} must fit in int64 (or be written as decimals)") from None
    except ValueError:
        pass
    try:
        return np.array([float(t) for t in tokens], dtype=np.float64)
    except ValueError:
        raise _bad(fmt, f"{where} must be numbers") from None


def _columns(rows: list[list[str]], fmt: str, first: int, with_weight: bool) -> tuple[Any, Any, Any]:
    width = first + (3 if with_weight else 2)
    for r in rows:
        if len(r) - 1 < width:
            raise _bad(fmt, f"line {r[-1][1:]} has {len(r) - 1} fields, expected at least {width}")
    try:
        src = np.array([int(r[first]) for r in rows], dtype=np.int64)
        dst = np.array([int(r[first + 1]) for r in rows], dtype=np.int64)
    except (ValueError, OverflowError):
        raise _bad(fmt, "vertex ids must be integers within int64") from None
    if with_weight:
        weight = _numbers([r[first + 2] for r in rows], fmt, "weights")
    else:
        weight = np.ones(len(rows), dtype=np.int64)
    return src, dst, weight


def read_edgelist(data: bytes) -> EdgeArrays:
    """Text, one edge a line: ``src dst [weight]`` with 0-based ids; ``#`` or ``%`` starts a comment."""
    rows = _text_columns(data, "edgelist", "#%")
    with_weight = bool(rows) and len(rows[0]) - 1 >= 3
    src, dst, weight = _columns(rows, "edgelist", 0, with_weight)
    return EdgeArrays(src, dst, weight, None)


def read_mtx(data: bytes) -> EdgeArrays:
    """Matrix Market coordinate format (``general`` or ``symmetric``; ``pattern`` means weight 1), 1-based."""
    text = data.lstrip()
    if not text.startswith(b"%%MatrixMarket"):
        raise _bad("mtx", "the first line must start with %%MatrixMarket")
    banner = text.split(b"\n", 1)[0].decode("ascii", errors="replace").lower().split()
    if len(banner) < 5 or banner[1] != "matrix" or banner[2] != "coordinate":
        raise _bad("mtx", "only 'matrix coordinate' files describe graphs")
    field = banner[3]
    if field not in ("real", "integer", "pattern", "double"):
        raise _bad("mtx", f"field '{field}' is not supported (use real, integer or pattern)")
    rows = _text_columns(text, "mtx", "%")
    if not rows:
        raise _bad("mtx", "the size line is missing")
    size = rows[0]
    try:
        nrows, ncols, nnz = (int(t) for t in size[:3])
    except ValueError:
        raise _bad("mtx", "the size line must be 'rows cols entries'") from None
    if min(nrows, ncols, nnz) < 0:
        raise _bad("mtx", f"the size line '{nrows} {ncols} {nnz}' has a negative count")
    entries = rows[1:]
    if len(entries) != nnz:
        raise _bad("mtx", f"the size line announces {nnz} entries but the file has {len(entries)}")
    src, dst, weight = _columns(entries, "mtx", 0, field != "pattern")
    if field == "integer" and weight.dtype.kind == "f":
        raise _bad("mtx", "an 'integer' file holds non-integer values")
    return EdgeArrays(src - 1, dst - 1, weight, max(nrows, ncols))


def read_dimacs(data: bytes) -> EdgeArrays:
    """9th DIMACS challenge: ``p sp N M`` then ``a u v w`` arcs, 1-based; each arc becomes an edge."""
    rows = _text_columns(data, "dimacs", "c")
    problem = [r for r in rows if r[0] == "p"]
    if len(problem) != 1 or len(problem[0]) - 1 < 4:
        raise _bad("dimacs", "exactly one 'p sp N M' line is required")
    try:
        n, m = int(problem[0][2]), int(problem[0][3])
    except ValueError:
        raise _bad("dimacs", "the 'p' line must give the number of vertices and the number of arcs") from None
    if n < 0 or m < 0:
        raise _bad("dimacs", f"the 'p' line announces {n} vertices and {m} arcs; counts cannot be negative")
    arcs = [r for r in rows if r[0] == "a"]
    other = [r for r in rows if r[0] not in ("a", "p")]
    if other:
        raise _bad("dimacs", f"line {other[0][-1][1:]} starts with '{other[0][0]}', expected 'a', 'p' or 'c'")
    src, dst, weight = _columns(arcs, "dimacs", 1, True)
    return EdgeArrays(src - 1, dst - 1, weight, n)


# ---------------------------------------------------------------------------------------------
# Arrow IPC and Parquet: tables with columns src, dst, weight (pyarrow, optional)

#: exact conversions of Arrow column types the engine does not take as they are
_ARROW_WEIGHT_CASTS = {
    "int8": "int32",
    "int16": "int32",
    "uint8": "int32",
    "uint16": "int32",
    "uint32": "int64",
    "halffloat": "float32",
    "float16": "float32",
}


@functools.cache
def pyarrow_available() -> bool:
    """True when ``pyarrow`` can be imported (Arrow and Parquet uploads need it); asked once."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def _pyarrow(fmt: str) -> Any:
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise GraphValidationError(
            f"{fmt} files need pyarrow, which is not installed here (pip install 'mst-service[arrow]').",
            field="format",
        ) from None
    return pyarrow


def _table_column(pa: Any, table: Any, name: str, fmt: str, weight: bool) -> np.ndarray[Any, Any]:
    column = table.column(name)
    if column.null_count:
        first = next(i for i, v in enumerate(column.is_null().to_pylist()) if v)
        raise GraphValidationError(
            f"not a valid {fmt} graph: column {name!r} has null values (the first at row {first})",
            field=name,
            index=first,
        )
    kind = str(column.type)
    if weight and kind in _ARROW_WEIGHT_CASTS:
        column = column.cast(_ARROW_WEIGHT_CASTS[kind])
    elif weight and kind == "uint64":
        wide: np.ndarray[Any, Any] = column.to_numpy()
        if wide.size and int(wide.max()) > 2**63 - 1:
            raise _bad(fmt, "column 'weight' holds uint64 values beyond int64")
        return wide.astype(np.int64)
    elif not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
        raise _bad(fmt, f"column {name!r} has type {kind}; it must hold numbers")
    values: np.ndarray[Any, Any] = column.to_numpy()
    return values


def _from_table(pa: Any, table: Any, fmt: str) -> EdgeArrays:
    missing = [c for c in ("src", "dst", "weight") if c not in table.column_names]
    if missing:
        raise _bad(
            fmt,
            f"missing column(s) {', '.join(missing)}; found {', '.join(table.column_names) or 'none'}",
        )
    n = None
    metadata = table.schema.metadata or {}
    if b"num_vertices" in metadata:
        try:
            n = int(metadata[b"num_vertices"])
        except ValueError:
            raise _bad(fmt, "the schema metadata 'num_vertices' must be an integer") from None
    src, dst, weight = (_table_column(pa, table, c, fmt, c == "weight") for c in ("src", "dst", "weight"))
    return EdgeArrays(src, dst, weight, n)


def read_arrow(data: bytes) -> EdgeArrays:
    """Arrow IPC: a stream (or a file) of record batches with columns ``src``, ``dst``, ``weight``.

    Integer weights narrower than 32 bits become int32, uint32 int64, float16 float32 (exact);
    ``num_vertices`` may be given in the schema metadata. Nulls are refused.
    """
    pa = _pyarrow("arrow")
    try:
        if data[:6] == b"ARROW1":
            table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
        else:
            table = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise _bad("arrow", str(exc)) from None
    return _from_table(pa, table, "arrow")


def read_parquet(
    data: bytes, *, max_inflated_bytes: int | None = None, max_ratio: float | None = None
) -> EdgeArrays:
    """Parquet with columns ``src``, ``dst``, ``weight`` (as :func:`read_arrow`).

    The caps work as for :func:`read_npz`, on what the columns decode to (rows times 8 bytes per
    column, from the file's metadata) before anything is decoded: dictionary and run-length
    encodings let a small file announce billions of rows.
    """
    pa = _pyarrow("parquet")
    try:
        metadata = pa.parquet.ParquetFile(pa.BufferReader(data)).metadata
        decoded = int(metadata.num_rows) * 8 * int(metadata.num_columns)
        _check_decoded("parquet file", decoded, len(data), max_inflated_bytes, max_ratio)
        table = pa.parquet.read_table(pa.BufferReader(data))
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise _bad("parquet", str(exc)) from None
    return _from_table(pa, table, "parquet")


#: upload formats and their readers
FORMATS: dict[str, Callable[[bytes], EdgeArrays]] = {
    "npz": read_npz,
    "egr": read_egr,
    "mtx": read_mtx,
    "edgelist": read_edgelist,
    "dimacs": read_dimacs,
    "arrow": read_arrow,
    "parquet": read_parquet,
}


def read_graph(
    data: bytes, format: str, *, max_inflated_bytes: int | None = None, max_ratio: float | None = None
) -> EdgeArrays:
    """Parse a graph file of one of :data:`FORMATS`; the caps apply to what npz and parquet
    files decode to (see :func:`read_npz`, :func:`read_parquet`)."""
    try:
        reader = FORMATS[format]
    except KeyError:
        raise GraphValidationError(
            f"unknown graph format {format!r}; use one of {', '.join(FORMATS)}.", field="format"
        ) from None
    if reader is read_npz or reader is read_parquet:
        return reader(data, max_inflated_bytes=max_inflated_bytes, max_ratio=max_ratio)
    return reader(data)
