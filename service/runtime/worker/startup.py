"""A worker's start-up, before it says ``ready``: the engine, the device, every task and kernel warmed.

:func:`start` imports CuPy and the engine, opens the device (the CUDA context), runs every task
once on small datasets (:func:`warm_up_tasks`) and every kernel a request can need
(``gpu_core._warm_up.warm_start``: the parts of the full sweep a manifest in the kernel cache
names, or the full sweep where there is none), loads Numba's compiled passes on a thread
meanwhile, and computes the probe graph; its ``ready`` info says what each step took
(``startup_ms``) and how the kernels were warmed up (``warm_up``), so no request compiles, loads
or imports anything afterwards. What each step costs: docs/design/warm-up.md.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ...errors import WorkerInternalError
from ...timing import Steps
from .state import Worker


def start(worker: Worker, beside: bool = True, background: bool = True) -> dict[str, Any]:
    """Import the engine, open the device, warm up every task and kernel and compute the probe
    graph; the ``ready`` info. ``beside``: on the GPU, a quick warm-up runs the kernels' parts on a
    thread of their own while the tasks run on this one (``gpu_core._warm_up.warm_start``); it
    ties with warming up after them for a worker alone and makes the service ready sooner
    (docs/design/warm-up.md).

    ``background`` (with ``beside``, on a quick start): ``ready`` once the tasks are warm, every
    request kind run end to end, and the kernels' remaining parts (modules of other size classes,
    all in the kernel cache: nothing is compiled) go on loading on their thread after it; a request
    meanwhile loads what it needs itself. :attr:`Worker.warmed` is set when they are done
    (:attr:`Worker.warm_up` their report); without ``background`` (or on a full sweep, or the CPU)
    it is set before this returns.

    Its ``startup_ms`` says where the time went: ``imports`` (gpu_core, and CuPy for the GPU),
    ``device`` (the CUDA context), ``warm_up_tasks`` (point sets' tasks and graph dendrograms,
    :func:`warm_up_tasks`), ``warm_up`` (every kernel: :func:`gpu_core._warm_up.warm_start`, the
    parts its manifest names, or the full sweep; ``warm_up_full`` where the quick one fell
    short), ``host_passes`` (the wait for Numba's compiled HDBSCAN* passes, loaded on a thread
    meanwhile: ``host_passes_thread`` is what that thread took), ``probe``, ``release``; its
    ``warm_up`` what ``warm_start`` reported (``mode`` quick or full, ``parts``, ``modules``,
    ``compiled``, ``load_ms``, ``manifest``; a ``note`` is also printed to stderr).
    """
    import gpu_core  # first import of the engine (and CuPy) happens here, in the child

    steps = Steps()
    worker.backend = gpu_core.resolve_backend(worker.config.backend)  # imports CuPy for the GPU
    steps.lap("imports")
    if worker.backend == "gpu":
        import cupy

        cupy.cuda.runtime.memGetInfo()  # the first call that needs it creates the CUDA context
    steps.lap("device")
    if worker.config.warm_up == "none":  # MST_WARM_UP=none: requests load what they need themselves
        kernels: dict[str, Any] = {"mode": "none"}
        probe = probe_ms(worker)
        steps.lap("probe")
        _warmed(worker, kernels)
    else:
        probe, kernels = _warm_up(worker, steps, beside, background)
    free, total = worker.memory()
    # a snapshot: a quick warm-up's rest may still lap `steps` on its thread after ready
    startup_ms = dict(steps.ms)
    return {
        "pid": os.getpid(),
        "backend": worker.backend,
        "device": device_name(worker),
        "warmup_ms": sum(v for k, v in startup_ms.items() if k != "host_passes_thread"),
        "startup_ms": startup_ms,
        "warm_up": {k: v for k, v in kernels.items() if k != "ms"},
        "probe_ms": probe,
        "free_bytes": free,
        "total_bytes": total,
    }


def _warm_up(worker: Worker, steps: Steps, beside: bool, background: bool) -> tuple[float, dict[str, Any]]:
    """:func:`start`'s warm-up of every task and kernel, then the probe graph: (the probe's ms, the
    kernels' report); ``steps`` gets its laps and ``host_passes_thread``."""
    passes = _OnThread(_warm_up_host_passes, "warm-up-host-passes")
    from gpu_core._warm_up import warm_start

    later = background and beside and worker.backend == "gpu"
    # what the sets and parts left for after ready import (brute force; the host's k-d tree, for
    # lists longer than the device's): imported before ready, as ready promises, on a thread
    imports = _OnThread(_import_after_ready_modules if later else lambda: None, "warm-up-imports")
    # the tasks under warm_up_tasks' own name: warm_start keys its manifest by the caller's tasks
    tasks = functools.wraps(warm_up_tasks)(lambda: warm_up_tasks(worker, before_ready=later))
    kernels = warm_start(worker.backend, tasks, lap=steps.lap, beside=beside, finish_later=later)
    finish = kernels.pop("finish", None)
    if later and finish is None:  # a full sweep: everything before ready
        warm_up_after_ready(worker)
    passes_ms = passes.join()
    imports.join()
    steps.lap("host_passes")
    probe = probe_ms(worker)
    steps.lap("probe")
    if finish is None:
        _warmed(worker, kernels)
    else:  # the rest's modules are in the kernel cache (quick mode): loaded after ready, on a thread
        rest = threading.Thread(target=_finish_warm_up, args=(worker, finish), name="warm-up-rest")
        rest.daemon = True
        rest.start()
    steps.lap("release")
    steps.add({"host_passes_thread": passes_ms}, "")
    return probe, kernels


