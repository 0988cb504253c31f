"""A ready worker has warmed up every task: no request compiles a kernel, loads a compiled pass or
imports a module afterwards (docs/operations.md, "Failures and restarts": ``/readyz`` is not ready
before that).

A fresh interpreter starts a worker as the service does (``worker.startup.start``: what precedes its
``ready``), then runs every request kind through the worker's own handler: graphs of each weight
dtype (forests min and max, what-if exclusions, components, clusters, dendrogram, weight updates)
and point sets of both coordinate dtypes, 1 to 64 dimensions (the spatial index's and brute
force's), below and above the size where
HDBSCAN*'s compiled passes take over (EMST of several ``min_samples``, HDBSCAN* by excess of mass
and by leaves with an epsilon, single linkage, and the predict route's models: fits of each kind
of selection, predictions with and without membership vectors: these may load a module, see
below). It counts what those requests
made the process do for the first time: modules imported, overloads added to Numba's dispatchers
(a compilation or a load from Numba's cache), and on the GPU modules CuPy had to build or load
(``cupy.cuda.compiler._compile_module_with_cache``, as tests/gpu_core/graphs/test_warm_up.py counts:
a load from the kernel cache counts as much as a compilation) and NVRTC programs it compiled (a
kernel's source, or the empty probe CuPy compiles once per set of options). Each count must be zero.

On the GPU the worker's start is the quick one whenever the kernel cache holds a warm-up manifest
(``gpu_core._warm_up.warm_start``): a first process makes sure there is one (a full sweep if there
was none: slow once per kernel cache and version), a second one must then start quick, its check
that it loaded every module the full sweep loads passing, and its requests must load nothing.
The test uses the environment's kernel cache (``CUPY_CACHE_DIR``): warm, it takes seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys, tempfile
from pathlib import Path
import numpy as np

backend, requests = sys.argv[1], sys.argv[2] == "requests"
compiled, nvrtc = [], []
if backend == "gpu":
    from cupy.cuda import compiler
    original = compiler._compile_module_with_cache
    def counting(*args, **kwargs):
        compiled.append(where)
        return original(*args, **kwargs)
    compiler._compile_module_with_cache = counting
    original_program = compiler._NVRTCProgram.compile
    def counting_program(self, *args, **kwargs):
        nvrtc.append(where if self.src else f"{where} (probe)")
        return original_program(self, *args, **kwargs)
    compiler._NVRTCProgram.compile = counting_program

from numba.core.dispatcher import Dispatcher
from service.runtime.worker.ops import handle
from service.runtime.worker.protocol import FIT, LOAD, MST, PREDICT, WEIGHTS, WorkerConfig
from service.runtime.worker.startup import start
from service.runtime.worker.state import Worker

def overloads():
    return {f"{name}.{key}": len(value.overloads)
            for name, module in list(sys.modules.items()) if name.startswith("gpu_core")
            for key, value in vars(module).items() if isinstance(value, Dispatcher)}

tmp = Path(tempfile.mkdtemp())
worker = Worker(WorkerConfig(0, backend, str(tmp), str(tmp / "w.sock"), None, str(tmp), 10**8, 0.5))
where = "start"
ready = start(worker, beside=sys.argv[3] in ("beside", "at-ready"))
ready_warm_up = ready["warm_up"]
if sys.argv[3] != "at-ready":  # else the requests run while the parts may still be loading
    assert worker.warmed.wait(600), "the warm-up's parts did not finish"
    ready["warm_up"] = {**worker.warm_up, "at_ready": ready_warm_up}
if not requests:
    print(json.dumps({"warm_up": ready["warm_up"]}))
    sys.exit(0)
before_modules, before_overloads = set(sys.modules), overloads()
compiled.clear()
nvrtc.clear()

def run(op, *args):
    ok, payload, after, _ = handle(worker, op, args)
    if not ok:
        raise payload
    if after is not None:
        after()
    return payload

rng = np.random.default_rng(3)
for dtype in (np.int32, np.int64, np.float32, np.float64):
    for n, m in ((300, 2000), (50_000, 300_000)):
        where = f"graph {np.dtype(dtype).name} m={m}"
        src = np.concatenate([np.arange(n - 1), rng.integers(0, n, m - n + 1)]).astype(np.int32)
        dst = np.concatenate([np.arange(1, n), rng.integers(0, n, m - n + 1)]).astype(np.int32)
        weight = rng.integers(-50, 50, m).astype(dtype)
        path = tmp / f"g{n}{np.dtype(dtype).name}.npz"
        np.savez(path, src=src, dst=dst, weight=weight, num_vertices=np.int64(n))
        gid = path.stem
        run(LOAD, gid, str(path), "npz", None, None, None)
        for task, params in (("mst", {}), ("mst", {"objective": "max"}), ("mst", {"exclude": [0, 5]}),
                             ("components", {}), ("clusters", {"k": 3}), ("clusters", {"threshold": 1}),
                             ("dendrogram", {})):
            where = f"graph {np.dtype(dtype).name} m={m} {task} {params}"
            run(MST, gid, str(tmp / "r.npz"), task, params)
        where = f"graph {np.dtype(dtype).name} m={m} weights"
        new = tmp / "w.npz"
        np.savez(new, edge_ids=np.array([0, 1]), weights=np.array([7, 8], dtype=dtype))
        run(WEIGHTS, gid, str(new), "npz", str(tmp / "w.npy"), 0)
        run(MST, gid, str(tmp / "r.npz"), "mst", {})

for dtype in (np.float32, np.float64):
    for dims in (1, 2, 3, 5, 20, 64):  # 20: brute force on the CPU (above 12), 64 on either backend
        # above COMPILED_FROM (1,000) and past one tile of the CPU's brute force (2,048 targets);
        # brute force's time grows with n^2, so the wide sets stop at 2,500 (CI's time)
        for n in (200, 5000 if dims <= 5 else 2500):
            where = f"points {np.dtype(dtype).name} d={dims} n={n}"
            path = tmp / f"p{n}{dims}{np.dtype(dtype).name}.npz"
            np.savez(path, points=rng.random((n, dims)).astype(dtype))
            pid = path.stem
            run(LOAD, pid, str(path), "points.npz", None, None, None)
            for task, params in (("emst", {"min_samples": 1}), ("emst", {"min_samples": 7}),
                                 ("emst", {"min_samples": 30}), ("single_linkage", {}),
                                 ("hdbscan", {"min_cluster_size": 5}),
                                 ("hdbscan", {"min_cluster_size": 10, "cluster_selection_method": "leaf",
                                              "cluster_selection_epsilon": 0.1})):
                where = f"points {np.dtype(dtype).name} d={dims} n={n} {task} {params}"
                run(MST, pid, str(tmp / "r.npz"), task, params)
            models = ({"min_cluster_size": 5},
                      {"min_cluster_size": 5, "min_samples": 3, "cluster_selection_method": "leaf"},
                      {"min_cluster_size": 5, "cluster_selection_epsilon": 0.5, "allow_single_cluster": True},
                      {"min_cluster_size": 4, "max_cluster_size": 10})
            for i, params in enumerate(models):  # the predict route's models: fit, then predict
                where = f"points {np.dtype(dtype).name} d={dims} n={n} fit {params}"
                run(FIT, pid, f"m{i}", params)
                for membership in (False, True):
                    where = f"points {np.dtype(dtype).name} d={dims} n={n} predict {params} {membership}"
                    queries = rng.random((9, dims))
                    run(PREDICT, pid, f"m{i}", params, (n, dims), queries, None, membership)

after_overloads = overloads()
# membership vectors of models with many clusters reduce rows of a width CuPy's reductions tell
# apart by size class: their first may load such a module from the kernel cache (never compile it)
predict_loads = [w for w in compiled if " predict " in w]
compiled = [w for w in compiled if " predict " not in w]
print(json.dumps({
    "predict_loads": len(predict_loads),
    # a codec zipfile looks up by name for a member's name (microseconds): not a cost to warm up
    "modules": sorted(m for m in set(sys.modules) - before_modules if not m.startswith("encodings.")),
    "overloads": {k: v for k, v in after_overloads.items() if v != before_overloads.get(k, 0)},
    "compiled": compiled,
    "nvrtc": nvrtc,
    "warm_up": ready["warm_up"],
}))
"""


