"""A live ``python -m service`` for the benchmarks: started on a free loopback port with a fresh
data directory, ready once ``/readyz`` answers 200, stopped (and its session's processes with it)
afterwards; and the request bodies the benchmarks send it."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .generators import Edges

REPO_ROOT = Path(__file__).resolve().parent.parent
NPZ = "application/octet-stream"
JSON = "application/json"
#: a response body: bytes, or a view of the buffer it was received into
Body = bytes | memoryview


class ServiceUnavailable(RuntimeError):
    """The server could not be started or did not become ready."""


def service_present() -> bool:
    """True when ``python -m service`` has something to run."""
    try:
        return importlib.util.find_spec("service.__main__") is not None
    except (ImportError, ValueError):
        return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_server(backend: str, log_path: Path | None, ready_timeout_s: float) -> Iterator[str]:
    """Start ``python -m service`` on a free loopback port; yield its base URL; stop it."""
    with started_server(backend, log_path, ready_timeout_s) as (base, _):
        yield base


@contextlib.contextmanager
def started_server(
    backend: str,
    log_path: Path | None,
    ready_timeout_s: float,
    extra_env: dict[str, str] | None = None,
    cpus: set[int] | None = None,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Start ``python -m service`` (``extra_env``: more ``MST_*`` settings; ``cpus``: the only CPUs
    it and its children may run on, the clients keeping theirs) on a free loopback port;
    yield its base URL and the API process once ready (and ``MST_BENCH_SETTLE_S`` seconds more,
    0 unless set: a GPU worker goes on loading kernels for about 2 s after ready); stop it."""
    import httpx

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="mst-bench-") as data_dir:
        env = {
            **os.environ,
            "MST_HOST": "127.0.0.1",
            "MST_PORT": str(port),
            "MST_DATA_DIR": data_dir,
            "MST_BACKEND": backend,
            **(extra_env or {}),
        }
        log_file = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "service"],
            cwd=REPO_ROOT,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + ready_timeout_s
            last = "no answer"
            with httpx.Client(base_url=base, timeout=5.0) as client:
                while True:
                    if proc.poll() is not None:
                        raise ServiceUnavailable(
                            f"'python -m service' exited with code {proc.returncode} before it was ready"
                            + (f"; see {log_path}" if log_path else "")
                        )
                    try:
                        r = client.get("/readyz")
                        if r.status_code == 200:
                            break
                        last = f"/readyz answered {r.status_code}: {r.text[:200]}"
                    except httpx.TransportError as exc:
                        last = f"{type(exc).__name__}"
                    if time.monotonic() > deadline:
                        raise ServiceUnavailable(
                            f"the service was not ready after {ready_timeout_s:.0f} s ({last})"
                        )
                    time.sleep(0.2)
                _standbys_warm(client, env.get("MST_STANDBY_WORKER", "auto"), STANDBY_TIMEOUT_S)
            time.sleep(float(os.environ.get("MST_BENCH_SETTLE_S", "0")))
            yield base, proc
        finally:
            _stop(proc)
            if log_path:
                log_file.close()  # type: ignore[union-attr]


#: how long the start waits for the GPU workers' standby processes to be warm
STANDBY_TIMEOUT_S = 90.0


def _standbys_warm(client: Any, setting: str, timeout_s: float) -> None:
    """Wait until every worker that gets a standby (``MST_STANDBY_WORKER``: ``auto`` gives GPU
    workers one) has it warm: a standby starts once its worker is ready and warms its kernels on
    the same GPU and cores, which would otherwise fall inside the first measurements."""
    if setting == "off":
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        workers = client.get("/readyz").json().get("workers", [])
        waiting = [
            w
            for w in workers
            if (setting == "on" or w.get("backend") == "gpu")
            and (w.get("standby") or {}).get("state") != "warm"
        ]
        if not waiting:
            return
        time.sleep(0.2)
    print(f"bench: the standby workers were not warm after {timeout_s:.0f} s; measuring anyway", flush=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    # Workers the server started live in its session: end any it left behind.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


# --------------------------------------------------------------------------- bodies


def json_body(edges: Edges) -> bytes:
    src, dst, weight, n = edges
    return json.dumps(
        {"num_vertices": n, "src": src.tolist(), "dst": dst.tolist(), "weight": weight.tolist()},
        separators=(",", ":"),
    ).encode()


def npz_body(edges: Edges) -> bytes:
    src, dst, weight, n = edges
    buf = io.BytesIO()
    np.savez(buf, src=src, dst=dst, weight=weight, num_vertices=np.int64(n))
    return buf.getvalue()


def read_npz(data: Body) -> dict[str, np.ndarray[Any, Any]]:
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}
