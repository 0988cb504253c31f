"""Excess of mass by heavy paths (``gpu_core._clustering.eom_paths``): the host's selection, on the device.

Against a plain-Python oracle of the definition (resolved stabilities and choices, bit for bit
at every path head, NaN and inf included) and against ``_select.select_clusters``, on cluster
trees of every shape: random, balanced, caterpillars thousands of levels deep, equal child sizes,
and stabilities with exact ties (a ``>=`` for the host's ``>`` would fail), zeros, inf and NaN.
On the CPU with the kernels compiled for the host (each launch's threads in a shuffled order);
with CuPy (marked ``gpu``) at 10^6 clusters and 10^5 levels. Also the walks up a forest in one
launch (``find_roots``, ``find_roots_counted``) against a plain walk, on random forests and long
chains, in both orders of the threads.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

from gpu_core._clustering import condense as _condense
from gpu_core._clustering import eom_paths as _eom_paths
from gpu_core._clustering import select as _select
from tests.utils.hdbscan_kernels import host_compiler_available, host_launch

ClusterTree = tuple[np.ndarray, np.ndarray]  # parent, size (points)


def cluster_tree(rng: np.random.Generator, splits: int, shape: str, n: int = 10**6) -> ClusterTree:
    """A condensed tree's shape: root 0, children after parents, a split's children ``2j+1, 2j+2``.
    Sizes: a child has at least 2 points, the two together at most their parent's."""
    parent = [0]
    size = [n]
    open_ = [0]  # clusters that may still split
    for _ in range(splits):
        if not open_:
            break
        if shape == "caterpillar":  # the larger child of the last split: one long chain
            p = open_.pop()
            open_.clear()
        elif shape == "balanced":  # breadth first (a queue's front, by index)
            p = open_.pop(0) if len(open_) < 64 else open_[0]
            if len(open_) >= 64:
                open_[0] = open_[-1]
                open_.pop()
        else:  # any open cluster (swapped out of the list)
            i = int(rng.integers(len(open_)))
            p = open_[i]
            open_[i] = open_[-1]
            open_.pop()
        s = size[p]
        if s < 4:
            continue
        if shape == "caterpillar":  # a small child of 2 or 3 points, the rest (or one less) big
            small = int(rng.integers(2, 4))
            big = s - small - int(rng.integers(0, 2))
            a, b = (small, big) if rng.random() < 0.5 else (big, small)
        elif shape == "equal" or rng.random() < 0.2:
            a = b = s // 2
        else:
            a = int(rng.integers(2, s - 1))
            b = int(rng.integers(2, s - a + 1))
        k = len(parent)
        parent += [p, p]
        size += [a, b]
        if shape == "caterpillar":
            open_.append(k if a >= b else k + 1)
        else:
            open_ += [k, k + 1]
    return np.array(parent, dtype=np.int64), np.array(size, dtype=np.int64)


def stabilities(rng: np.random.Generator, count: int, kind: str) -> np.ndarray:
    if kind == "integers":  # exact ties between a cluster and its children's sum
        return rng.integers(0, 4, count).astype(np.float64)
    if kind == "sums":  # one scale: down a long path the children's sum soon wins at every step,
        return rng.random(count)  # as in the spines of real trees (eom_up's all-additions batches)
    values = rng.random(count) * 10.0 ** rng.integers(-3, 4, count)
    if kind == "specials":
        pick = rng.random(count)
        values[pick < 0.05] = 0.0
        values[(pick >= 0.05) & (pick < 0.08)] = np.inf
        values[(pick >= 0.08) & (pick < 0.1)] = np.nan
    return values


