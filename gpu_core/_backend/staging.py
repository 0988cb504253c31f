"""Host and device copies through pinned memory: an ``.npy`` file straight to a device array,
and device arrays to NumPy arrays in pinned memory.

``cupy.asarray(np.load(path, mmap_mode="r"))`` copies the file's pages into one pinned buffer
(faulting the mapping in page by page), then to the device. Here the file is read in pieces into
two pinned buffers in turn, each sent to the device while the next is read; the copy out of the
page cache is then the limit, and one core's, so a few readers share the pieces, each with its
own two buffers and its own stream (figures: docs/performance.md).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import GraphValidationError

#: bytes per piece (larger pieces read no faster)
PIECE = 8 << 20
#: readers at most (threads: each read and copy call releases the GIL)
READERS = 4


def read_npy_header(f: Any) -> tuple[tuple[int, ...], np.dtype[Any], int]:
    """Shape, dtype and data size in the file of a C-ordered ``.npy`` of plain numbers, from an
    open binary file (left at its data). Raises :class:`~gpu_core.errors.GraphValidationError`."""
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    except (ValueError, EOFError) as exc:
        raise GraphValidationError(f"not a valid .npy file: {exc}", field="body") from None
    if dtype.hasobject or dtype.kind not in "biuf":
        raise GraphValidationError(f"the .npy holds {dtype}, not numbers.", field="body")
    if fortran and len(shape) > 1:
        raise GraphValidationError("the .npy is in Fortran order; send a C-ordered array.", field="body")
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    left = os.fstat(f.fileno()).st_size - f.tell()
    if left != nbytes:
        raise GraphValidationError(
            f"the .npy's header says {nbytes} bytes of data, the file has {left}.", field="body"
        )
    return shape, dtype, nbytes


def npy_to_device(path: str | os.PathLike[str]) -> Any:
    """The array of the ``.npy`` at ``path`` as a CuPy array on the current device.

    Raises :class:`~gpu_core.errors.GraphValidationError` for a file that is not a ``.npy`` of
    numbers or whose data is shorter or longer than its header says.
    """
    with open(path, "rb", buffering=0) as f:
        shape, dtype, nbytes = read_npy_header(f)
        import cupy as cp

        if not dtype.isnative:  # rare: let NumPy swap the bytes
            return cp.asarray(np.load(path, allow_pickle=False).astype(dtype.newbyteorder("=")))
        out = cp.empty(shape, dtype=dtype)
        offset = f.tell()
    pieces = [(start, min(PIECE, nbytes - start)) for start in range(0, nbytes, PIECE)]
    if not pieces:
        return out
    readers = max(1, min(READERS, len(pieces), os.cpu_count() or 1))
    if readers == 1:
        _read_pieces(cp, path, offset, pieces, out)
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(readers, thread_name_prefix="npy-reader") as pool:
            shares = [
                pool.submit(_read_pieces, cp, path, offset, pieces[r::readers], out) for r in range(readers)
            ]
            for share in shares:
                share.result()  # raises the first reader's error
    return out


def _read_pieces(
    cp: Any, path: str | os.PathLike[str], offset: int, pieces: list[tuple[int, int]], out: Any
) -> None:
    """Copy the given ``(start, size)`` pieces of the file's data (from ``offset``) to ``out``'s bytes,
    through two pinned buffers used in turn, on a stream of their own."""
    device = cp.cuda.Device(out.device.id)
    with device:
        stream = cp.cuda.Stream(non_blocking=True)
        count = min(2, len(pieces))
        buffers = [
            cp.cuda.alloc_pinned_memory(max(PIECE if len(pieces) > 1 else pieces[0][1], 1))
            for _ in range(count)
        ]
        copied: list[Any] = [None] * count  # the event after each buffer's last copy
        fd = os.open(path, os.O_RDONLY)
        try:
            for turn, (start, size) in enumerate(pieces):
                slot = turn % count
                if copied[slot] is not None:
                    copied[slot].synchronize()  # the buffer's previous piece has left it
                view = np.frombuffer(buffers[slot], dtype=np.uint8)[:size]
                if os.preadv(fd, [view.data], offset + start) != size:
                    raise GraphValidationError("the .npy file ended early.", field="body")
                cp.cuda.runtime.memcpyAsync(out.data.ptr + start, buffers[slot].ptr, size, 1, stream.ptr)
                copied[slot] = stream.record()
        finally:
            os.close(fd)
            stream.synchronize()  # no copy still reads a buffer that goes back to the pool


def to_pinned(device_array: Any) -> np.ndarray[Any, Any]:
    """A device array copied into a NumPy array in pinned memory from CuPy's pinned pool.

    ``.get()`` copies into fresh pageable memory, faulted in page by page, far below the bus's
    speed (the labels and probabilities of many points wait on it). Here the copy runs at the bus's
    speed into memory the pool hands back once the array is freed (a caller that
    keeps every result gets new pinned memory each time, which costs an allocation).
    """
    import cupy
    import cupyx

    out: np.ndarray[Any, Any] = cupyx.empty_pinned(device_array.shape, dtype=device_array.dtype)
    cupy.ascontiguousarray(device_array).get(out=out)  # no copy where it already is
    return out
