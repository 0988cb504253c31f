"""``warm_up``: the graphs' and point sets' kernels and the clustering's compiled host passes, so no
request compiles; ``warm_start``: the same for a service's worker, quick where a manifest allows.

Composed here, above both parts, so that neither imports the other.

Design: docs/design/warm-up.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

from ._backend.resolve import Backend
from ._clustering.hdbscan import warm_up_compiled
from ._clustering.warm_up import model_parts
from ._graphs.warm_up import warm_up_graphs
from ._points.warm_up import warm_up_points

#: the warm-up manifest's file name in CuPy's kernel cache folder: this prefix, the key, ``.json``
MANIFEST_PREFIX = "mst-warm-up-"


def warm_up(backend: Backend = "auto", *, host_passes: bool = True, points: bool = True) -> str:
    """Compile every kernel a request can need, so no request pays for compilation.

    Builds, prepares and computes a small graph for every vertex-id dtype an upload can carry and
    every weight dtype, from host arrays as an upload hands them over (validation on the device
    included), and takes the validation's error paths (a vertex id out of range, a non-finite
    weight) and the empty and loop-only graphs once. On the GPU, CuPy compiles an elementwise or
    reduction kernel for each dtype it first meets: without this, the first upload of each dtype
    would wait for those compilations. Then every query of a resident graph runs once per weight
    dtype: minimum and maximum forests, a what-if, cluster labels, and weight updates
    (:func:`gpu_core._graphs.warm_up.warm_up_graphs`). Where Numba is installed and
    ``host_passes``, first compiles (or loads from its cache) the host passes of
    ``hdbscan`` and ``single_linkage`` (:func:`gpu_core._clustering.hdbscan.warm_up_compiled`; the service's
    workers do that on a thread while they start). With ``points``, every kernel a point-set
    request can meet on the GPU, the hierarchy's and brute force's
    (:func:`gpu_core._points.warm_up.warm_up_points`; the service's workers do that while they
    start too), and HDBSCAN*'s estimator end to end: fits, predictions, membership vectors, outlier
    scores (:func:`gpu_core._clustering.warm_up.model_parts`). This is the full sweep, every size
    class many times over (seconds on a GPU even with every kernel in CuPy's cache); a service's
    worker runs :func:`warm_start` instead.
    Returns the backend that was warmed up.
    """
    if host_passes:
        warm_up_compiled()
    chosen = warm_up_graphs(backend)
    if points:
        warm_up_points(chosen)
        if chosen == "gpu":
            for _, part in model_parts():
                part()
    return chosen


def warm_start(
    backend: Literal["gpu", "cpu"],
    tasks: Callable[[], object] = lambda: None,
    *,
    lap: Callable[[str], object] = lambda name: None,
    beside: bool = False,
    finish_later: bool = False,
) -> dict[str, Any]:
    """Warm up every kernel a request can need before a service's worker says it is ready: the
    caller's ``tasks`` (its own warm-up: its tasks end to end on small datasets), then the graphs',
    the point sets' and the device path from a tree to HDBSCAN* labels (on the GPU quick where a
    manifest allows: :class:`_GpuStart`). Returns what it did: ``mode``, ``ms`` (milliseconds of
    ``warm_up``: everything but the caller's tasks, ``warm_up_tasks`` and, where the quick sweep
    fell short, ``warm_up_full``; ``lap(name)`` is called at the end of each, for the caller's own
    timing), and on the GPU ``parts`` (how many ran of how many), ``modules`` (CuPy modules built or
    loaded), ``compiled`` (NVRTC compilations: kernels not in CuPy's cache), ``load_ms`` and
    ``manifest``.

    With ``beside``, the quick sweep's parts run on a thread of their own while the caller's tasks
    run on this one (``warm_up_tasks`` is then the tasks' time, ``warm_up`` the wait for the parts
    after them): together they load what they load one after the other (a module is loaded by the
    first launch that needs it, whichever thread that is), and whatever either spends outside the
    interpreter (the device's synchronizations, module loads, file reads) the other can use. The
    full sweep always runs alone, in order: it notes which part loaded a module first.

    With ``beside`` and ``finish_later`` as well, a quick start returns as soon as the caller's
    tasks are done, the parts still running: its report's ``finish`` (a callable) waits for them,
    makes the manifest's check (the full sweep where it falls short) and returns the report
    complete. Every module the parts load is then in CuPy's kernel cache (the manifest says so:
    nothing is compiled), only not yet loaded into this process; a request meanwhile loads what it
    needs itself.

    Either way, once it is done, no request builds or loads a module the full sweep would have. The
    CPU backend compiles nothing: its warm-up is the graphs' parts (``mode="cpu"``).
    """
    laps = _Laps(lap)
    if backend != "gpu":
        tasks()
        laps("warm_up_tasks")
        warm_up_graphs(backend)
        laps("warm_up")
        return {"mode": "cpu", "ms": laps.ms}
    return _GpuStart(tasks, laps).run(beside, finish_later)


class _Laps:
    """Milliseconds per named step of a start (``ms``), each from the end of the one before;
    ``lap(name)`` is called at the end of each."""

    def __init__(self, lap: Callable[[str], object]) -> None:
        self.ms: dict[str, float] = {}
        self._started = time.perf_counter()
        self._lap = lap

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.ms[name] = round(self.ms.get(name, 0.0) + (now - self._started) * 1e3, 3)
        self._started = now
        self._lap(name)


class _GpuStart:
    """A start on the GPU, quick where the warm-up **manifest** allows.

    The full sweep (:func:`warm_up`'s: graphs of 2^0 to 2^22 + 1 edges, point sets of 3 to 2^14 + 1
    points, each of every dtype built, computed and queried, and the labels' device path on trees
    of 5 to 2^20 + 1 points) loads every module CuPy specializes by size, and takes seconds even with
    all of them in CuPy's kernel cache, nearly all of it execution. It is made of named parts, each
    independent of the others, and most load nothing new: a few of them (the graph dtypes', the
    queries', the size classes CuPy's reductions tell apart, the point sets' that load something of
    their own) load every module, in a fraction of the time (figures: docs/design/warm-up.md). The full
    sweep notes the parts that loaded a module first and every module loaded in a manifest in
    CuPy's kernel cache folder (:func:`manifest_path`, keyed by :func:`manifest_environment`:
    gpu_core's sources, CuPy's, NVRTC's and the driver's versions, the device's compute capability,
    the caller's tasks). So:

    * no manifest for this key (the first start on a kernel cache, or after an upgrade): the full
      sweep (``mode="full"``), which writes the manifest;
    * a manifest: only the parts it names, in the same order (``mode="quick"``), then a check that
      they loaded every module it lists. Each of those modules is loaded by a part that runs,
      whatever else runs (CuPy loads a module at the first launch that needs it in a process), so
      this holds unless a part's work changed (it is deterministic); if it does not, the full sweep
      runs too, before ready as ever, and writes the manifest again (``mode="full after quick"``,
      ``missing``; ``note`` says so for the log).
    """

    def __init__(self, tasks: Callable[[], object], laps: _Laps) -> None:
        from ._backend.census import kernel_census

        self.tasks = tasks
        self.laps = laps
        caller = f"{getattr(tasks, '__module__', '?')}.{getattr(tasks, '__qualname__', '?')}"
        self.environment = manifest_environment(caller)
        self.path = manifest_path(self.environment)
        self.manifest = read_manifest(self.path)
        self.sweep = _full_sweep()
        self.report: dict[str, Any] = {"manifest": str(self.path)}
        # the census stays on until the last part is done: with finish_later, after warm_start returns
        self.census_on = contextlib.ExitStack()
        self.census = self.census_on.enter_context(kernel_census())

    def run(self, beside: bool, finish_later: bool) -> dict[str, Any]:
        """The full sweep where there is no manifest, else the quick one: after the caller's tasks,
        or beside them (and, with ``finish_later``, handed over unfinished)."""
        handed_over = False
        try:
            if self.manifest is None:
                self.tasks()  # first: what it loads, no part needs to
                self.laps("warm_up_tasks")
                cover = _run(self.sweep, self.census.modules)
                self.laps("warm_up")
                self.report.update(mode="full", parts=f"{len(self.sweep)} of {len(self.sweep)}")
                return self.conclude(cover)
            listed = set(self.manifest.parts)
            quick = [(name, part) for name, part in self.sweep if name in listed]
            self.report.update(mode="quick", parts=f"{len(quick)} of {len(self.sweep)}", beside=beside)
            if not beside:
                self.tasks()
                self.laps("warm_up_tasks")
                cover = _run(quick, self.census.modules)
                self.laps("warm_up")
                return self.conclude(cover)
            parts = _Beside(quick, self.census.modules)
            try:
                self.tasks()
            finally:
                self.laps("warm_up_tasks")
            if finish_later:
                self.report.update(finish=partial(self.finish, parts), finish_later=True)
                handed_over = True  # the census stays on until finish()
                return self.report
            return self.finish(parts)
        finally:
            if not handed_over:
                self.census_on.close()  # a no-op where conclude() closed it

    def finish(self, parts: _Beside) -> dict[str, Any]:
        """Wait for the parts beside the caller's tasks, then :meth:`conclude`."""
        cover = parts.join()
        self.laps("warm_up")
        return self.conclude(cover)

    def conclude(self, cover: list[str]) -> dict[str, Any]:
        """The check of a quick sweep (a full one where it fell short), the manifest, the report."""
        report, census, manifest = self.report, self.census, self.manifest
        try:
            if manifest is not None:
                missing = manifest.modules - census.modules.keys()
                if missing:  # the parts that loaded a module in either run: a cover again
                    more = set(cover) | set(_run(self.sweep, census.modules))
                    cover = [name for name, _ in self.sweep if name in more]
                    self.laps("warm_up_full")
                    report.update(mode="full after quick", missing=len(missing))
                    report["note"] = (
                        f"the quick warm-up missed {len(missing)} of the {len(manifest.modules)} modules "
                        "the full sweep loads, so the full sweep ran too and wrote the manifest again"
                    )
            report.update(
                modules=len(census.modules), compiled=census.compiled, load_ms=round(census.load_ms, 3)
            )
        finally:
            self.census_on.close()
        if report["mode"] != "quick":
            written = write_manifest(
                self.path, Manifest(frozenset(census.modules), tuple(cover)), self.environment
            )
            if written is not None:
                notes = [report["note"]] if "note" in report else []
                report["note"] = "; ".join([*notes, f"the manifest could not be written: {written}"])
        report["ms"] = self.laps.ms
        return report


Part = tuple[str, Callable[[], object]]


def _full_sweep() -> list[Part]:
    """The GPU's full sweep, in named parts, cheap and broad ones first (so that they, not the costly
    ones, are the first to load most modules): the graphs' dtypes, edge cases and queries on small
    graphs, the point sets' parts (:func:`gpu_core._points.warm_up.point_parts`), the labels' device
    path on trees of every size class, the models' parts
    (:func:`gpu_core._clustering.warm_up.model_parts`), then graphs of every size class, smallest
    first."""
    from ._clustering.dendrogram_labels import WARM_UP_POINTS as DEVICE_SIZES
    from ._clustering.dendrogram_labels import warm_up_device_size
    from ._graphs.warm_up import WARM_UP_SIZES, graph_parts
    from ._points.warm_up import point_parts

    graphs = graph_parts("gpu", WARM_UP_SIZES)
    small = [part for part in graphs if not part[0].startswith("graph m=")]
    sized = [part for part in graphs if part[0].startswith("graph m=")]
    device = [(f"labels on the device n={n}", partial(warm_up_device_size, n)) for n in DEVICE_SIZES]
    return [*small, *point_parts(), *device, *model_parts(), *sized]


def _run(parts: list[Part], modules: dict[str, float]) -> list[str]:
    """Run ``parts`` in order; the names of those that loaded a module (``modules``: the census's,
    which grows as they do)."""
    loaded: list[str] = []
    for name, part in parts:
        count = len(modules)
        part()
        if len(modules) > count:
            loaded.append(name)
    return loaded


class _Beside:
    """:func:`_run` of some parts on a thread of its own, started now; :meth:`join` waits for it and
    returns what it returned (or raises what it raised)."""

    def __init__(self, parts: list[Part], modules: dict[str, float]) -> None:
        self._loaded: list[str] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, args=(parts, modules), name="warm-up-parts")
        self._thread.daemon = True
        self._thread.start()

    def _work(self, parts: list[Part], modules: dict[str, float]) -> None:
        try:
            self._loaded = _run(parts, modules)
        except BaseException as exc:  # raised again on the caller's thread
            self._error = exc

    def join(self) -> list[str]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._loaded


