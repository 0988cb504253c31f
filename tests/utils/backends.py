"""The backends every engine test runs on: one test body, ``gpu`` skipped without a device."""

from __future__ import annotations

import pytest

#: parametrize a test over the CPU and GPU backends (the GPU one carries the ``gpu`` marker)
BACKENDS = [
    pytest.param("cpu", id="cpu"),
    pytest.param("gpu", id="gpu", marks=pytest.mark.gpu),
]
