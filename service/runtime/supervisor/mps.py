"""CUDA MPS for the workers that share a GPU (``MST_MPS``).

Without MPS, the CUDA contexts of several worker processes on one GPU take turns on it: each job's
small kernels leave most of the device idle while the other contexts wait for their slice. Under
MPS the workers' kernels share the device at once (one H200, 8 API processes x 4 workers,
2^16-vertex graphs: a job's compute 1.0-1.1 ms -> 0.39-0.48 ms, 2,260 -> 3,055 jobs/s with the
result files on a memory file system; ``bench/results/scaling/README.md``).

The supervisor starts a control daemon of its own (``nvidia-cuda-mps-control -d``) whose pipe and
log folders lie in its private run folder, before it spawns any worker; the workers (and the
standbys, spawned later) inherit ``CUDA_MPS_PIPE_DIRECTORY`` and so connect to it, and no other
process of the host does. It is told to quit when the service stops. An operator's own MPS
(``CUDA_MPS_PIPE_DIRECTORY`` already set in the service's environment) is used as it is.

The price of sharing: a worker killed (SIGKILL, a crash on the host) leaves the others running,
but a fatal fault inside one worker's kernel (an illegal address, say) ends the work of every
client of that GPU's MPS server, so every worker of that GPU restarts and fails its running job.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ...settings import Settings

log = logging.getLogger("service.runtime.supervisor")

#: the MPS control program (from the CUDA driver's utilities)
CONTROL = "nvidia-cuda-mps-control"
PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"


class MpsStartError(RuntimeError):
    """``MST_MPS=on``, and the daemon could not be started (the message says why)."""


def wanted(settings: Settings) -> bool:
    """Whether this service's workers should run under MPS: ``on``; ``auto`` where several local
    GPU workers share each GPU (``MST_WORKERS_PER_GPU`` above 1), the shape it was measured to help."""
    if settings.mps == "off" or settings.backend == "cpu" or settings.worker_pool != "local":
        return False
    return settings.mps == "on" or settings.workers_per_gpu > 1


@dataclass(frozen=True)
class MpsDaemon:
    """A control daemon this service started (its folders in the service's run folder)."""

    control: str
    pipe_dir: Path
    log_dir: Path

    def stop(self) -> None:
        """Tell the daemon to quit (it ends its server once the workers are gone)."""
        env = {**os.environ, PIPE_ENV: str(self.pipe_dir), LOG_ENV: str(self.log_dir)}
        try:
            subprocess.run(
                [self.control], input=b"quit\n", env=env, capture_output=True, timeout=15, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("CUDA MPS: the control daemon did not take 'quit' (%r)", exc)


def start(settings: Settings, run_dir: Path) -> MpsDaemon | None:
    """Start a private control daemon for the workers when :func:`wanted` (None otherwise, and where
    ``auto`` cannot: it says why in the log); sets this process's environment, which the workers
    spawned from now on inherit. ``on`` without a daemon raises :class:`MpsStartError`."""
    if not wanted(settings):
        return None
    if os.environ.get(PIPE_ENV):
        log.info("CUDA MPS: the workers use the daemon at %s=%s", PIPE_ENV, os.environ[PIPE_ENV])
        return None
    control = shutil.which(CONTROL)
    if control is None:
        if settings.mps == "auto":  # a host without NVIDIA's driver tools: nothing to warn about
            log.info("CUDA MPS: %s is not on the PATH; the workers of each GPU take turns on it", CONTROL)
            return None
        return _not_started(settings, f"{CONTROL} is not on the PATH (it comes with the NVIDIA driver)")
    pipe_dir, log_dir = run_dir / "mps-pipe", run_dir / "mps-log"
    pipe_dir.mkdir(mode=0o700, exist_ok=True)
    log_dir.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, PIPE_ENV: str(pipe_dir), LOG_ENV: str(log_dir)}
    try:
        done = subprocess.run([control, "-d"], env=env, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _not_started(settings, f"{CONTROL} -d failed: {exc!r}")
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode(errors="replace").strip()[:300]
        return _not_started(settings, f"{CONTROL} -d exited with {done.returncode}: {said}")
    os.environ[PIPE_ENV], os.environ[LOG_ENV] = str(pipe_dir), str(log_dir)
    log.info("CUDA MPS: the workers share each GPU through a daemon of this service (%s)", pipe_dir)
    return MpsDaemon(control, pipe_dir, log_dir)


def _not_started(settings: Settings, why: str) -> MpsDaemon | None:
    if settings.mps == "on":
        raise MpsStartError(f"MST_MPS=on, but CUDA MPS could not be started: {why}.")
    log.warning("CUDA MPS not started (MST_MPS=auto): %s; the workers of each GPU take turns on it", why)
    return None
