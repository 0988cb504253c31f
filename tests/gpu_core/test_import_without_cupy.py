"""``import gpu_core`` and the CPU backend work where CuPy cannot be imported.

Each check runs in a fresh interpreter, with a meta-path finder that refuses
``cupy``/``cupyx`` and records every attempt to import them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from tests.utils.oracles import kruskal_edge_ids

ROOT = Path(__file__).resolve().parents[2]

PRELUDE = """
import importlib.abc, json, sys

ATTEMPTS = []

class BlockCupy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("cupy", "cupyx", "cupy_backends"):
            ATTEMPTS.append(name)
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None

for mod in [m for m in sys.modules if m.split(".")[0] in ("cupy", "cupyx", "cupy_backends")]:
    del sys.modules[mod]
sys.meta_path.insert(0, BlockCupy())
"""


def run(body: str, prelude: str = PRELUDE) -> dict:
    """Run ``body`` after ``prelude`` in a fresh interpreter; the JSON of its last output line."""
    code = prelude + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_and_cpu_backend_never_touch_cupy() -> None:
    out = run(
        """
        import numpy as np
        import gpu_core
        after_import = list(ATTEMPTS)
        f = gpu_core.minimum_spanning_forest(
            np.array([0, 1, 2, 0]), np.array([1, 2, 0, 3]), np.array([3.0, 1.0, 2.0, 5.0]), backend="cpu"
        )
        g = gpu_core.Graph([0, 1], [1, 2], [1, 1], backend="cpu")
        formats = gpu_core.read_graph(b"0 1 2\\n", "edgelist")
        print(json.dumps({
            "after_import": after_import,
            "after_cpu": list(ATTEMPTS),
            "ids": f.edge_ids.tolist(),
            "total": f.total_weight,
            "backend": g.minimum_spanning_forest().backend,
            "m": int(formats.weight.size),
        }))
        """
    )
    assert out["after_import"] == [], "import gpu_core tried to import CuPy"
    assert out["after_cpu"] == [], "the CPU backend tried to import CuPy"
    src, dst, weight = np.array([0, 1, 2, 0]), np.array([1, 2, 0, 3]), np.array([3.0, 1.0, 2.0, 5.0])
    expected = kruskal_edge_ids(src, dst, weight, 4)
    assert out["ids"] == expected and out["total"] == float(weight[expected].sum())
    assert (out["backend"], out["m"]) == ("cpu", 1)


def test_auto_falls_back_to_cpu_and_gpu_is_a_clear_error() -> None:
    out = run(
        """
        import gpu_core
        from gpu_core.errors import BackendUnavailableError
        auto = gpu_core.Graph([0, 1], [1, 2], [2, 1], backend="auto")
        try:
            gpu_core.Graph([0, 1], [1, 2], [2, 1], backend="gpu")
            message = None
        except BackendUnavailableError as exc:
            message = str(exc)
        print(json.dumps({
            "available": gpu_core.gpu_available(),
            "auto": auto.backend,
            "resolved": gpu_core.resolve_backend("auto"),
            "warm": gpu_core.warm_up(),
            "total": auto.minimum_spanning_forest().total_weight,
            "message": message,
            "tried": sorted(set(ATTEMPTS)),
        }))
        """
    )
    assert out["available"] is False
    assert out["auto"] == out["resolved"] == out["warm"] == "cpu"
    assert out["total"] == sum([2, 1][i] for i in kruskal_edge_ids([0, 1], [1, 2], [2, 1], 3))
    assert out["message"] is not None and "CuPy" in out["message"] and "backend='gpu'" in out["message"]
    assert out["tried"] == ["cupy"], "the GPU probe imports cupy, and only cupy"


def test_sys_modules_none_blocks_cupy_too() -> None:
    """The other common way to hide a package: ``sys.modules['cupy'] = None``."""
    out = run(
        """
        import json, sys
        sys.modules["cupy"] = None
        import gpu_core
        f = gpu_core.minimum_spanning_forest([0, 1, 1], [1, 2, 2], [4, 9, 7])
        print(json.dumps({"backend": f.backend, "ids": f.edge_ids.tolist(), "gpu": gpu_core.gpu_available()}))
        """,
        prelude="",
    )
    assert out == {
        "backend": "cpu",
        "ids": kruskal_edge_ids([0, 1, 1], [1, 2, 2], [4, 9, 7], 3),
        "gpu": False,
    }
