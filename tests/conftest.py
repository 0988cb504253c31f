"""Shared pytest set-up: the ``gpu`` marker skips where no CUDA device is usable.

CuPy is never imported here at module level: ``gpu_core.gpu_available()`` probes it
lazily, and only when a collected test carries the ``gpu`` marker.
"""

from __future__ import annotations

import os
import sys

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--require-gpu",
        action="store_true",
        default=False,
        help="fail (instead of skip) the tests marked gpu when no CUDA device is usable",
    )


def _cache_bytecode() -> None:
    """Let this run's processes keep the bytecode they compile, as an installed service does.

    The suite starts about 100 servers (``python -m service``) and 150 workers. Under
    ``PYTHONDONTWRITEBYTECODE=1`` (set on the CI machine) none kept the modules it compiled, so
    each compiled everything it imported again (about 0.25 s of CPU a server for the service's own
    modules alone), unless the install had compiled all 12,500 files of the environment first
    (uv's ``--compile-bytecode``: 42 s of CI's time, most of it for modules no test imports).
    Unset for this run, and off in the test processes too, the first process to import a module
    writes its ``.pyc`` and the others read it: only what is imported is compiled, once. Stale
    files cannot be read: Python compares each with its source's time stamp and size."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # the servers, workers and tools started here
    sys.dont_write_bytecode = False  # this process (the controller or a test process) too


_cache_bytecode()


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
