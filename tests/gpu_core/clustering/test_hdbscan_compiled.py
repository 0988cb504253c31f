"""The compiled (Numba) HDBSCAN* passes give the NumPy path's labels and probabilities, bit for bit.

Three ways to the same answer on each tree: ``labels_from_edges(compiled=True)`` (union-find and
condensed tree in one pass, no linkage matrix), ``labels_from_tree(compiled=True)`` (from the
linkage matrix, as the service runs it on a kept dendrogram) and the NumPy path
(``compiled=False``), which ``test_hdbscan.py`` checks against scikit-learn. Trees: random trees
with heavy weight ties and zero weights (duplicates: lambda = inf), random trees of distinct
weights, and mutual-reachability trees of clustered, duplicated and grid points; every
``min_cluster_size`` from 2 to 50, both selection methods, epsilon 0 and epsilons at quantiles of
the weights (so the epsilon merge changes the answer), and trees of 2 to 5 points.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpu_core
from gpu_core import errors
from gpu_core._clustering import hdbscan as _hdbscan
from gpu_core._clustering import passes as _passes
from tests.utils import condensed_rows
from tests.utils.points import blobs, duplicated, integer_grid

pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parents[3]


def random_tree(rng: np.random.Generator, n: int, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random spanning tree of ``n`` vertices with its edges in merge order (ties: as listed)."""
    attach = np.array([rng.integers(0, i) for i in range(1, n)], dtype=np.int64)
    if kind == "chain":  # long paths: large clusters that absorb single points
        attach = np.maximum(np.arange(1, n) - 1 - rng.integers(0, 3, n - 1), 0)
    perm = rng.permutation(n)
    u, v = perm[1:], perm[attach]
    if kind == "ties":
        w = rng.integers(0, rng.integers(2, 12), n - 1).astype(np.float64)  # many equal, zeros
    else:
        w = rng.random(n - 1) ** 3
    order = np.argsort(w, kind="stable")
    return u[order], v[order], w[order]


