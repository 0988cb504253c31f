"""The local pool: one worker process per GPU of this host (``MST_GPUS``), or ``MST_CPU_WORKERS`` on the CPU.

Which backend and how many GPUs is decided in a throw-away child process (:func:`_probe`), so
the API process never loads CUDA. With ``MST_BACKEND=auto`` that probe takes seconds on a GPU
host (CuPy's import, CUDA's start), so worker 0 starts meanwhile on the first GPU the plan can
name, its backend left to itself, and is kept if the plan's worker 0 is on that GPU (or on the
CPU, where it resolves ``auto`` the same). Each worker is a :class:`~.processes.ProcessHandle`.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import time
from multiprocessing.connection import Connection

from ...errors import ServiceUnavailableError
from ...settings import Settings
from ..worker.protocol import WorkerConfig
from .handle import WorkerHandle
from .interface import worker_config
from .processes import MP, ProcessHandle
from .residency import Sources


class LocalPool:
    """Worker processes on this host (``MST_WORKER_POOL=local``): a :class:`~.interface.WorkerPool`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def start(self, sources: Sources) -> list[WorkerHandle]:
        """Plan the local workers and start them (worker 0 while the plan probes for GPUs, see
        the module's docstring)."""
        settings = self.settings
        first: ProcessHandle | None = None
        if settings.backend == "auto" and importlib.util.find_spec("cupy") is not None:
            token = _cuda_token(settings.gpus[0] if settings.gpus else 0)
            first = ProcessHandle(worker_config(settings, 0, "auto", token), settings, sources)
            await first.start()
        started = time.perf_counter()
        try:
            configs = await asyncio.to_thread(plan_workers, settings)
        except BaseException:
            if first is not None:
                await first.stop()
            raise
        workers: list[WorkerHandle] = [ProcessHandle(c, settings, sources) for c in configs]
        if first is not None:
            planned = configs[0]
            if planned.backend == "cpu" or planned.cuda_device == first.config.cuda_device:
                workers[0] = first
            else:
                await first.stop()
        for handle in workers:
            handle.plan_ms = round((time.perf_counter() - started) * 1e3, 3)
        for handle in workers:
            if not handle.started:  # (worker 0 may be)
                await handle.start()
        return workers

    async def stop(self) -> None:
        """Nothing beyond the worker processes, which their handles stop."""


def plan_workers(settings: Settings) -> list[WorkerConfig]:
    """One worker config per GPU to use, or ``MST_CPU_WORKERS`` CPU workers."""

    def config(index: int, backend: str, device: str | None) -> WorkerConfig:
        return worker_config(settings, index, backend, device)

    cpu = [config(i, "cpu", None) for i in range(settings.cpu_workers)]
    if settings.backend == "cpu":
        return cpu
    if settings.backend == "gpu" and settings.gpus is not None:
        return [config(i, "gpu", _cuda_token(g)) for i, g in enumerate(settings.gpus)]
    chosen, count = _probe(settings.backend, settings.worker_start_timeout_s)
    if chosen == "cpu":
        return cpu
    ordinals = settings.gpus if settings.gpus is not None else list(range(count))
    missing = [g for g in ordinals if g >= count]
    if missing:
        from gpu_core.errors import BackendUnavailableError

        raise BackendUnavailableError(f"MST_GPUS names GPU(s) {missing} but only {count} are visible.")
    return [config(i, "gpu", _cuda_token(g)) for i, g in enumerate(ordinals)]


def _probe_child(conn: Connection, backend: str) -> None:
    """In a spawned child: resolve ``backend`` and count the CUDA devices."""
    try:
        import gpu_core

        chosen = gpu_core.resolve_backend(backend)
        count = 0
        if chosen == "gpu":
            import cupy

            count = int(cupy.cuda.runtime.getDeviceCount())
        conn.send((chosen, count, None))
    except Exception as exc:
        conn.send(("cpu", 0, f"{type(exc).__name__}: {exc}"))
    conn.close()


def _probe(backend: str, timeout: float) -> tuple[str, int]:
    """Which backend and how many GPUs, decided in a throw-away child so this process never loads CUDA."""
    if backend == "auto" and importlib.util.find_spec("cupy") is None:
        return "cpu", 0
    parent, child = MP.Pipe(duplex=False)
    process = MP.Process(target=_probe_child, args=(child, backend), name="mst-probe", daemon=True)
    process.start()
    child.close()
    try:
        if not parent.poll(timeout):
            raise ServiceUnavailableError(f"probing for GPUs took longer than {timeout} s.")
        chosen, count, error = parent.recv()
    finally:
        parent.close()
        process.join(5)
        if process.is_alive():
            process.kill()
    if error is not None:
        from gpu_core.errors import BackendUnavailableError

        raise BackendUnavailableError(f"MST_BACKEND={backend} cannot run here: {error}")
    return chosen, count


def _cuda_token(ordinal: int) -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        tokens = [t.strip() for t in visible.split(",") if t.strip()]
        if ordinal < len(tokens):
            return tokens[ordinal]
    return str(ordinal)
