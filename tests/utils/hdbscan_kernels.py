"""``kernels/hdbscan_tree.cu`` compiled for the host by g++ (CUDA's built-ins replaced by
sequential stand-ins, no FMA contraction), every thread of a launch run in turn in a shuffled
order: the device path's segment and excess-of-mass kernels, their launch arguments and the
drivers around them (``dendrogram_labels`` and ``eom_paths`` of ``gpu_core._clustering``, on
NumPy arrays), checked where no GPU is.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

import gpu_core

from .host_cuda import compile_for_host, host_compiler_available, run_on_host

__all__ = ["KERNEL", "NAMES", "host_compiler_available", "host_launch"]

KERNEL = Path(gpu_core.__file__).parent / "kernels" / "hdbscan_tree.cu"
_I, _F, _B, _U = np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.uint8), np.dtype(np.uint64)
#: each kernel's argument types (arrays by dtype, scalars by type): the signatures in the file
SIGNATURES: dict[str, list[Any]] = {
    "segment_sums": [_F, _I, _I, np.int64, _F],
    "segment_max": [_F, _I, _I, np.int64, _F],
    "eom_up": [_I, _I, np.int64, np.int64, _F, _F, _I, _F, _B],
    "eom_above": [_I, np.int64, np.int64, _I, _I, _I, _I, _I, _I],
    "find_roots": [_I, np.int64, np.int64],
    "find_roots_counted": [_U, np.int64, np.int64],
}
NAMES = tuple(SIGNATURES)


@functools.cache
def _library() -> Any:
    return compile_for_host(KERNEL, "", NAMES, ("-ffp-contract=off",))


def host_launch(seed: int) -> Any:
    """A ``launch`` for ``condense`` that runs the kernels compiled for the host on NumPy arrays."""
    lib = _library()
    rng = np.random.default_rng(seed)
    launched: list[str] = []

    def launch(name: str, grid: tuple[int], block: tuple[int], args: tuple[Any, ...]) -> None:
        assert name in NAMES, name
        kinds = [a.dtype if isinstance(a, np.ndarray) else type(a) for a in args]
        assert kinds == SIGNATURES[name], (name, kinds)
        run_on_host(lib, name, grid, block, args, int(rng.integers(1, 2**62)))
        launched.append(name)

    launch.launched = launched  # type: ignore[attr-defined]
    return launch