def point_tree(seed: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    maker = (blobs, duplicated, integer_grid)[seed % 3]
    tree = gpu_core.euclidean_mst(maker(seed, n, 2).points, min_samples=1 + seed % 6, backend="cpu")
    return tree.src, tree.dst, tree.weights


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def check_three_ways(u, v, w, mcs: int, method: str, eps: float) -> tuple[np.ndarray, np.ndarray]:
    n = len(u) + 1
    ref = _hdbscan.labels_from_edges(n, u, v, w, mcs, method, eps, compiled=False)
    fused = _hdbscan.labels_from_edges(n, u, v, w, mcs, method, eps, compiled=True)
    linkage = gpu_core.linkage_from_sorted_edges(n, u, v, w)
    kept = _hdbscan.labels_from_tree(linkage, mcs, method, eps, compiled=True)
    for got in (fused, kept):
        assert same_bits(got[0], ref[0]), (n, mcs, method, eps)
        assert same_bits(got[1], ref[1]), (n, mcs, method, eps)
    return ref


@pytest.mark.parametrize("seed", range(48))
def test_compiled_equals_numpy_on_random_trees(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.choice([6, 17, 60, 300, 1500, 4000]))
    kind = ("ties", "distinct", "chain")[seed % 3]
    u, v, w = random_tree(rng, n, kind) if seed % 4 else point_tree(seed, n)
    clustered = 0
    for _ in range(10):
        mcs = int(rng.integers(2, 51))
        method = str(rng.choice(["eom", "leaf"]))
        eps = 0.0 if rng.random() < 0.4 else float(np.quantile(w, rng.choice([0.1, 0.3, 0.6, 0.9, 1.0])))
        labels, _ = check_three_ways(u, v, w, mcs, method, eps)
        clustered += int(labels.max() >= 0)
    if n >= 300:
        assert clustered > 0  # the sets do cluster: the comparison is not one of all-noise answers


def compiled_condensed_tree(u, v, w, mcs: int) -> tuple[condensed_rows.CondensedTree, np.ndarray]:
    """The compiled passes' condensed tree and stabilities, as the NumPy path's rows."""
    n = len(u) + 1
    passes = _passes.compiled_passes()
    parent, aux, p_lam = _hdbscan._work_arrays(n)
    bad, *segments = passes.condense_edges(n, u, v, w, mcs, parent, aux, p_lam)
    assert bad == -1
    number, cl_parent, birth, cl_size, stability, _ = passes.cluster_tree(*segments, aux, p_lam)
    point_segment, point_lam = _hdbscan._point_fields(aux, p_lam)
    tree = condensed_rows.CondensedTree(
        parent=np.concatenate([cl_parent[1:], number[point_segment]]) + n,
        child=np.concatenate([n + np.arange(1, cl_parent.size), np.arange(n)]),
        lam=np.concatenate([birth[1:], point_lam]),
        size=np.concatenate([cl_size[1:], np.ones(n, dtype=np.int64)]),
        n=n,
    )
    return tree, stability


@pytest.mark.parametrize("seed", range(12))
def test_compiled_condensed_tree_and_stabilities_equal_numpy(seed: int) -> None:
    """Row for row and bit for bit: the stabilities are float sums, so their order matters (a
    different order rarely flips a selection, so the labels alone would not show it)."""
    rng = np.random.default_rng(100 + seed)
    u, v, w = random_tree(rng, int(rng.choice([40, 700, 3000])), ("ties", "distinct", "chain")[seed % 3])
    if seed % 4 == 0:
        u, v, w = point_tree(seed, 2000)
    for mcs in (2, 5, 17):
        ref = condensed_rows.condense(gpu_core.linkage_from_sorted_edges(len(u) + 1, u, v, w), mcs)
        got, stability = compiled_condensed_tree(np.asarray(u, np.int64), np.asarray(v, np.int64), w, mcs)
        for field in ("parent", "child", "lam", "size"):
            assert same_bits(getattr(got, field), getattr(ref, field)), field
        assert same_bits(stability, condensed_rows.stability(ref, stability.size))


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_compiled_equals_numpy_on_tiny_trees(n: int) -> None:
    rng = np.random.default_rng(n)
    for trial in range(30):
        u, v, w = random_tree(rng, n, "ties" if trial % 2 else "distinct")
        for mcs in (2, 3, 5):
            for method in ("eom", "leaf"):
                for eps in (0.0, float(w.max()), float(w.max()) * 2):
                    check_three_ways(u, v, w, mcs, method, eps)


def test_64_bit_point_records_give_the_same_answer() -> None:
    """Past 2^31 points the records hold 64-bit ids (32 bytes): the same passes, the same bits."""
    passes = _passes.compiled_passes()
    rng = np.random.default_rng(9)
    for kind in ("ties", "distinct", "chain"):
        u, v, w = random_tree(rng, 2000, kind)
        answers = []
        for wide in (False, True):
            parent, aux, p_lam = _hdbscan._work_arrays(2000, wide=wide)
            assert aux.itemsize == (8 if wide else 4)
            bad, *segments = passes.condense_edges(2000, u, v, w, 4, parent, aux, p_lam)
            assert bad == -1
            answers.append(_hdbscan._select_and_label(passes, tuple(segments), aux, p_lam, "eom", 0.0))
        assert same_bits(answers[0][0], answers[1][0]) and same_bits(answers[0][1], answers[1][1])
        assert answers[0][0].max() >= 1


def test_kept_work_buffers_are_reused_and_change_no_answer() -> None:
    """Calls reuse the last call's buffers (a smaller tree in a larger buffer, then a larger one
    in a new buffer); leftovers of an earlier tree must not leak into an answer."""
    rng = np.random.default_rng(12)
    trees = [random_tree(rng, n, kind) for n, kind in ((3000, "ties"), (1200, "chain"), (2500, "distinct"))]
    refs = [_hdbscan.labels_from_edges(len(u) + 1, u, v, w, 6, compiled=False) for u, v, w in trees]
    buffers = []
    for (u, v, w), ref in zip([*trees, trees[0]], [*refs, refs[0]], strict=True):
        got = _hdbscan.labels_from_edges(len(u) + 1, u, v, w, 6, compiled=True)
        assert same_bits(got[0], ref[0]) and same_bits(got[1], ref[1])
        buffers.append(_hdbscan._kept[0][1].ctypes.data)
    assert buffers[1] == buffers[2] == buffers[3]  # 1200 and 2500 points in the 3000-point buffer


def test_a_large_tree_with_outputs_written_ahead_by_a_thread() -> None:
    """From 100,000 points a helper thread prepares the outputs while the first pass runs."""
    u, v, w = random_tree(np.random.default_rng(13), 150_000, "ties")
    check_three_ways(u, v, w, 5, "eom", 0.0)
    labels, _ = check_three_ways(u, v, w, 8, "leaf", float(np.quantile(w, 0.3)))
    assert labels.max() >= 10


def test_epsilon_merge_changes_the_answer_and_still_agrees() -> None:
    """The epsilon walk is exercised, not skipped: it merges clusters of this set."""
    u, v, w = point_tree(0, 3000)  # blobs
    plain, _ = check_three_ways(u, v, w, 5, "leaf", 0.0)
    merged, _ = check_three_ways(u, v, w, 5, "leaf", float(np.quantile(w, 0.995)))
    assert 1 <= merged.max() < plain.max()


def test_compiled_path_reports_bad_trees_like_the_numpy_path() -> None:
    rng = np.random.default_rng(3)
    u, v, w = random_tree(rng, 3000, "distinct")
    u2, v2 = u.copy(), v.copy()
    u2[-1], v2[-1] = u[0], v[0]  # a cycle, one vertex left out
    messages = []
    for compiled in (False, True):
        with pytest.raises(errors.DisconnectedForestError) as info:
            _hdbscan.labels_from_edges(3000, u2, v2, w, 5, compiled=compiled)
        assert info.value.num_components == 2
        messages.append(str(info.value))
        with pytest.raises(errors.GraphValidationError, match="merge order"):
            _hdbscan.labels_from_edges(3000, u, v, w[::-1], 5, compiled=compiled)
        with pytest.raises(errors.GraphValidationError, match="outside"):
            _hdbscan.labels_from_edges(2999, u, v, w, 5, compiled=compiled)
    assert messages[0] == messages[1]


def test_hdbscan_takes_the_compiled_path_and_agrees(monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpu_core.hdbscan`` of more than COMPILED_FROM points runs the compiled passes."""
    points = blobs(5, 2500, 2, centers=8, spread=0.2).points
    assert points.shape[0] > _passes.COMPILED_FROM
    passes = _passes.compiled_passes()
    calls: list[int] = []
    original = passes.condense_edges

    def counted(*args: Any) -> Any:
        calls.append(args[0])
        return original(*args)

    monkeypatch.setattr(passes, "condense_edges", counted)
    ours = gpu_core.hdbscan(points, min_cluster_size=10, min_samples=4, backend="cpu")
    assert calls == [2500]
    tree = gpu_core.euclidean_mst(points, min_samples=4, backend="cpu")
    ref = _hdbscan.labels_from_edges(2500, tree.src, tree.dst, tree.weights, 10, compiled=False)
    assert same_bits(ours.labels, ref[0]) and same_bits(ours.probabilities, ref[1])
    assert ours.num_clusters == ref[0].max() + 1 >= 2
    assert {"linkage_ms", "selection_ms"} <= ours.timings_ms.keys()


def run(body: str, env: dict[str, str] | None = None) -> dict:
    """``body`` in a fresh interpreter; the JSON of its last output line."""
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(body)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_without_numba_the_numpy_path_gives_the_same_answer() -> None:
    points = blobs(6, 2000, 2, centers=6, spread=0.2).points
    out = run(
        """
        import json, sys
        sys.modules["numba"] = None  # Numba not installed
        import numpy as np
        import gpu_core
        from gpu_core._clustering import hdbscan as _hdbscan
        from gpu_core._backend.jit import available
        from tests.utils.points import blobs
        points = blobs(6, 2000, 2, centers=6, spread=0.2).points
        r = gpu_core.hdbscan(points, min_cluster_size=8, min_samples=3, backend="cpu")
        z = gpu_core.single_linkage(points)
        leaf = _hdbscan.labels_from_tree(z, 8, "leaf", 0.01)
        try:
            _hdbscan.labels_from_edges(3, [0, 1], [1, 2], [1.0, 2.0], 2, compiled=True)
            refused = False
        except RuntimeError:
            refused = True
        print(json.dumps({
            "available": available(), "refused": refused,
            "loaded": "gpu_core._clustering.compiled" in sys.modules,
            "labels": r.labels.tolist(), "prob": r.probabilities.tobytes().hex(),
            "leaf": leaf[0].tolist(), "leaf_prob": leaf[1].tobytes().hex(), "z": z.tobytes().hex(),
        }))
        """
    )
    assert out["available"] is False and out["refused"] is True and out["loaded"] is False
    ours = gpu_core.hdbscan(points, min_cluster_size=8, min_samples=3, backend="cpu")
    assert out["labels"] == ours.labels.tolist()
    assert bytes.fromhex(out["prob"]) == ours.probabilities.tobytes()
    z = gpu_core.single_linkage(points)
    assert bytes.fromhex(out["z"]) == z.tobytes()  # the compiled union-find's matrix, and Python's
    leaf = _hdbscan.labels_from_tree(z, 8, "leaf", 0.01)
    assert out["leaf"] == leaf[0].tolist() and bytes.fromhex(out["leaf_prob"]) == leaf[1].tobytes()
    assert max(out["labels"]) >= 1


WARM_CHECK = """
    import json, time
    import numpy as np
    t0 = time.perf_counter()
    import gpu_core
    from gpu_core._clustering import hdbscan as _hdbscan, passes as _passes
    from gpu_core._dendrogram import cpu as dendrogram_cpu
    gpu_core.warm_up("cpu")
    warm_up_s = time.perf_counter() - t0
    passes = _passes.compiled_passes()
    dispatchers = {
        "condense_edges": passes.condense_edges, "condense_linkage": passes.condense_linkage,
        "select_and_label": passes.select_and_label, "linkage": dendrogram_cpu._compiled(),
    }
    def state():
        return {k: [str(s) for s in d.signatures] for k, d in dispatchers.items()}
    warm = state()
    hits = {k: d.stats.cache_hits.total() for k, d in dispatchers.items()}
    misses = {k: d.stats.cache_misses.total() for k, d in dispatchers.items()}
    rng = np.random.default_rng(1)
    points = rng.random((3000, 2))
    for method, eps in (("eom", 0.0), ("leaf", 0.0), ("eom", 0.01), ("leaf", 0.02)):
        t = time.perf_counter()
        gpu_core.hdbscan(points, min_cluster_size=5, min_samples=5, cluster_selection_method=method,
                         cluster_selection_epsilon=eps, backend="cpu")
    index = gpu_core.build_point_index(points.astype(np.float32), backend="cpu")
    z = gpu_core.single_linkage(index)
    _hdbscan.labels_from_tree(z, 7, "leaf", 0.01)
    print(json.dumps({"warm": warm, "after": state(), "hits": hits, "misses": misses, "s": warm_up_s}))
"""


@pytest.mark.slow
def test_warm_up_compiles_every_pass_a_request_runs_and_a_restart_loads_them(tmp_path: Path) -> None:
    """After ``gpu_core.warm_up`` no request compiles; with ``NUMBA_CACHE_DIR`` (the image sets it)
    a second process loads the compiled passes from the cache instead of compiling them."""
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    first = run(WARM_CHECK, env)
    assert all(first["warm"][k] for k in first["warm"]), "warm_up left a pass uncompiled"
    assert first["after"] == first["warm"], "a request compiled a new specialization"
    assert sum(first["misses"].values()) > 0 and sum(first["hits"].values()) == 0  # an empty cache
    assert any((tmp_path / "numba").rglob("*.nbi"))
    second = run(WARM_CHECK, env)
    assert second["after"] == second["warm"] == first["warm"]
    assert sum(second["misses"].values()) == 0 and all(second["hits"].values())
