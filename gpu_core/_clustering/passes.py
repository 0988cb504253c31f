"""Which host passes of HDBSCAN* run: compiled by Numba (``compiled``) where it is installed and
the tree is large enough, else NumPy's. Both give the same bits; NumPy's is the reference."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .._backend.jit import available as numba_available

COMPILED_FROM = 1_000
"""Trees of more points take the compiled path where Numba is installed (smaller ones: not
worth loading it outside a warmed-up worker)."""


@functools.cache
def compiled_passes() -> Any:
    """The module of compiled passes, or None where Numba is not installed."""
    if not numba_available():
        return None
    from . import compiled

    return compiled


def passes_for(compiled: bool | None, n: int) -> Any:
    """The compiled passes' module if they are to run for a tree of ``n`` points, else None.

    ``compiled``: None picks them for more than :data:`COMPILED_FROM` points where Numba is
    installed; True insists on them (an error without Numba); False takes the NumPy path.
    """
    if compiled is False or (compiled is None and n <= COMPILED_FROM):
        return None
    passes = compiled_passes()
    if compiled is True and passes is None:
        raise RuntimeError("the compiled HDBSCAN* passes need Numba (pip install 'mst-service[fast]')")
    return passes


def plain(array: Any, dtype: Any) -> np.ndarray[Any, Any]:
    """A C-contiguous, writable array of ``dtype``: the one kind the warm-up compiled for (Numba
    compiles anew for another layout or a read-only array, on the request's time)."""
    out = np.ascontiguousarray(array, dtype=dtype)
    return out if out.flags.writeable else out.copy()
