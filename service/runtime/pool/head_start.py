"""The local pool's head start: worker 0 and the GPU probe spawned first, before the API is built.

A worker's start (its interpreter, CuPy, the CUDA context, the warm-up) is what ``/readyz``
waits for, and nothing in it needs the API: so ``python -m service`` spawns worker 0 as soon as
its settings are read (:func:`begin`), and builds the app (FastAPI's imports and the rest) while
the worker starts; the pool's start then adopts the process (:meth:`HeadStart.take_worker`).
Which backend and how many GPUs (the plan) is decided in a throw-away child process
(:class:`Probe`), so the API process never loads CUDA; it is spawned right after worker 0 and
the two start side by side. Worker 0's config is the one the plan gives where that is known
without the probe (``MST_BACKEND=cpu``, ``gpu`` with ``MST_GPUS``, ``auto`` without CuPy);
otherwise (:func:`first_config`) it starts on the first GPU the plan can name, its backend left to
``auto`` or ``gpu``, and the pool keeps it if the plan's worker 0 is that one.

Every spawn of a worker process goes through :func:`spawn_worker`, whose target is the worker's
light entry point (:func:`service.runtime.worker.entry.main`): the API process need not import the
engine to start one, and the child imports it once its GPU is pinned. The probe's entry point is
as light (:func:`service.runtime.worker.entry.probe`): the probe imports gpu_core and CuPy only.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from ...settings import Settings
from ..worker.entry import main as worker_entry
from ..worker.entry import probe as probe_entry
from ..worker.protocol import WorkerConfig

MP = multiprocessing.get_context("spawn")


@dataclass
class Spawned:
    """A worker process just spawned: the process, its end of the pipe, its shared stamps."""

    process: Any
    conn: Connection
    heartbeat: Any
    #: its RunStamp's shared array
    running: Any
    #: ``time.monotonic()`` just before the spawn (the start of its ``process`` phase)
    spawned_at: float
    config: WorkerConfig


def spawn_worker(config: WorkerConfig) -> Spawned:
    """Spawn a worker process for ``config`` (blocking for the few milliseconds ``spawn`` takes)."""
    spawned_at = time.monotonic()
    parent, child = MP.Pipe(duplex=True)
    heartbeat = MP.RawValue("d", time.monotonic())
    running = MP.RawArray("q", 2)
    process = MP.Process(
        target=worker_entry,
        args=(child, heartbeat, config, running),
        name=f"mst-worker-{config.index}",
        daemon=True,
    )
    process.start()
    child.close()
    return Spawned(process, parent, heartbeat, running, spawned_at, config)


def worker_config(settings: Settings, index: int, backend: str, device: str | None) -> WorkerConfig:
    """The config of worker ``index`` (on ``backend``, CUDA_VISIBLE_DEVICES ``device``)."""
    return WorkerConfig(
        index=index,
        backend=backend,
        cuda_device=device,
        tmp_dir=str(settings.spool_dir / "tmp"),
        max_edges=settings.max_edges,
        memory_bytes=settings.worker_memory_bytes,
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


def first_config(settings: Settings) -> WorkerConfig:
    """Worker 0's config as far as it is known before the probe (see the module's docstring)."""
    if not needs_probe(settings):
        if settings.backend == "gpu" and settings.gpus:
            return worker_config(settings, 0, "gpu", cuda_token(settings.gpus[0]))
        return worker_config(settings, 0, "cpu", None)
    return worker_config(settings, 0, settings.backend, cuda_token(settings.gpus[0] if settings.gpus else 0))


def keeps(planned: WorkerConfig, started: WorkerConfig) -> bool:
    """Whether a worker started as ``started`` can be the plan's worker ``planned``: the same
    config, or one started with ``auto`` (which resolves as the probe did) on the planned GPU,
    or on the CPU where the plan found no GPU."""
    if planned == started:
        return True
    if started.backend != "auto":
        return False
    return planned.backend == "cpu" or planned.cuda_device == started.cuda_device


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
        """``(backend, GPU count, error or None)``; None as the backend when no answer came within
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


class HeadStart:
    """Worker 0 and the probe, spawned by :func:`begin`; the pool's start takes them."""

    def __init__(self, worker: Spawned | None, probe: Probe | None) -> None:
        self._worker = worker
        self._probe = probe

    def take_worker(self) -> Spawned | None:
        """The head-started worker 0 (once; None after that, or where none was started)."""
        worker, self._worker = self._worker, None
        return worker

    def take_probe(self) -> Probe | None:
        """The probe started with the head start (once; None after that, or where none was needed)."""
        probe, self._probe = self._probe, None
        return probe

    def abandon(self) -> None:
        """Kill what nobody took (the service failed before its pool started)."""
        worker, probe = self.take_worker(), self.take_probe()
        if worker is not None and worker.process.is_alive():
            worker.process.kill()
            worker.conn.close()
        if probe is not None:
            probe.close()


def begin(settings: Settings) -> HeadStart:
    """Spawn worker 0 (:func:`first_config`), then the probe where the plan needs one."""
    worker = spawn_worker(first_config(settings))
    probe = Probe(settings.backend) if needs_probe(settings) else None
    return HeadStart(worker, probe)
