"""Which workers the service runs: one or more per GPU of this host, or CPU workers; and the processes' start.

The plan (:func:`plan_workers`) needs to know which backend ``MST_BACKEND`` resolves to and how
many GPUs are visible; that is asked of a throw-away child process (:class:`Probe`), so no
process of the service but the workers ever loads CUDA. Worker 0 is spawned before the answer,
with the config the plan will give it where that is known without the probe (:func:`first_config`;
``python -m service`` does it first of all, before the web framework is imported), and the plan
keeps it when it is the plan's worker 0 (:func:`keeps`).

Every spawn of a worker process goes through :func:`spawn_worker`, whose target is the worker's
light entry point (:func:`service.runtime.worker.entry.main`): the supervisor need not import the
engine to start one, and the child imports it once its GPU is pinned.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ...settings import Settings
from ..board import Board
from ..worker.entry import main as worker_entry
from ..worker.entry import probe as probe_entry
from ..worker.protocol import WorkerConfig

MP = multiprocessing.get_context("spawn")


@dataclass
class Spawned:
    """A worker process just spawned: the process, the supervisor's end of its pipe."""

    process: Any
    conn: Connection
    #: ``time.monotonic()`` just before the spawn (the start of its ``process`` phase)
    spawned_at: float
    config: WorkerConfig


def spawn_worker(config: WorkerConfig, board: Board) -> Spawned:
    """Spawn a worker process for ``config`` (blocking for the few milliseconds ``spawn`` takes)."""
    spawned_at = time.monotonic()
    parent, child = MP.Pipe(duplex=True)
    process = MP.Process(
        target=worker_entry, args=(config, board, child), name=f"mst-worker-{config.index}", daemon=True
    )
    process.start()
    child.close()
    return Spawned(process, parent, spawned_at, config)


def socket_path(run_dir: Path, index: int) -> str:
    return str(run_dir / f"w{index}.sock")


def worker_config(
    settings: Settings,
    run_dir: Path,
    api_slots: int,
    index: int,
    backend: str,
    device: str | None,
    share: int = 1,
) -> WorkerConfig:
    """The config of worker ``index`` (on ``backend``, CUDA_VISIBLE_DEVICES ``device``, one of
    ``share`` workers of that device)."""
    return WorkerConfig(
        index=index,
        backend=backend,
        data_dir=str(settings.data_dir),
        socket_path=socket_path(run_dir, index),
        cuda_device=device,
        tmp_dir=str(settings.spool_dir / "tmp"),
        max_edges=settings.max_edges,
        memory_bytes=settings.worker_memory_bytes,
        memory_share=share,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        spin_s=settings.worker_spin_ms / 1e3,
        max_vertices=settings.max_vertices,
        max_inflated_bytes=settings.max_inflated_bytes,
        max_compression_ratio=settings.max_compression_ratio,
        coalesce=settings.coalesce_jobs,
        launch_ahead=settings.launch_ahead,
        oneshot_batch_edges=settings.oneshot_batch_edges,
        oneshot_inline_bytes=settings.oneshot_inline_bytes,
        warm_up=settings.warm_up,
        api_slots=api_slots,
        result_dir=str(settings.results_dir),
    )


def cuda_token(ordinal: int) -> str:
    """The CUDA_VISIBLE_DEVICES value of visible GPU ``ordinal`` (as this process sees them)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        tokens = [t.strip() for t in visible.split(",") if t.strip()]
        if ordinal < len(tokens):
            return tokens[ordinal]
    return str(ordinal)


def needs_probe(settings: Settings) -> bool:
    """Whether the plan must ask a child process which backend and how many GPUs."""
    if settings.backend == "cpu" or (settings.backend == "gpu" and settings.gpus is not None):
        return False
    return not (settings.backend == "auto" and importlib.util.find_spec("cupy") is None)


def first_config(settings: Settings, run_dir: Path, api_slots: int) -> WorkerConfig:
    """Worker 0's config as far as it is known before the probe (see the module's docstring)."""
    share = settings.workers_per_gpu
    if not needs_probe(settings):
        if settings.backend == "gpu" and settings.gpus:
            return worker_config(settings, run_dir, api_slots, 0, "gpu", cuda_token(settings.gpus[0]), share)
        return worker_config(settings, run_dir, api_slots, 0, "cpu", None)
    device = cuda_token(settings.gpus[0] if settings.gpus else 0)
    return worker_config(settings, run_dir, api_slots, 0, settings.backend, device, share)


def keeps(planned: WorkerConfig, started: WorkerConfig) -> bool:
    """Whether a worker started as ``started`` can be the plan's worker ``planned``: the same
    config, or one started with ``auto`` (which resolves as the probe did) on the planned GPU,
    or on the CPU where the plan found no GPU."""
    if planned == started:
        return True
    if started.backend != "auto":
        return False
    return planned.backend == "cpu" or planned.cuda_device == started.cuda_device


def plan_workers(
    settings: Settings, run_dir: Path, api_slots: int, probe: Probe | None = None
) -> list[WorkerConfig]:
    """``MST_WORKERS_PER_GPU`` worker configs per GPU to use, or ``MST_CPU_WORKERS`` CPU workers;
    ``probe``: the child that answers which backend and how many GPUs (one is started where it is
    needed and not given)."""
    per_gpu = settings.workers_per_gpu

    def on(ordinals: list[int]) -> list[WorkerConfig]:
        pairs = [(g, k) for g in ordinals for k in range(per_gpu)]
        return [
            worker_config(settings, run_dir, api_slots, i, "gpu", cuda_token(g), per_gpu)
            for i, (g, _) in enumerate(pairs)
        ]

    cpu = [worker_config(settings, run_dir, api_slots, i, "cpu", None) for i in range(settings.cpu_workers)]
    if not needs_probe(settings):
        if probe is not None:
            probe.close()
        if settings.backend == "gpu" and settings.gpus is not None:
            return on(settings.gpus)
        return cpu
    if probe is None:
        probe = Probe(settings.backend)
    timeout = settings.worker_start_timeout_s
    chosen, count, error = probe.result(timeout)
    from gpu_core.errors import BackendUnavailableError

    if not chosen:
        raise BackendUnavailableError(f"probing for GPUs took longer than {timeout} s.")
    if error is not None:
        raise BackendUnavailableError(f"MST_BACKEND={settings.backend} cannot run here: {error}")
    if chosen == "cpu":
        return cpu
    ordinals = settings.gpus if settings.gpus is not None else list(range(count))
    missing = [g for g in ordinals if g >= count]
    if missing:
        raise BackendUnavailableError(f"MST_GPUS names GPU(s) {missing} but only {count} are visible.")
    return on(ordinals)


class Probe:
    """The throw-away child that says which backend ``MST_BACKEND`` resolves to here and how many
    GPUs are visible: spawned at once, its answer read by :meth:`result`."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self._conn, child = MP.Pipe(duplex=False)
        self._process = MP.Process(target=probe_entry, args=(child, backend), name="mst-probe", daemon=True)
        self._process.start()
        child.close()

    def result(self, timeout: float) -> tuple[str, int, str | None]:
        """``(backend, GPU count, error or None)``; ``""`` as the backend when no answer came within
        ``timeout`` seconds. Blocks: call it on a thread."""
        try:
            if not self._conn.poll(timeout):
                return ("", 0, None)
            answer: tuple[str, int, str | None] = self._conn.recv()
            return answer
        except (EOFError, OSError) as exc:  # the child died before it answered
            return ("cpu", 0, f"the probe process ended without an answer ({exc!r})")
        finally:
            self.close()

    def close(self) -> None:
        self._conn.close()
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()
