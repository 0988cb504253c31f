"""Loads the CUDA kernels: one compilation per device and process, never on a request path."""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

KERNEL_FILE = "ecl_mst.cu"
#: templated kernels, instantiated through NVRTC name expressions
NAME_EXPRESSIONS: tuple[str, ...] = (
    "init_worklist<false>",
    "init_worklist<true>",
    "gather_weights<unsigned>",
    "gather_weights<unsigned long long>",
)


def kernel_source(name: str = KERNEL_FILE) -> str:
    """A ``.cu`` file of ``gpu_core/kernels``, with a ``#line`` so NVRTC errors name the file."""
    text = resources.files("gpu_core").joinpath("kernels", name).read_text(encoding="utf-8")
    return f'#line 1 "{name}"\n{text}'


@functools.cache
def _module(device_id: int) -> Any:
    import cupy

    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(
            code=kernel_source(),
            options=("-std=c++17",),
            name_expressions=NAME_EXPRESSIONS,
        )
        module.compile()
    return module


def kernel(name: str) -> Any:
    """The compiled kernel ``name`` (a ``cupy.RawKernel``) for the current device."""
    import cupy

    return _module(cupy.cuda.Device().id).get_function(name)
