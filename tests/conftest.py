"""Shared pytest set-up: the ``gpu`` marker skips where no CUDA device is usable.

CuPy is never imported here at module level: ``gpu_core.gpu_available()`` probes it
lazily, and only when a collected test carries the ``gpu`` marker.
"""

from __future__ import annotations

import compileall
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--require-gpu",
        action="store_true",
        default=False,
        help="fail (instead of skip) the tests marked gpu when no CUDA device is usable",
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the controller, or a run without -n
        _compile_the_sources()


def _compile_the_sources() -> None:
    """Bytecode for the repository's packages before any test runs, as an installed package has
    it: the suite starts about 100 servers (``python -m service``) and 150 workers, and with
    ``PYTHONDONTWRITEBYTECODE=1`` (CI's environment) each compiled every module it imported again,
    about 0.25 s of CPU a server. Stale files cannot be read: Python compares each with its
    source's time stamp and size. (pytest reads the test modules themselves through its assertion
    rewriting, not from these files.)"""
    for package in ("service", "gpu_core", "bench", "tests"):
        folder = REPO / package
        if folder.is_dir() and os.access(folder, os.W_OK):
            compileall.compile_dir(folder, quiet=2)


def _gpu_unavailable_reason() -> str | None:
    import gpu_core
    from gpu_core.errors import BackendUnavailableError

    if gpu_core.gpu_available():
        return None
    try:
        gpu_core.resolve_backend("gpu")
    except BackendUnavailableError as exc:
        return f"needs a CUDA device: {exc}"
    return "needs a CUDA device: gpu_core.gpu_available() is False"


def _slow_modules_first(items: list[pytest.Item]) -> None:
    """The modules that hold a test marked ``slow`` run first, each kept whole (its module-scoped
    fixtures are set up once): the parallel test processes (``-n auto``, pyproject's
    ``--dist=worksteal``) then start on the long tests and share out the short ones at the end, where
    run in collection order one long test could begin last and leave a process idle meanwhile."""
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)  # stable: the order within each group stays


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _slow_modules_first(items)
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = _gpu_unavailable_reason()
    if reason is None:
        return
    if config.getoption("--require-gpu"):
        raise pytest.UsageError(
            f"--require-gpu was given but {len(gpu_items)} gpu tests cannot run: {reason}"
        )
    skip = pytest.mark.skip(reason=reason)
    for item in gpu_items:
        item.add_marker(skip)
