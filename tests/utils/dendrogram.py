"""Spanning trees in merge order for the dendrogram tests, and two ways to run the device
dendrogram's driver (``gpu_core._dendrogram.gpu.build_linkage``) without a GPU:

* :func:`simulated_launch`: every kernel of ``kernels/dendrogram.cu`` written again in Python,
  its work items run one at a time in a random order (a schedule the device may pick: within a
  launch no item waits on another), so the algorithm and the driver are checked wherever the
  tests run;
* :func:`host_launch`: the ``.cu`` file itself compiled for the host by g++ (CUDA's built-ins
  replaced by sequential stand-ins), every thread run in turn: the kernels' own code, on the CPU.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import gpu_core

from .host_cuda import compile_for_host, host_compiler_available, run_on_host

KERNEL = Path(gpu_core.__file__).parent / "kernels" / "dendrogram.cu"


@dataclass(frozen=True)
class Tree:
    name: str
    n: int
    src: np.ndarray
    dst: np.ndarray
    weights: np.ndarray


def _finish(name: str, rng: np.random.Generator, n: int, a: np.ndarray, b: np.ndarray, ties: bool) -> Tree:
    """Random labels, random edge order (the merge order), random orientation, sorted weights."""
    label = rng.permutation(n)
    a, b = label[a], label[b]
    order = rng.permutation(a.shape[0])
    a, b = a[order], b[order]
    flip = rng.random(a.shape[0]) < 0.5
    src, dst = np.where(flip, b, a), np.where(flip, a, b)
    m = a.shape[0]
    weights = np.sort(rng.integers(0, 4, m)).astype(np.float64) if ties else np.sort(rng.random(m))
    label_ = f"{name}-{n}{'-ties' if ties else ''}"
    return Tree(label_, n, src.astype(np.int64), dst.astype(np.int64), weights)


def random_tree(rng: np.random.Generator, n: int, ties: bool = False) -> Tree:
    child = np.arange(1, n)
    return _finish("random", rng, n, child, (rng.random(n - 1) * child).astype(np.int64), ties)


def path_tree(rng: np.random.Generator, n: int, ties: bool = False, ranked: bool = False) -> Tree:
    """A path; ``ranked``: its edges merge along the path (the deepest dendrogram), else randomly."""
    a, b = np.arange(n - 1), np.arange(1, n)
    if not ranked:
        return _finish("path", rng, n, a, b, ties)
    weights = np.arange(n - 1, dtype=np.float64)
    return Tree(f"ranked-path-{n}", n, a.astype(np.int64), b.astype(np.int64), weights)


def star_tree(rng: np.random.Generator, n: int, ties: bool = False) -> Tree:
    return _finish("star", rng, n, np.zeros(n - 1, dtype=np.int64), np.arange(1, n), ties)


def caterpillar_tree(rng: np.random.Generator, n: int, ties: bool = False) -> Tree:
    spine = max(1, n // 3)
    child = np.arange(1, n)
    parent = np.where(child < spine, child - 1, rng.integers(0, spine, n - 1))
    return _finish("caterpillar", rng, n, child, parent, ties)


def trees(seed: int, sizes: tuple[int, ...]) -> Iterator[Tree]:
    """Every kind, with and without weight ties, for each size."""
    rng = np.random.default_rng(seed)
    for n in sizes:
        for ties in (False, True):
            yield random_tree(rng, n, ties)
            yield path_tree(rng, n, ties)
            yield star_tree(rng, n, ties)
            yield caterpillar_tree(rng, n, ties)
        yield path_tree(rng, n, ranked=True)


def with_cycle(tree: Tree) -> Tree:
    """n - 1 edges that are no tree: the last edge repeats the first (a cycle), one vertex left out."""
    src, dst = tree.src.copy(), tree.dst.copy()
    src[-1], dst[-1] = src[0], dst[0]
    return Tree(f"cycle-{tree.name}", tree.n, src, dst, tree.weights)


# --- the kernels in Python -----------------------------------------------------------------------

_LOW = (1 << 32) - 1


def _find(word: np.ndarray, x: int, stamp: int) -> int:
    while True:
        wx = int(word[x])
        if wx >> 32 != stamp:
            return x
        p = wx & _LOW
        wp = int(word[p])
        if wp >> 32 != stamp:
            return p
        g = wp & _LOW
        word[x] = (stamp << 32) | g
        x = g


def _unite(word: np.ndarray, a: int, b: int, stamp: int) -> None:
    ra, rb = _find(word, a, stamp), _find(word, b, stamp)
    if ra != rb:
        word[max(ra, rb)] = (stamp << 32) | min(ra, rb)


def _halves(m: int, log_half: int, upper: bool) -> Iterator[tuple[int, int]]:
    half = 1 << log_half
    blocks = -(-m // (2 * half))
    for j in range(blocks * half):
        block = j >> log_half
        i = (block << (log_half + 1)) | (half if upper else 0) | (j & (half - 1))
        if i < m:
            yield block, i


def _unite_lower(rng, m, log_half, base, eu, ev, word):
    items = list(_halves(m, log_half, upper=False))
    for k in rng.permutation(len(items)):
        block, i = items[k]
        _unite(word, int(eu[i]), int(ev[i]), base + block)


def _find_upper(rng, m, log_half, base, eu, ev, word):
    items = list(_halves(m, log_half, upper=True))
    for k in rng.permutation(len(items)):
        block, i = items[k]
        eu[i] = _find(word, int(eu[i]), base + block)
        ev[i] = _find(word, int(ev[i]), base + block)


def _finish_blocks(rng, m, log_tail, base, eu, ev, word, cycle):
    tail = 1 << log_tail
    for block in rng.permutation(-(-m // tail)):
        stamp = base + int(block)
        for i in range(int(block) * tail, min((int(block) + 1) * tail, m)):
            ru, rv = _find(word, int(eu[i]), stamp), _find(word, int(ev[i]), stamp)
            eu[i], ev[i] = ru, rv
            if ru == rv:
                cycle[0] = 1
                continue
            word[max(ru, rv)] = (stamp << 32) | min(ru, rv)


def _winners(rng, m, eu, ev):
    a, b = eu.copy(), ev.copy()
    eu[:] = np.minimum(a, b)
    ev[:] = np.maximum(a, b)


def _init_tour(rng, n, last_won, succ):
    last_won[:] = -1
    succ[0::2] = np.arange(n) * 2 + 1
    succ[1::2] = -1


def _link_groups(rng, m, order, winner, loser, last_won, succ):
    for p in rng.permutation(m):
        e = int(order[p])
        r, c = int(winner[e]), int(loser[e])
        if p == 0 or winner[order[p - 1]] != r:
            succ[2 * r] = 2 * c
        if p == m - 1 or winner[order[p + 1]] != r:
            last_won[r] = e
            succ[2 * c + 1] = 2 * r + 1
        else:
            succ[2 * c + 1] = 2 * loser[order[p + 1]]


def splitter(t: int, spacing: int) -> bool:
    """``is_splitter`` of dendrogram.cu (murmur3's 32-bit finalizer)."""
    h = t & _LOW
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _LOW
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _LOW
    h ^= h >> 16
    return t == 0 or (h & (spacing - 1)) == 0


def _mark_splitters(rng, tokens, spacing, flag):
    flag[:] = [splitter(t, spacing) for t in range(tokens)]


def _walk_sublists(rng, k, spacing, splitters, succ, owner, offset, nxt, count):
    for j in rng.permutation(k):
        t = int(splitters[j])
        owner[t], offset[t] = j, 0
        steps = 1
        while True:
            t = int(succ[t])
            if t < 0:
                nxt[j] = -1
                break
            if splitter(t, spacing):
                nxt[j] = -2 - t
                break
            owner[t], offset[t] = j, steps
            steps += 1
        count[j] = steps


def _splitter_links(rng, k, owner, nxt):
    for j in range(k):
        if nxt[j] <= -2:
            nxt[j] = owner[-2 - nxt[j]]


def _jump(rng, k, sum_in, next_in, sum_out, next_out):
    for j in rng.permutation(k):
        q = int(next_in[j])
        sum_out[j] = sum_in[j] if q < 0 else sum_in[j] + sum_in[q]
        next_out[j] = -1 if q < 0 else next_in[q]


def _write_rows(rng, m, n, order, winner, loser, last_won, owner, offset, suffix, w, out):
    def pos(t: int) -> int:
        return 2 * n - int(suffix[owner[t]]) + int(offset[t])

    for p in rng.permutation(m):
        e = int(order[p])
        r, c = int(winner[e]), int(loser[e])
        before = int(order[p - 1]) if p > 0 else -1
        child_r = n + before if before >= 0 and winner[before] == r else r
        child_c = n + int(last_won[c]) if last_won[c] >= 0 else c
        out[e] = (min(child_r, child_c), max(child_r, child_c), w[e], 1 + (pos(2 * c + 1) - pos(2 * r)) // 2)


SIMULATED: dict[str, Callable[..., None]] = {
    "unite_lower": _unite_lower, "find_upper": _find_upper, "finish_blocks": _finish_blocks,
    "winners": _winners, "init_tour": _init_tour, "link_groups": _link_groups,
    "mark_splitters": _mark_splitters, "walk_sublists": _walk_sublists,
    "splitter_links": _splitter_links, "jump": _jump, "write_rows": _write_rows,
}  # fmt: skip


def simulated_launch(seed: int) -> Callable[[str, tuple[int], tuple[int], tuple[Any, ...]], None]:
    rng = np.random.default_rng(seed)

    def launch(name: str, grid: tuple[int], block: tuple[int], args: tuple[Any, ...]) -> None:
        SIMULATED[name](rng, *(a.item() if isinstance(a, np.generic) else a for a in args))

    return launch


# --- the .cu file compiled for the host --------------------------------------------------------

_HOST_PRELUDE = r"""
typedef unsigned long long word_t;
static word_t atomicCAS(word_t* a, word_t expect, word_t value) {
    const word_t old = *a;
    if (old == expect) *a = value;
    return old;
}
"""
#: the kernels of dendrogram.cu
HOST_KERNELS = (
    "unite_lower", "find_upper", "finish_blocks", "winners", "init_tour", "link_groups",
    "mark_splitters", "walk_sublists", "splitter_links", "jump", "write_rows",
)  # fmt: skip


@functools.cache
def _host_library() -> Any:
    return compile_for_host(KERNEL, _HOST_PRELUDE, HOST_KERNELS) if host_compiler_available() else None


def host_launch(seed: int) -> Callable[[str, tuple[int], tuple[int], tuple[Any, ...]], None]:
    """Runs the kernels of dendrogram.cu compiled for the host (needs g++) on NumPy arrays."""
    lib = _host_library()
    rng = np.random.default_rng(seed)

    def launch(name: str, grid: tuple[int], block: tuple[int], args: tuple[Any, ...]) -> None:
        run_on_host(lib, name, grid, block, args, int(rng.integers(1, 2**62)))

    return launch
