"""HDBSCAN*'s host part compiled by Numba: from the sorted tree to labels in two passes.

Imported only where Numba is installed (``_hdbscan.compiled_labels``); the NumPy path of
``_hdbscan`` (linkage matrix, vectorized condensed tree) is the reference it must equal bit
for bit (``tests/gpu_core/test_hdbscan_compiled.py``).

Pass 1, :func:`condense_edges`, runs the dendrogram's union-find over the edges in merge
order and builds the condensed tree bottom-up on the way, without a linkage matrix:

- a component smaller than ``min_cluster_size`` keeps its points on a circular list
  (``nxt``; two lists join by swapping two entries). When it merges into a component of at
  least that size, its points leave, at this merge's lambda, the cluster that component is in.
- a *segment* is a chain of big merges that only absorb small components: one condensed
  cluster. It starts when two small components make a big one, and ends where it meets
  another big component (a split: both become child clusters of a new segment) or at the
  root (forced big, as scikit-learn processes the root whatever its size).
- roots hold ``-size`` in ``parent`` (one array read per find step); a big root's segment
  sits in ``nxt[root]``, which its list no longer needs.

Pass 2, :func:`select_and_label`, numbers the clusters as the NumPy path does (the root
first, then the children of the splits from the last split down, the child with the lower
dendrogram id first), sums the stabilities in the same order as its ``np.bincount`` (cluster
rows in label order, then the points in index order: float sums depend on the order),
selects (excess of mass or leaves, then the epsilon merge) and labels the points.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._hdbscan import _eom as _eom_python
from ._numba import jit

_eom = jit(_eom_python)


@jit
def condense_edges(  # pragma: no cover - runs compiled
    n: int,
    u: Any,
    v: Any,
    w: Any,
    min_cluster_size: int,
    parent: Any,
    nxt: Any,
    p_seg: Any,
    p_lam: Any,
) -> Any:
    """Pass 1. ``parent``, ``nxt``, ``p_seg`` (int, ``n``) and ``p_lam`` (float64, ``n``) are
    work and output arrays. Returns ``(bad_edge, root_segment, seg_top, seg_parent, seg_birth,
    seg_size, splits)`` with ``bad_edge`` -1, or the first edge that closes a cycle."""
    m = n - 1
    cap = 2 * (n // min_cluster_size) + 4  # fresh segments hold disjoint >= mcs points each
    seg_top = np.empty(cap, dtype=np.int64)  # the segment's latest merge (its dendrogram node - n)
    seg_parent = np.zeros(cap, dtype=np.int64)
    seg_birth = np.zeros(cap)
    seg_size = np.zeros(cap, dtype=np.int64)
    splits = np.empty((cap // 2 + 1, 2), dtype=np.int64)  # (left, right) child segments
    nseg = 0
    nsplit = 0
    for x in range(n):
        parent[x] = -1
        nxt[x] = x
    root = 0
    for i in range(m):
        a = u[i]
        while True:  # find with path halving
            pa = parent[a]
            if pa < 0:
                break
            ga = parent[pa]
            if ga < 0:
                a = pa
                break
            parent[a] = ga
            a = ga
        b = v[i]
        while True:
            pb = parent[b]
            if pb < 0:
                break
            gb = parent[pb]
            if gb < 0:
                b = pb
                break
            parent[b] = gb
            b = gb
        if a == b:
            return i, -1, seg_top, seg_parent, seg_birth, seg_size, splits[:0]
        sa = -parent[a]
        sb = -parent[b]
        d = w[i]
        lam = 1.0 / d if d > 0.0 else np.inf
        if sa < sb:  # a: the larger side, the new root
            a, b = b, a
            sa, sb = sb, sa
        if sb >= min_cluster_size:  # both big: a split, two child clusters of a new segment
            g1 = nxt[a]
            g2 = nxt[b]
            g = nseg
            nseg += 1
            seg_parent[g1] = g
            seg_parent[g2] = g
            seg_birth[g1] = lam
            seg_birth[g2] = lam
            seg_size[g1] = sa
            seg_size[g2] = sb
            if seg_top[g1] < seg_top[g2]:
                splits[nsplit, 0] = g1
                splits[nsplit, 1] = g2
            else:
                splits[nsplit, 0] = g2
                splits[nsplit, 1] = g1
            nsplit += 1
            seg_top[g] = i
            nxt[a] = g
        elif sa >= min_cluster_size:  # a big, b small: b's points leave a's cluster
            g = nxt[a]
            p = b
            while True:
                p_seg[p] = g
                p_lam[p] = lam
                p = nxt[p]
                if p == b:
                    break
            seg_top[g] = i
        elif sa + sb >= min_cluster_size or i == m - 1:  # two small make a big one (or the root)
            g = nseg
            nseg += 1
            for r in (a, b):
                p = r
                while True:
                    p_seg[p] = g
                    p_lam[p] = lam
                    p = nxt[p]
                    if p == r:
                        break
            seg_top[g] = i
            nxt[a] = g
        else:  # two small lists join
            t = nxt[a]
            nxt[a] = nxt[b]
            nxt[b] = t
        parent[b] = a
        parent[a] = -(sa + sb)
        root = a
    top, segment_parent, birth, size = seg_top[:nseg], seg_parent[:nseg], seg_birth[:nseg], seg_size[:nseg]
    return -1, nxt[root], top, segment_parent, birth, size, splits[:nsplit]


@jit
def condense_linkage(linkage: Any, min_cluster_size: int, p_seg: Any, p_lam: Any) -> Any:  # pragma: no cover
    """Pass 1 from a linkage matrix (rows in merge order; its own column order decides which
    child of a split comes first). Returns :func:`condense_edges`'s tuple less ``bad_edge``."""
    m = linkage.shape[0]
    n = m + 1
    cap = 2 * (n // min_cluster_size) + 4
    seg_parent = np.zeros(cap, dtype=np.int64)
    seg_birth = np.zeros(cap)
    seg_size = np.zeros(cap, dtype=np.int64)
    splits = np.empty((cap // 2 + 1, 2), dtype=np.int64)
    nseg = 0
    nsplit = 0
    # per merge: its segment if big, else one of its points (the entry to its circular list)
    state = np.empty(m, dtype=p_seg.dtype)
    nxt = np.empty(n, dtype=p_seg.dtype)
    for x in range(n):
        nxt[x] = x
    for i in range(m):
        a = int(linkage[i, 0])
        b = int(linkage[i, 1])
        sa = 1 if a < n else int(linkage[a - n, 3])
        sb = 1 if b < n else int(linkage[b - n, 3])
        ea = a if a < n else state[a - n]
        eb = b if b < n else state[b - n]
        d = linkage[i, 2]
        lam = 1.0 / d if d > 0.0 else np.inf
        big_a = sa >= min_cluster_size
        big_b = sb >= min_cluster_size
        if big_a and big_b:
            g = nseg
            nseg += 1
            seg_parent[ea] = g
            seg_parent[eb] = g
            seg_birth[ea] = lam
            seg_birth[eb] = lam
            seg_size[ea] = sa
            seg_size[eb] = sb
            splits[nsplit, 0] = ea
            splits[nsplit, 1] = eb
            nsplit += 1
            state[i] = g
        elif big_a or big_b:
            g = ea if big_a else eb
            r = eb if big_a else ea
            p = r
            while True:
                p_seg[p] = g
                p_lam[p] = lam
                p = nxt[p]
                if p == r:
                    break
            state[i] = g
        elif int(linkage[i, 3]) >= min_cluster_size or i == m - 1:
            g = nseg
            nseg += 1
            for r in (ea, eb):
                p = r
                while True:
                    p_seg[p] = g
                    p_lam[p] = lam
                    p = nxt[p]
                    if p == r:
                        break
            state[i] = g
        else:
            t = nxt[ea]
            nxt[ea] = nxt[eb]
            nxt[eb] = t
            state[i] = ea
    return state[m - 1], seg_parent[:nseg], seg_birth[:nseg], seg_size[:nseg], splits[:nsplit]


@jit
def _epsilon_merge(selected: Any, cl_parent: Any, birth: Any, epsilon: float) -> Any:  # pragma: no cover
    """``_hdbscan._epsilon_search`` over cluster indices (0: the root; children after parents)."""
    size = cl_parent.shape[0]
    first_child = np.full(size, -1, dtype=np.int64)
    next_sibling = np.full(size, -1, dtype=np.int64)
    for c in range(size - 1, 0, -1):
        up = cl_parent[c]
        next_sibling[c] = first_child[up]
        first_child[up] = c
    processed = np.zeros(size, dtype=np.bool_)
    out = np.zeros(size, dtype=np.bool_)
    stack = np.empty(size, dtype=np.int64)
    for leaf in range(1, size):
        if not selected[leaf]:
            continue
        if 1.0 / birth[leaf] < epsilon:
            if not processed[leaf]:
                node = leaf
                while True:  # upwards while the parent is still born below epsilon
                    up = cl_parent[node]
                    if up == 0:
                        break
                    if 1.0 / birth[up] > epsilon:
                        node = up
                        break
                    node = up
                out[node] = True
                top = 0
                c = first_child[node]
                while c >= 0:
                    stack[top] = c
                    top += 1
                    c = next_sibling[c]
                while top > 0:
                    top -= 1
                    x = stack[top]
                    processed[x] = True
                    c = first_child[x]
                    while c >= 0:
                        stack[top] = c
                        top += 1
                        c = next_sibling[c]
        else:
            out[leaf] = True
    return out


@jit
def clusters(  # pragma: no cover - runs compiled
    root_seg: int, seg_parent: Any, seg_birth: Any, seg_size: Any, splits: Any, p_seg: Any, p_lam: Any
) -> Any:
    """The condensed tree over cluster indices (0: the root; children after parents) from pass 1:
    ``(cl_parent, birth, cl_size, point_cluster, stability, deaths)``; the cluster rows are
    ``(cl_parent[c], c, birth[c], cl_size[c])`` for ``c >= 1``, the point rows
    ``(point_cluster[p], p, p_lam[p], 1)``, and ``deaths`` each cluster's largest row lambda."""
    n = p_seg.shape[0]
    size = seg_parent.shape[0]
    number = np.empty(size, dtype=np.int64)  # segment -> cluster index, 0 the root
    number[root_seg] = 0
    k = 1
    for s in range(splits.shape[0] - 1, -1, -1):
        number[splits[s, 0]] = k
        number[splits[s, 1]] = k + 1
        k += 2
    cl_parent = np.zeros(size, dtype=np.int64)
    birth = np.zeros(size)
    cl_size = np.zeros(size, dtype=np.int64)
    for g in range(size):
        c = number[g]
        if c != 0:
            cl_parent[c] = number[seg_parent[g]]
            birth[c] = seg_birth[g]
            cl_size[c] = seg_size[g]
    # stabilities and each cluster's largest lambda, rows in the NumPy path's order
    stability = np.zeros(size)
    deaths = np.zeros(size)
    for c in range(1, size):
        up = cl_parent[c]
        stability[up] += (birth[c] - birth[up]) * cl_size[c]
        deaths[up] = max(deaths[up], birth[c])
    point_cluster = np.empty(n, dtype=np.int64)
    for p in range(n):
        c = number[p_seg[p]]
        point_cluster[p] = c
        lam = p_lam[p]
        stability[c] += lam - birth[c]
        deaths[c] = max(deaths[c], lam)
    return cl_parent, birth, cl_size, point_cluster, stability, deaths


@jit
def select_and_label(  # pragma: no cover - runs compiled
    root_seg: int,
    seg_parent: Any,
    seg_birth: Any,
    seg_size: Any,
    splits: Any,
    p_seg: Any,
    p_lam: Any,
    leaf: bool,
    epsilon: float,
) -> Any:
    """Pass 2: ``(labels, probabilities)`` from pass 1's segments and points."""
    cl_parent, birth, _, point_cluster, stability, deaths = clusters(
        root_seg, seg_parent, seg_birth, seg_size, splits, p_seg, p_lam
    )
    n = p_seg.shape[0]
    size = cl_parent.shape[0]
    if leaf:
        selected = np.ones(size, dtype=np.bool_)
        selected[0] = False
        for c in range(1, size):
            selected[cl_parent[c]] = False
    else:
        selected = _eom(cl_parent, stability)
    if epsilon != 0.0 and size > 1 and selected.any():
        selected = _epsilon_merge(selected, cl_parent, birth, epsilon)
    selected[0] = False
    anchor = np.zeros(size, dtype=np.int64)  # nearest selected ancestor-or-self (0: none)
    label_of = np.full(size, -1, dtype=np.int64)
    count = 0
    for c in range(1, size):
        if selected[c]:
            anchor[c] = c
            label_of[c] = count
            count += 1
        else:
            anchor[c] = anchor[cl_parent[c]]
    labels = np.empty(n, dtype=np.int64)
    probabilities = np.zeros(n)
    for p in range(n):
        a = anchor[point_cluster[p]]
        labels[p] = label_of[a]
        if a != 0:
            lam = p_lam[p]
            top = deaths[a]
            if top == 0.0 or np.isinf(lam):
                probabilities[p] = 1.0
            else:
                probabilities[p] = min(lam, top) / top
    return labels, probabilities
