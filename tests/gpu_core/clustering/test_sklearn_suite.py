"""scikit-learn's own tests of ``HDBSCAN`` (``sklearn/cluster/tests/test_hdbscan.py`` of the installed
release) run against ``gpu_core.HDBSCAN``: the file is copied, its one import changed to
``from gpu_core import HDBSCAN``, and run by pytest in a process of its own (as CI runs NetworkX's
MST tests against the backend). Every test passes except those listed in :func:`not_applicable`,
each with the reason it cannot apply; they are marked ``xfail(strict=True)``, so one that starts
passing fails the run and the list has to shrink.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sklearn = pytest.importorskip("sklearn")

IMPORT = "from sklearn.cluster import HDBSCAN\n"
CONFTEST = '''
import pytest

NOT_APPLICABLE = {reasons!r}


@pytest.fixture
def global_random_seed():
    """scikit-learn's fixture at its default seed (SKLEARN_TESTS_GLOBAL_RANDOM_SEED unset)."""
    return 42


def pytest_collection_modifyitems(items):
    for item in items:
        reason = NOT_APPLICABLE.get(item.name)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
'''


def not_applicable() -> dict[str, str]:
    """The tests of the installed release that cannot apply to ``gpu_core.HDBSCAN``, with why."""
    from sklearn.metrics.pairwise import _VALID_METRICS
    from sklearn.neighbors import BallTree, KDTree

    from gpu_core._points.metrics import ALIASES

    ball_only = (set(BallTree.valid_metrics) - set(KDTree.valid_metrics)) & set(_VALID_METRICS)
    out = {
        f"test_hdbscan_algorithms[{metric}-ball_tree]": (
            f"{metric!r} is not one of the engine's metrics (euclidean, manhattan, chebyshev, minkowski, "
            "cosine, haversine, precomputed, callables): fit refuses it with a ValueError naming them"
        )
        for metric in sorted(ball_only - set(ALIASES))
    }
    out["test_hdbscan_algorithms[haversine-ball_tree]"] = (
        "the test's X (standardized blobs) has latitudes past pi/2, and haversine refuses out-of-range "
        "angles with a ValueError naming the row (scikit-learn computes on them)"
    )
    out["test_hdbscan_best_balltree_metric"] = (
        "'seuclidean' is not one of the engine's metrics: fit refuses it with a ValueError naming them"
    )
    out["test_hdbscan_default_copy_warning"] = (
        "scikit-learn 1.9's transitional FutureWarning for the default of copy (False now, True in 1.10); "
        "the engine never writes into X, so copy defaults to False with nothing to announce"
    )
    return out


@pytest.mark.slow
def test_scikit_learns_hdbscan_tests_pass_against_gpu_core(tmp_path: Path) -> None:
    source = Path(sklearn.__file__).parent / "cluster" / "tests" / "test_hdbscan.py"
    text = source.read_text(encoding="utf-8")
    assert text.count(IMPORT) == 1, "scikit-learn's test module no longer imports HDBSCAN in one line"
    (tmp_path / "test_hdbscan_gpu_core.py").write_text(text.replace(IMPORT, "from gpu_core import HDBSCAN\n"))
    reasons = not_applicable()
    (tmp_path / "conftest.py").write_text(CONFTEST.format(reasons=reasons), encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE", "-p", "no:randomly"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    summary = out.strip().splitlines()[-1]
    assert f"{len(reasons)} xfailed" in summary, summary
    assert "failed" not in summary.replace("xfailed", ""), summary
