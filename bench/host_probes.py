"""What else a throughput benchmark's host says about where it stops: its disk and its GPUs.

* :func:`disk_write` writes a few files at once into a folder, each ended by ``fdatasync``, and
  reports the aggregate MB/s: the bandwidth a service's result files (handed to the disk as they
  are written) compete for. A benchmark runs it once, in the folder its services' data dirs live in.
* :class:`GpuActivity` samples ``nvidia-smi dmon -s u -o DT`` (one sample a second per GPU: the
  share of the second in which a kernel ran, stamped with dmon's own clock) for as long as its block
  runs; :meth:`GpuActivity.summary` keeps the samples of a window (the load's seconds: a block that
  also starts and stops clients would otherwise count their idle seconds); without ``nvidia-smi`` it
  samples nothing.

Both were hand-run beside ``bench.scaling`` on the device (issue 44: a disk of 1.3-1.6 GB/s capped
two H200s; GPUs 44 % busy); kept here so every record carries them.
"""

from __future__ import annotations

import datetime
import os
import shutil
import statistics
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

#: bytes per write call of the disk probe
CHUNK = 1 << 20


def disk_write(folder: Path, total_mb: int = 1024, writers: int = 4) -> dict[str, Any]:
    """Write ``total_mb`` MiB into ``writers`` new files in ``folder`` at once, each fdatasynced, then
    remove them: the aggregate MB/s (decimal megabytes, as ``dd`` reports), from the first write
    to the last file's sync."""
    each = max(1, total_mb // writers)
    chunk = os.urandom(CHUNK)  # not zeros: some storage compresses or skips them
    paths = [folder / f".mst-disk-probe-{os.getpid()}-{i}" for i in range(writers)]
    errors: list[BaseException] = []

    def write(path: Path) -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                for _ in range(each):
                    os.write(fd, chunk)
                os.fdatasync(fd)
            finally:
                os.close(fd)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(p,)) for p in paths]
    started = time.perf_counter()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - started
    finally:
        for p in paths:
            p.unlink(missing_ok=True)
    if errors:
        raise errors[0]
    written = each * writers * CHUNK
    return {
        "folder": str(folder),
        "writers": writers,
        "bytes": written,
        "seconds": round(seconds, 3),
        "mb_per_s": round(written / seconds / 1e6, 1),
    }


def parse_dmon(text: str) -> dict[str, list[tuple[float | None, int]]]:
    """``nvidia-smi dmon -s u`` output: per GPU index its ``sm`` % samples, each with its time (the
    epoch seconds of ``-o DT``'s date and time columns, on this host's clock; None without them).
    Comment lines and samples without a number (``-``) are skipped."""
    series: dict[str, list[tuple[float | None, int]]] = {}
    for line in text.splitlines():
        fields = line.split()
        if line.lstrip().startswith("#"):
            continue
        stamp: float | None = None
        if len(fields) >= 2 and len(fields[0]) == 8 and fields[0].isdigit() and ":" in fields[1]:
            try:
                when = datetime.datetime.strptime(f"{fields[0]} {fields[1]}", "%Y%m%d %H:%M:%S")
            except ValueError:
                continue
            stamp = when.timestamp()  # dmon prints local time, as naive datetimes are read
            fields = fields[2:]
        if len(fields) < 2 or not fields[0].isdigit() or not fields[1].isdigit():
            continue
        series.setdefault(fields[0], []).append((stamp, int(fields[1])))
    return series


class GpuActivity:
    """``with GpuActivity() as gpus: ...``; then :meth:`summary` (see the module's docstring)."""

    def __init__(self, gpus: str | None = None, enabled: bool = True) -> None:
        #: the GPUs sampled (``nvidia-smi -i``'s list: ``"0,1"``), None for every one
        self.gpus = gpus
        self.enabled = enabled
        self.samples: dict[str, list[tuple[float | None, int]]] = {}
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> GpuActivity:
        smi = shutil.which("nvidia-smi") if self.enabled else None
        if smi is not None:
            cmd = [smi, "dmon", "-s", "u", "-d", "1", "-o", "DT"] + (["-i", self.gpus] if self.gpus else [])
            self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            out, _ = self._proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            out, _ = self._proc.communicate()
        self.samples = parse_dmon(out)

    def summary(self, window: tuple[float, float] | None = None) -> dict[str, Any] | None:
        """Per GPU: its samples and their median (None where nothing was sampled). ``window``: epoch
        seconds ``(start, end)``; only samples stamped from a whole second after ``start`` to
        ``end`` count (dmon stamps a sample at the end of its second, truncated to the second), and
        ``window_s`` says how many did (samples without a time all count)."""
        if not self.samples:
            return None
        out: dict[str, Any] = {}
        for gpu, samples in sorted(self.samples.items()):
            kept = [
                value
                for stamp, value in samples
                if window is None or stamp is None or window[0] + 1.0 <= stamp <= window[1]
            ]
            out[gpu] = {
                "sm_percent": [value for _, value in samples],
                "median": statistics.median(kept) if kept else None,
                "window_s": len(kept),
            }
        return out