def python_eom(parent: np.ndarray, stability: np.ndarray) -> tuple[list[float], list[bool], list[int]]:
    """The definition in plain Python: resolved stabilities (the sum of the two children's,
    ``0.0 + second + first``, where it is larger), choices, and anchors (the topmost chosen
    cluster on the way from the root, 0 for none; the root is never chosen)."""
    count = len(parent)
    children: list[list[int]] = [[] for _ in range(count)]
    for c in range(1, count):
        children[int(parent[c])].append(c)
    resolved = [0.0] * count
    chose = [False] * count
    for c in range(count - 1, -1, -1):  # the root's too: the walk of the root's path ends there
        sub = 0.0
        for child in sorted(children[c], reverse=True):
            sub = sub + resolved[child]
        s = float(stability[c])
        if sub > s:
            resolved[c] = sub
        else:
            resolved[c], chose[c] = s, True
    chose[0] = False  # the root is never chosen
    anchor = [0] * count
    for c in range(1, count):  # parents first
        up = anchor[int(parent[c])]
        anchor[c] = up if up != 0 else (c if chose[c] else 0)
    return resolved, chose, anchor


def same_or_both_nan(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


SHAPES = [
    ("random", 1), ("random", 3), ("random", 60), ("random", 2000), ("balanced", 500),
    ("caterpillar", 3000), ("equal", 400), ("random", 5000),
]  # fmt: skip
CASES = [
    (shape, splits, kind, seed)
    for seed, (shape, splits) in enumerate(SHAPES)
    for kind in ("floats", "integers", "specials", "sums")
]


def check(parent: np.ndarray, size: np.ndarray, stability: np.ndarray, xp: Any, launch: Any) -> None:
    resolved, chose, anchor = python_eom(parent, stability)
    host = _select.select_clusters(parent, np.zeros(parent.size), stability, "eom", 0.0)
    to = (lambda a: a) if xp is np else xp.asarray
    back = (lambda a: a) if xp is np else (lambda a: a.get())
    selected, got_anchor = _eom_paths.select_on_device(to(parent), to(size), to(stability), "eom", xp, launch)
    assert np.array_equal(back(selected), host)
    assert back(got_anchor).tolist() == anchor
    assert back(selected).tolist() == [c != 0 and anchor[c] == c for c in range(parent.size)]
    if parent.size == 1:
        return
    paths = _eom_paths.heavy_paths(to(parent), to(size), xp, launch)
    best, chose_by_slot = (back(a) for a in _eom_paths.resolve(paths, to(stability), xp, launch))
    node_at, start = back(paths.node_at), back(paths.start)
    heads = node_at[start]
    for h in heads.tolist():  # the values other paths read (the root's: where its path's walk ends)
        assert same_or_both_nan(float(best[h]), resolved[h]), h
    by_cluster = np.zeros(parent.size, dtype=bool)
    by_cluster[node_at] = chose_by_slot.astype(bool)
    assert by_cluster[1:].tolist() == chose[1:]


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_the_kernels_compiled_for_the_host_equal_the_definition(case: tuple[str, int, str, int]) -> None:
    if not host_compiler_available():
        pytest.skip("g++ is not installed: the .cu file cannot be compiled for the host")
    shape, splits, kind, seed = case
    rng = np.random.default_rng(seed)
    parent, size = cluster_tree(rng, splits, shape, n=100_000)
    check(parent, size, stabilities(rng, parent.size, kind), np, host_launch(seed=seed + 1))


def test_integer_ties_decide_both_ways() -> None:
    """The integer stabilities above make the host's ``sub > stability`` a tie often enough,
    and both answers occur: the oracle tells ``>`` from ``>=``."""
    rng = np.random.default_rng(2)
    parent, _ = cluster_tree(rng, 2000, "random")
    stability = stabilities(rng, parent.size, "integers")
    resolved, chose, _ = python_eom(parent, stability)
    children: dict[int, list[int]] = {}
    for c in range(1, parent.size):
        children.setdefault(int(parent[c]), []).append(c)
    ties = [c for c, kids in children.items() if c and sum(resolved[k] for k in kids) == stability[c]]
    assert len(ties) >= 20 and all(chose[c] for c in ties)
    assert 0 < sum(chose) < parent.size - 1


@pytest.mark.parametrize("shape", ["random", "caterpillar", "equal", "balanced"])
def test_heavy_paths_cover_the_tree(shape: str) -> None:
    """Every cluster in one slot; down a path each slot is the heavy child of the one above
    (the child with more points, the first on a tie); heads are the root or light children;
    the paths of one round have the same light depth, the deepest round first, and no way from
    the root crosses more than log2(points) light edges."""
    rng = np.random.default_rng(11)
    n = 50_000
    parent, size = cluster_tree(rng, 3000, shape, n=n)
    paths = _eom_paths.heavy_paths(parent, size, np, host_launch(3))
    node_at, start, length = paths.node_at, paths.start, paths.length
    assert sorted(node_at.tolist()) == list(range(parent.size))
    children: dict[int, list[int]] = {}
    for c in range(1, parent.size):
        children.setdefault(int(parent[c]), []).append(c)

    def heavy(p: int) -> int:
        a, b = children[p]
        return a if size[a] >= size[b] else b

    light_depth = np.zeros(parent.size, dtype=np.int64)
    for c in range(1, parent.size):
        light_depth[c] = light_depth[parent[c]] + (heavy(int(parent[c])) != c)
    assert light_depth.max() <= math.log2(n)
    assert int(np.sum(length)) == parent.size
    assert paths.rounds[0][0] == 0 and paths.rounds[-1][1] == start.size
    for (_, b), (c, _) in itertools.pairwise(paths.rounds):
        assert b == c
    previous = None
    for a, b in paths.rounds:
        depths = {int(light_depth[node_at[start[p]]]) for p in range(a, b)}
        assert len(depths) == 1
        assert previous is None or depths.pop() < previous
        previous = int(light_depth[node_at[start[a]]])
    for p in range(start.size):
        path = node_at[start[p] : start[p] + length[p]].tolist()
        assert path[0] == 0 or heavy(int(parent[path[0]])) != path[0]
        assert path[-1] not in children  # a leaf
        for up, down in itertools.pairwise(path):
            assert heavy(up) == down
    if shape == "caterpillar":  # one path holds most of the tree: the depth is not the launch count
        assert length.max() > 1000 and len(paths.rounds) <= 3


def test_leaves_and_a_lone_root() -> None:
    parent, size = cluster_tree(np.random.default_rng(5), 300, "random")
    stability = np.ones(parent.size)
    for method in ("leaf", "eom"):
        host = _select.select_clusters(parent, np.zeros(parent.size), stability, method, 0.0)
        selected, anchor = _eom_paths.select_on_device(parent, size, stability, method, np, host_launch(1))
        assert np.array_equal(selected, host)
        walked = np.where(selected, np.arange(parent.size), 0)
        for c in range(1, parent.size):
            walked[c] = walked[c] or walked[parent[c]]
        assert np.array_equal(anchor, walked)
    for method in ("leaf", "eom"):
        selected, anchor = _eom_paths.select_on_device(
            np.zeros(1, np.int64), np.full(1, 9), np.ones(1), method, np, host_launch(1)
        )
        assert selected.tolist() == [False] and anchor.tolist() == [0]


def forest(rng: np.random.Generator, n: int, kind: str, roots: float = 0.001) -> np.ndarray:
    """Parent pointers (roots point to themselves): random, or chains (``roots``: their share)."""
    if kind == "chains":
        ptr = np.arange(n) - 1 - rng.integers(0, 2, n)  # the previous node or the one before
        ptr[rng.random(n) < roots] = -1
    else:
        ptr = (rng.random(n) * np.arange(n)).astype(np.int64) - (rng.random(n) < 0.05)
    ptr = np.where(ptr < 0, np.arange(n), ptr)
    perm = rng.permutation(n)  # node ids shuffled: parents are no longer below children
    out = np.empty(n, dtype=np.int64)
    out[perm] = perm[ptr]
    return out


def plain_roots(ptr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    roots, steps = ptr.copy(), np.zeros(ptr.size, dtype=np.int64)
    for x in range(ptr.size):
        r = x
        while ptr[r] != r:
            r, steps[x] = ptr[r], steps[x] + 1
        roots[x] = r
    return roots, steps


@pytest.mark.parametrize("kind", ["random", "chains"])
def test_find_roots_compiled_for_the_host(kind: str) -> None:
    """One launch (threads in a shuffled order, each walking with the others' shortcuts): the
    roots, and with ``find_roots_counted`` the distances to them; pointer doubling agrees."""
    if not host_compiler_available():
        pytest.skip("g++ is not installed: the .cu file cannot be compiled for the host")
    rng = np.random.default_rng(4)
    for n in (1, 2, 7, 5000):
        ptr = forest(rng, n, kind)
        roots, steps = plain_roots(ptr)
        if kind == "chains" and n == 5000:
            assert steps.max() > 500
        for parents_after in (False, True):  # the order of the threads: the same answer
            got = _condense.jump(ptr.copy(), np, host_launch(n), parents_after=parents_after)
            assert np.array_equal(got, roots)
        assert np.array_equal(_condense.jump(ptr.copy(), np), roots)
        weights = np.ones(n, dtype=np.int64)
        weights[ptr == np.arange(n)] = 0
        got_roots, got_steps = _eom_paths._jump_with_counts(ptr, weights, np, host_launch(n))
        assert np.array_equal(got_roots, roots) and np.array_equal(got_steps, steps)


# --- on the device ---------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["random", "chains"])
def test_device_find_roots(kind: str) -> None:
    import cupy

    from gpu_core._clustering.dendrogram_labels import _cupy_launch

    rng = np.random.default_rng(6)
    ptr = forest(rng, 300_000, kind, roots=1e-5)
    weights = (ptr != np.arange(ptr.size)).astype(np.int64)
    roots, steps = ptr.copy(), weights.copy()  # pointer doubling with distances, on the host
    while not np.array_equal(roots[roots], roots):
        steps, roots = steps + steps[roots], roots[roots]
    got = _condense.jump(cupy.asarray(ptr), cupy, _cupy_launch)
    assert np.array_equal(got.get(), roots)
    got_roots, got_steps = _eom_paths._jump_with_counts(
        cupy.asarray(ptr), cupy.asarray(weights), cupy, _cupy_launch
    )
    assert np.array_equal(got_roots.get(), roots) and np.array_equal(got_steps.get(), steps)
    if kind == "chains":
        assert steps.max() > 10_000


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_device_equals_the_definition(case: tuple[str, int, str, int]) -> None:
    import cupy

    from gpu_core._clustering.dendrogram_labels import _cupy_launch

    shape, splits, kind, seed = case
    rng = np.random.default_rng(seed)
    parent, size = cluster_tree(rng, splits, shape, n=100_000)
    check(parent, size, stabilities(rng, parent.size, kind), cupy, _cupy_launch)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ["random", "caterpillar"])
def test_device_at_scale(shape: str) -> None:
    """10^6 clusters at random, or a caterpillar 10^5 levels deep (10^7 uniform points give
    such trees): the host's selection, bit for bit."""
    import cupy

    from gpu_core._clustering.dendrogram_labels import _cupy_launch

    rng = np.random.default_rng(9)
    parent, size = cluster_tree(rng, 500_000 if shape == "random" else 100_000, shape, n=10**7)
    for kind in ("floats", "specials"):
        stability = stabilities(rng, parent.size, kind)
        host = _select.select_clusters(parent, np.zeros(parent.size), stability, "eom", 0.0)
        selected, _ = _eom_paths.select_on_device(
            cupy.asarray(parent), cupy.asarray(size), cupy.asarray(stability), "eom", cupy, _cupy_launch
        )
        assert np.array_equal(selected.get(), host)
        assert host.sum() >= 10
