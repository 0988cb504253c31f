"""Which backend computes: ``"gpu"`` where CuPy sees a CUDA device, else ``"cpu"``."""

from __future__ import annotations

import functools
from typing import Literal

from ..errors import BackendUnavailableError

Backend = Literal["auto", "gpu", "cpu"]
BACKENDS: tuple[str, ...] = ("auto", "gpu", "cpu")


@functools.cache
def _gpu_probe() -> str | None:
    """None when CuPy sees a CUDA device, else the reason it does not."""
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed (install the 'gpu' extra, e.g. pip install 'mst-service[gpu]')"
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDA raises its own error types for a missing driver
        return f"CUDA is not usable: {exc}"
    return None if count > 0 else "no CUDA device is visible"


def gpu_available() -> bool:
    """True when CuPy is importable and sees at least one CUDA device."""
    return _gpu_probe() is None


def resolve_backend(backend: str) -> Literal["gpu", "cpu"]:
    """Turn ``"auto"`` into ``"gpu"`` or ``"cpu"``; refuse ``"gpu"`` where there is none."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}.")
    if backend == "cpu":
        return "cpu"
    reason = _gpu_probe()
    if reason is None:
        return "gpu"
    if backend == "gpu":
        raise BackendUnavailableError(f"backend='gpu' was requested but {reason}.")
    return "cpu"