def _warmed(worker: Worker, report: dict[str, Any]) -> None:
    """The warm-up is done: its scratch blocks go back to the device, its note to the log."""
    if "note" in report:
        print(f"mst-worker: warm-up: {report['note']}", file=sys.stderr, flush=True)
    worker.release_cached()
    worker.warm_up = {k: v for k, v in report.items() if k != "ms"}
    worker.warmed.set()


def _finish_warm_up(worker: Worker, finish: Callable[[], dict[str, Any]]) -> None:
    """After ready: the point sets left for then (:func:`warm_up_after_ready`), then the wait for
    the kernels' parts; a failure is logged, not fatal (a request that needs a module they did not
    load loads it itself)."""
    try:
        warm_up_after_ready(worker)
        report = finish()
    except Exception as exc:
        print(f"mst-worker: the warm-up's parts failed after ready: {exc!r}", file=sys.stderr, flush=True)
        report = {"error": repr(exc)}
    _warmed(worker, report)


#: the point sets' dimensions warmed before ready when the rest may wait (:func:`start`'s
#: ``background``): the packed and the general spatial index; brute force's (40) after ready
BEFORE_READY_DIMENSIONS = (3, 5)


def warm_up_tasks(worker: Worker, before_ready: bool = False) -> None:
    """Every task a request can run, once, end to end: a point set's tasks on small sets
    (:func:`.points.warm_up`) and a graph's dendrogram of each weight dtype. Run by
    :func:`gpu_core._warm_up.warm_start` before the kernels' parts (what it loads, no part need
    load again); the CPU backend's whole warm-up with the graphs'. ``before_ready``: only the
    sets of :data:`BEFORE_READY_DIMENSIONS` (:func:`warm_up_after_ready` runs the others)."""
    import numpy as np

    import gpu_core

    from .points import warm_up as warm_up_points

    if before_ready:
        warm_up_points(worker.backend, BEFORE_READY_DIMENSIONS, single=False)
    else:
        warm_up_points(worker.backend)
    src, dst = np.array([0, 1, 2, 0, 3]), np.array([1, 2, 0, 3, 4])
    for dtype in gpu_core.WEIGHT_DTYPES:
        weights = np.array([3, 1, 2, 5, 4], dtype=dtype)
        gpu_core.Graph(src, dst, weights, 5, backend=worker.backend).single_linkage()


def warm_up_after_ready(worker: Worker) -> None:
    """The point sets :func:`warm_up_tasks` leaves with ``before_ready``: brute force's dimensions
    and the one-blob sets (the root chosen); their modules are in the kernel cache, their Python
    modules imported before ready."""
    from .points import WARM_UP_DIMENSIONS
    from .points import warm_up as warm_up_points

    rest = tuple(d for d in WARM_UP_DIMENSIONS if d not in BEFORE_READY_DIMENSIONS)
    warm_up_points(worker.backend, rest, single=True)


def probe_ms(worker: Worker) -> float:
    """Compute a tiny forest and check its answer; the milliseconds it took."""
    import numpy as np

    import gpu_core

    forest = gpu_core.Graph(
        np.array([0, 1, 2, 0]), np.array([1, 2, 0, 3]), np.array([1, 2, 3, 4]), 5, backend=worker.backend
    ).minimum_spanning_forest()
    if forest.edge_ids.tolist() != [0, 1, 3] or forest.total_weight != 7 or forest.num_components != 2:
        raise WorkerInternalError(f"the device computed a wrong forest for the probe graph: {forest}")
    return forest.compute_ms


def device_name(worker: Worker) -> str:
    if worker.backend != "gpu":
        return "cpu"
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props.get("name", b"cuda")
    name = name.decode() if isinstance(name, bytes) else str(name)
    return f"{name} (CUDA_VISIBLE_DEVICES={worker.config.cuda_device})"


class _OnThread:
    """``work()`` on a thread of its own, started now; :meth:`join` waits for it."""

    def __init__(self, work: Callable[[], object], name: str) -> None:
        self._ms = 0.0
        self._thread = threading.Thread(target=self._run, args=(work,), name=name, daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], object]) -> None:
        started = time.perf_counter()
        try:
            work()
        finally:
            self._ms = (time.perf_counter() - started) * 1e3

    def join(self) -> float:
        """Wait for the work; the milliseconds it took."""
        self._thread.join()
        return self._ms


def _import_after_ready_modules() -> None:
    import gpu_core._points.brute_cpu
    import gpu_core._points.brute_gpu
    import gpu_core._points.cpu  # noqa: F401


def _warm_up_host_passes() -> None:
    """Compile (or load from Numba's cache) the host passes of HDBSCAN* and single linkage; a
    failure is logged, not fatal: only the requests that need them would fail."""
    from gpu_core._clustering.hdbscan import warm_up_compiled

    try:
        warm_up_compiled()
    except Exception as exc:
        import sys

        print(f"mst-worker: the compiled host passes failed to load: {exc!r}", file=sys.stderr)
