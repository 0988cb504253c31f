"""Numba, where it is installed (the ``fast`` extra): the host's sequential passes compiled.

Compiled functions are cached on disk (``cache=True``): in ``__pycache__`` next to the
package where that is writable, else in ``NUMBA_CACHE_DIR`` or the user's cache folder
(the image sets ``NUMBA_CACHE_DIR`` to the data volume). Where no cache folder is writable
they compile once per process. Either way :func:`gpu_core.warm_up` compiles or loads them,
so no request pays for it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


@functools.cache
def available() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def jit(fn: Callable[..., Any]) -> Any:
    """``numba.njit(cache=True, nogil=True)(fn)``; without a writable cache folder, uncached."""
    import numba

    try:
        return numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # "no locator available": no writable cache folder anywhere
        return numba.njit(nogil=True)(fn)
