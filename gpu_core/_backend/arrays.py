"""NumPy or CuPy: which module an array is of, and its values on the host."""

from __future__ import annotations

from typing import Any

import numpy as np


def is_cupy(value: Any) -> bool:
    """True for a CuPy array (told by its module, so CuPy is never imported to ask)."""
    return type(value).__module__.split(".")[0] == "cupy"


def to_host(value: Any) -> Any:
    """A CuPy array copied to the host; anything else as it is."""
    return value.get() if is_cupy(value) else value


def to_numpy(array: Any) -> np.ndarray[Any, Any]:
    """A NumPy array of the values of any array with a ``get`` (CuPy's, or the tests' stand-in
    for a device), or of anything ``np.asarray`` takes."""
    return array.get() if hasattr(array, "get") else np.asarray(array)
