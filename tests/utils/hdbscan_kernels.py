"""``kernels/hdbscan_tree.cu`` compiled for the host by g++ (CUDA's built-ins replaced by
sequential stand-ins, no FMA contraction), every thread of a launch run in turn in a shuffled
order: the device path's segment kernels, their launch arguments and the driver around them
(``gpu_core._hdbscan_gpu.dendrogram_labels`` on NumPy arrays), checked where no GPU is.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import gpu_core

KERNEL = Path(gpu_core.__file__).parent / "kernels" / "hdbscan_tree.cu"
NAMES = ("segment_sums", "segment_max")

_PRELUDE = r"""
#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>
struct Dim { unsigned x, y, z; };
static Dim threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __restrict__
"""

_DISPATCH = r"""
template <typename... A, std::size_t... I>
static void call(void (*k)(A...), void** args, std::index_sequence<I...>) { k(*static_cast<A*>(args[I])...); }

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
    KERNEL(segment_sums) KERNEL(segment_max)
    return -1;
}
"""


def host_compiler_available() -> bool:
    return shutil.which("g++") is not None


@functools.cache
def _library() -> Any:
    folder = Path(tempfile.mkdtemp(prefix="hdbscan-kernels-host-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    source = folder / "hdbscan_tree_host.cpp"
    source.write_text(f'{_PRELUDE}\n#include "{KERNEL}"\n{_DISPATCH}', encoding="utf-8")
    library = folder / "hdbscan_tree_host.so"
    cmd = [
        "g++",
        "-std=c++17",
        "-O1",
        "-ffp-contract=off",
        "-shared",
        "-fPIC",
        "-o",
        str(library),
        str(source),
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)
    lib = ctypes.CDLL(str(library))
    lib.run_kernel.restype = ctypes.c_int
    count = ctypes.c_uint
    lib.run_kernel.argtypes = [ctypes.c_char_p, count, count, ctypes.c_void_p, ctypes.c_ulonglong]
    return lib


def host_launch(seed: int) -> Any:
    """A ``launch`` for ``_condense`` that runs the kernels compiled for the host on NumPy arrays."""
    lib = _library()
    rng = np.random.default_rng(seed)
    launched: list[str] = []

    def launch(name: str, grid: tuple[int], block: tuple[int], args: tuple[Any, ...]) -> None:
        assert name in NAMES, name
        kinds = [a.dtype if isinstance(a, np.ndarray) else type(a) for a in args]
        assert kinds == [np.float64, np.int64, np.int64, np.int64, np.float64], (name, kinds)  # the signature
        holders: list[Any] = []
        for a in args:
            if isinstance(a, np.ndarray):
                assert a.flags.c_contiguous, name
                holders.append(ctypes.c_void_p(a.ctypes.data))
            else:
                assert isinstance(a, np.int64), (name, type(a))  # `long long count`
                holders.append(ctypes.c_int64(int(a)))
        pointers = (ctypes.c_void_p * len(holders))(*(ctypes.addressof(h) for h in holders))
        assert lib.run_kernel(name.encode(), grid[0], block[0], pointers, int(rng.integers(1, 2**62))) == 0
        launched.append(name)

    launch.launched = launched  # type: ignore[attr-defined]
    return launch
