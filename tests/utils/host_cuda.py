"""CUDA kernel files compiled for the host by g++, for tests where no GPU is.

CUDA's built-ins become sequential stand-ins (a prelude per file: the index variables, the atomics
it uses), and every thread of a launch runs in turn, in an order shuffled by a seed, so a kernel
that depends on the order of its threads fails. Used by ``tests/utils/dendrogram.py`` and
``tests/utils/hdbscan_kernels.py``.
"""

from __future__ import annotations

import atexit
import ctypes
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

#: the common part of every prelude: CUDA's index variables and qualifiers
PRELUDE = r"""
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>
struct Dim { unsigned x, y, z; };
static Dim threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
"""

_DISPATCH = r"""
template <typename... A, std::size_t... I>
static void call(void (*k)(A...), void** args, std::index_sequence<I...>) { k(*static_cast<A*>(args[I])...); }

// Every thread of the grid in turn, in an order shuffled by `seed` (0: in order).
template <typename... A>
static void launch(void (*k)(A...), unsigned grid, unsigned block, void** args, unsigned long long seed) {
    gridDim = {grid, 1, 1};
    blockDim = {block, 1, 1};
    std::vector<unsigned long long> ids(static_cast<std::size_t>(grid) * block);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = i;
    for (std::size_t i = ids.size(); seed && i > 1; --i) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        std::swap(ids[i - 1], ids[(seed >> 33) % i]);
    }
    for (unsigned long long id : ids) {
        blockIdx = {static_cast<unsigned>(id / block), 0, 0};
        threadIdx = {static_cast<unsigned>(id % block), 0, 0};
        call(k, args, std::index_sequence_for<A...>{});
    }
}

#define KERNEL(f) if (!std::strcmp(name, #f)) { launch(f, grid, block, args, seed); return 0; }
extern "C" int run_kernel(const char* name, unsigned grid, unsigned block, void** args,
                          unsigned long long seed) {
    KERNELS
    return -1;
}
"""

#: ctypes types of the scalar kernel arguments, by NumPy dtype
SCALARS = {
    np.dtype(np.int32): ctypes.c_int32,
    np.dtype(np.uint32): ctypes.c_uint32,
    np.dtype(np.int64): ctypes.c_int64,
}


def host_compiler_available() -> bool:
    return shutil.which("g++") is not None


def compile_for_host(kernel: Path, prelude: str, names: tuple[str, ...], flags: tuple[str, ...] = ()) -> Any:
    """``kernel`` compiled with ``prelude`` (after :data:`PRELUDE`) into a library whose
    ``run_kernel(name, grid, block, args, seed)`` runs the kernels ``names``."""
    folder = Path(tempfile.mkdtemp(prefix=f"{kernel.stem}-host-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    source = folder / f"{kernel.stem}_host.cpp"
    dispatch = _DISPATCH.replace("KERNELS", " ".join(f"KERNEL({name})" for name in names))
    source.write_text(f'{PRELUDE}{prelude}\n#include "{kernel}"\n{dispatch}', encoding="utf-8")
    library = folder / f"{kernel.stem}_host.so"
    cmd = ["g++", "-std=c++17", "-O1", *flags, "-shared", "-fPIC", "-o", str(library), str(source)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)  # nvcc checks warnings (CI)
    lib = ctypes.CDLL(str(library))
    lib.run_kernel.restype = ctypes.c_int
    count = ctypes.c_uint
    lib.run_kernel.argtypes = [ctypes.c_char_p, count, count, ctypes.c_void_p, ctypes.c_ulonglong]
    return lib


def run_on_host(
    lib: Any, name: str, grid: tuple[int], block: tuple[int], args: tuple[Any, ...], seed: int
) -> None:
    """One launch: NumPy arrays (C-contiguous) pass as pointers, NumPy scalars by :data:`SCALARS`."""
    holders: list[Any] = []
    for a in args:
        if isinstance(a, np.ndarray):
            assert a.flags.c_contiguous, name
            holders.append(ctypes.c_void_p(a.ctypes.data))
        else:
            holders.append(SCALARS[np.dtype(type(a))](a))
    pointers = (ctypes.c_void_p * len(holders))(*(ctypes.addressof(h) for h in holders))
    assert lib.run_kernel(name.encode(), grid[0], block[0], pointers, seed) == 0, name