def _sources_digest() -> str:
    """A hash of gpu_core's sources (``.py`` and ``.cu``): the code that decides which kernels exist
    and which sizes the warm-up meets."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".cu") and p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def manifest_environment(tasks: str = "") -> dict[str, str]:
    """What the modules the full sweep loads depend on, beside the sizes it meets: a new value, a new
    manifest (CuPy's kernel cache keys its files by the same things, so a new one is cold too), and
    the caller's ``tasks`` (their name: what they load, no part needs to)."""
    import cupy
    import numpy as np

    try:
        nvrtc = ".".join(str(v) for v in cupy.cuda.nvrtc.getVersion())
    except Exception as exc:  # an NVRTC CuPy cannot load: the first compilation will say so
        nvrtc = f"unknown ({type(exc).__name__})"
    return {
        "gpu_core": _sources_digest(),
        "cupy": cupy.__version__,
        "numpy": np.__version__,
        "nvrtc": nvrtc,
        "cuda_runtime": str(cupy.cuda.runtime.runtimeGetVersion()),
        "driver": str(cupy.cuda.runtime.driverGetVersion()),
        "compute_capability": str(cupy.cuda.Device().compute_capability),
        "cupy_accelerators": os.environ.get("CUPY_ACCELERATORS", "(default)"),
        "tasks": tasks,
    }


def manifest_path(environment: dict[str, str], cache_dir: str | None = None) -> Path:
    """The manifest's file for ``environment`` in CuPy's kernel cache folder (``cache_dir``, else
    ``CUPY_CACHE_DIR``, else ``~/.cupy/kernel_cache``, where CuPy keeps its compiled kernels)."""
    folder = cache_dir or os.environ.get("CUPY_CACHE_DIR") or os.path.expanduser("~/.cupy/kernel_cache")
    key = hashlib.sha256(json.dumps(environment, sort_keys=True).encode()).hexdigest()[:16]
    return Path(folder) / f"{MANIFEST_PREFIX}{key}.json"


@dataclass(frozen=True)
class Manifest:
    """What a full sweep loaded: every module (:func:`gpu_core._backend.census.module_name`) and the
    parts that loaded one first, in the sweep's order."""

    modules: frozenset[str]
    parts: tuple[str, ...]


def read_manifest(path: Path) -> Manifest | None:
    """The manifest at ``path``; None where there is no readable one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        modules, parts = data["modules"], data["parts"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (isinstance(modules, list) and isinstance(parts, list)):
        return None
    if not all(isinstance(name, str) for name in (*modules, *parts)):
        return None
    return Manifest(frozenset(modules), tuple(parts))


def write_manifest(path: Path, manifest: Manifest, environment: dict[str, str]) -> str | None:
    """Write ``manifest`` atomically (a start reading it meanwhile sees the old one or none); None, or
    why it could not be written (a read-only cache folder: every start then runs the full sweep)."""
    body = {
        "environment": environment,
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "parts": list(manifest.parts),
        "modules": sorted(manifest.modules),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial_file = path.with_name(f".{path.name}.{os.getpid()}")
        partial_file.write_text(json.dumps(body, indent=1), encoding="utf-8")
        os.replace(partial_file, path)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
