"""The local pool: one worker process per GPU of this host (``MST_GPUS``), or ``MST_CPU_WORKERS`` on the CPU.

Its start takes the head start (:mod:`.head_start`: worker 0 and the GPU probe, spawned when
``python -m service`` had read its settings, or now where nobody began one), plans the workers
from the probe's answer (:func:`plan_workers`), keeps the head-started worker 0 where it is the
plan's, and starts the others. Each worker is a :class:`~.processes.ProcessHandle`.
"""

from __future__ import annotations

import asyncio
import time

from ...errors import ServiceUnavailableError
from ...settings import Settings
from ..worker.protocol import WorkerConfig
from .handle import WorkerHandle
from .head_start import HeadStart, Probe, begin, cuda_token, keeps, needs_probe, worker_config
from .processes import ProcessHandle
from .residency import Sources


class LocalPool:
    """Worker processes on this host (``MST_WORKER_POOL=local``): a :class:`~.interface.WorkerPool`."""

    def __init__(self, settings: Settings, head_start: HeadStart | None = None) -> None:
        self.settings = settings
        self._head_start = head_start

    async def start(self, sources: Sources) -> list[WorkerHandle]:
        """Plan the local workers and start them (worker 0 and the probe from the head start)."""
        settings = self.settings
        head = self._head_start
        if head is None:
            head = await asyncio.to_thread(begin, settings)
        self._head_start = None
        spawned, probe = head.take_worker(), head.take_probe()
        started = time.perf_counter()
        try:
            configs = await asyncio.to_thread(plan_workers, settings, probe)
        except BaseException:
            if spawned is not None:
                spawned.process.kill()
                spawned.conn.close()
            raise
        workers: list[WorkerHandle] = []
        for config in configs:
            if spawned is not None and config.index == 0 and keeps(config, spawned.config):
                handle = ProcessHandle(spawned.config, settings, sources)
                handle.adopt(spawned)
                spawned = None
            else:
                handle = ProcessHandle(config, settings, sources)
            handle.plan_ms = round((time.perf_counter() - started) * 1e3, 3)
            workers.append(handle)
        if spawned is not None:  # not the plan's worker 0 (another GPU): it goes
            spawned.process.kill()
            spawned.conn.close()
        for worker in workers:
            await worker.start()
        return workers

    async def stop(self) -> None:
        """Nothing beyond the worker processes, which their handles stop."""


def plan_workers(settings: Settings, probe: Probe | None = None) -> list[WorkerConfig]:
    """One worker config per GPU to use, or ``MST_CPU_WORKERS`` CPU workers; ``probe``: the child
    that answers which backend and how many GPUs (one is started where it is needed and not given)."""

    def config(index: int, backend: str, device: str | None) -> WorkerConfig:
        return worker_config(settings, index, backend, device)

    cpu = [config(i, "cpu", None) for i in range(settings.cpu_workers)]
    if not needs_probe(settings):
        if probe is not None:
            probe.close()
        if settings.backend == "gpu" and settings.gpus is not None:
            return [config(i, "gpu", cuda_token(g)) for i, g in enumerate(settings.gpus)]
        return cpu
    if probe is None:
        probe = Probe(settings.backend)
    timeout = settings.worker_start_timeout_s
    chosen, count, error = probe.result(timeout)
    if not chosen:
        raise ServiceUnavailableError(f"probing for GPUs took longer than {timeout} s.")
    if error is not None:
        from gpu_core.errors import BackendUnavailableError

        raise BackendUnavailableError(f"MST_BACKEND={settings.backend} cannot run here: {error}")
    if chosen == "cpu":
        return cpu
    ordinals = settings.gpus if settings.gpus is not None else list(range(count))
    missing = [g for g in ordinals if g >= count]
    if missing:
        from gpu_core.errors import BackendUnavailableError

        raise BackendUnavailableError(f"MST_GPUS names GPU(s) {missing} but only {count} are visible.")
    return [config(i, "gpu", cuda_token(g)) for i, g in enumerate(ordinals)]
