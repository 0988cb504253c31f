"""Fixtures of the service tests: live servers in subprocesses (real uvicorn, SQLite, worker)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .live import CRASH_HOOK_ENV, LiveServer

#: settings of the shared server: CPU worker, small limits so 413s are cheap to provoke, and no
#: warm-up of every task at each worker's start (about 1.7 s of CPU each, for some 150 starts in the
#: suite): the first request of a kind loads what it needs. Tests of the warm-up set MST_WARM_UP=all
#: (test_head_start.py, test_gpu_faults.py, test_points_api.py); test_warm_start.py starts its
#: workers itself, with the default.
SHARED_ENV = {
    "MST_BACKEND": "cpu",
    "MST_WARM_UP": "none",
    "MST_HOST": "127.0.0.1",
    "MST_LOG_LEVEL": "warning",
    "MST_MAX_UPLOAD_BYTES": str(2_000_000),
    "MST_MAX_JSON_BYTES": str(1_000_000),
    "MST_MAX_EDGES": str(50_000),
    "MST_MAX_WAIT_S": "30",
    # one API process unless a test asks for more (MST_API_WORKERS=auto gives a 16-core host four)
    "MST_API_WORKERS": "1",
}

#: the shared server runs as the service runs on a many-core host: several API processes, several
#: workers, so every API test sends its requests through any of them; its workers can be held
#: running (``LiveServer.hold``) and killed by a weight (``KILL_WEIGHT``)
LIVE_ENV = {**SHARED_ENV, "MST_API_WORKERS": "2", "MST_CPU_WORKERS": "2", **CRASH_HOOK_ENV}


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One server shared by the API tests (they create their own graphs and jobs)."""
    root = tmp_path_factory.mktemp("live")
    server = LiveServer(root / "data", dict(LIVE_ENV), root / "server.log").start()
    yield server
    server.stop()


ServerFactory = Callable[..., LiveServer]


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[ServerFactory]:
    """Start servers of one's own (stopped at the end); ``data_dir`` defaults to a fresh folder."""
    started: list[LiveServer] = []

    def start(data_dir: Path | None = None, **env: str) -> LiveServer:
        server = LiveServer(
            data_dir or tmp_path / "data",
            {**SHARED_ENV, **env},
            tmp_path / f"server-{len(started)}.log",
        )
        started.append(server)
        # a GPU worker's warm-up on a cold kernel cache compiles every kernel: minutes, not seconds
        warming_gpu = env.get("MST_BACKEND") == "gpu" and env.get("MST_WARM_UP") == "all"
        return server.start(timeout=900.0 if warming_gpu else 60.0)

    yield start
    for server in started:
        if server.proc is not None and server.proc.poll() is None:
            server.stop()