#: one fresh worker's start and requests; on a machine whose kernel cache is empty the first start
#: compiles every kernel (minutes, more with several tests compiling at once)
_START_TIMEOUT_S = 600
#: the GPU tests' own limit, above the project's 300 s: each starts a worker twice
_TWO_STARTS = pytest.mark.timeout(2 * _START_TIMEOUT_S + 60)


def _first_time(backend: str, requests: bool = True, way: str = "beside") -> dict[str, Any]:
    """What a fresh worker process's start reports and, with ``requests``, what every request
    made it do for the first time after that. ``way``: the quick warm-up's parts ``beside`` the
    worker's tasks (on a thread of their own, the worker's default, and the requests once they are
    done), ``after`` them, or ``at-ready``: beside, the requests straight after ready."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, backend, "requests" if requests else "start", way],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=_START_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


NOTHING: dict[str, Any] = {"modules": [], "overloads": {}, "compiled": [], "nvrtc": []}


@pytest.mark.slow
def test_no_request_imports_or_compiles_once_a_cpu_worker_is_ready() -> None:
    first = _first_time("cpu")
    assert first.pop("predict_loads") == 0
    assert first.pop("warm_up") == {"mode": "cpu", "at_ready": {"mode": "cpu"}}
    assert first == NOTHING, first


@pytest.mark.gpu
@_TWO_STARTS
@pytest.mark.parametrize("way", ["beside", "after"])
def test_no_request_compiles_or_loads_a_kernel_once_a_gpu_worker_is_ready_after_a_quick_start(
    way: str,
) -> None:
    before = _first_time("gpu", requests=False)["warm_up"]  # a manifest from now on
    assert before["mode"] in ("full", "quick"), before
    first = _first_time("gpu", way=way)
    print({"predictions' loads": first.pop("predict_loads")})
    warm_up = first.pop("warm_up")
    print({"before": before, "after": warm_up})
    assert warm_up["mode"] == "quick", warm_up  # "full after quick": the quick sweep missed a module
    assert warm_up["beside"] is (way == "beside"), warm_up
    # beside the tasks, the parts go on loading after ready (their modules all in the kernel cache)
    assert warm_up["at_ready"].get("finish_later", False) is (way == "beside"), warm_up
    assert warm_up["compiled"] == 0, warm_up  # the first process filled the kernel cache
    assert first == NOTHING, first


@pytest.mark.gpu
@_TWO_STARTS
def test_no_request_compiles_a_kernel_right_after_ready() -> None:
    """Requests straight after ready, while the kernels' parts may still be loading (the default
    start): no kernel is compiled (NVRTC), nothing imported or added to Numba's dispatchers; a
    request may load a module from the kernel cache itself, and that may make CuPy compile its
    empty probe program (once per set of options and process: NVRTC's version, no kernel)."""
    _first_time("gpu", requests=False)  # a manifest from now on
    first = _first_time("gpu", way="at-ready")
    print({"predictions' loads": first.pop("predict_loads")})
    warm_up = first.pop("warm_up")
    assert warm_up["mode"] == "quick" and warm_up["finish_later"] is True, warm_up
    first["nvrtc"] = [where for where in first["nvrtc"] if not where.endswith("(probe)")]
    print({"loaded by requests": len(first.pop("compiled"))})
    assert first == {k: v for k, v in NOTHING.items() if k != "compiled"}, first
