"""The supervisor as a process of its own: workers and several API processes on one port, until a signal.

``python -m service`` runs :func:`run_service` when ``MST_API_WORKERS`` asks for more than one API
process: the supervisor starts (:class:`.supervisor.Supervisor`), binds the service's address,
spawns the API processes on it (:mod:`.api_processes`; their counters go to Prometheus'
multiprocess folder) and waits for SIGTERM or SIGINT; then the API processes stop first (no new
request reaches a worker), then the workers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from ...settings import Settings
from .api_processes import ApiProcesses, listen
from .supervisor import Supervisor

log = logging.getLogger("service.runtime.supervisor")


async def run_service(settings: Settings, api_processes: int, api_main: str) -> None:
    """Run the service with ``api_processes`` API processes (``api_main``: what each runs, as
    ``module:function``) until SIGTERM or SIGINT."""
    supervisor = Supervisor(settings, api_slots=api_processes)
    metrics_dir = supervisor.run_dir / "metrics"
    metrics_dir.mkdir()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)  # inherited by every API process
    supervisor.begin()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    api: ApiProcesses | None = None
    sock = None
    try:
        await supervisor.start()
        assert supervisor.store is not None
        supervisor.store.spread_coordinators(api_processes)
        sock = listen(settings.host, settings.port)
        api = ApiProcesses(settings, supervisor.board, supervisor.run_dir, supervisor.store, api_main, sock)
        api.start()
        log.info(
            "serving on http://%s:%d with %d API processes and %d workers",
            settings.host, settings.port, api_processes, supervisor.workers,
        )  # fmt: skip
        await stop.wait()
    finally:
        if api is not None:
            await api.stop()
        await supervisor.stop()
        if sock is not None:
            sock.close()
