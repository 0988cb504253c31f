"""HDBSCAN*'s host part compiled by Numba: from the sorted tree to labels, no linkage matrix.

Imported only where Numba is installed (``passes.compiled_passes``); the NumPy path of
``hdbscan`` (linkage matrix, vectorized condensed tree) is the reference it must equal bit
for bit (``tests/gpu_core/clustering/test_hdbscan_compiled.py``).

The passes call one another compiled and share this file: Numba's on-disk cache of a function
is invalidated only by a change of the function's own file, so a callee in another file, once
edited, would leave stale compiled copies in its callers' cache entries.

:func:`condense_edges` runs the dendrogram's union-find over the edges in merge order and
builds the condensed tree bottom-up on the way:

- a component smaller than ``min_cluster_size`` keeps its points on a circular list (two
  lists join by swapping two links). When it merges into a component of at least that size,
  its points leave, at this merge's lambda, the cluster that component is in: an *event*
  (list, segment, lambda), whose list is walked after the loop.
- a *segment* is a chain of big merges that only absorb small components: one condensed
  cluster. It starts when two small components make a big one, and ends where it meets
  another big component (a split: both become child clusters of a new segment) or at the
  root (forced big, as scikit-learn processes the root whatever its size).

Memory, not arithmetic, sets the pace: point ids are in no useful order, so at 10^7 points
nearly every access misses the cache. The finds read ``parent`` only (4 bytes a point, the
densest array); everything else of a point is one 16-byte record (32 with 64-bit ids), seen
as ints (``aux``: its list link, or for a big root its latest merge; its segment, a root's
and later the point's own) and as floats (``p_lam``: the lambda at which it leaves), so a
root's data, a point's leaving and a list step each cost one line. The finds of the merges
``D`` and ``2 D`` steps ahead and their roots' records are prefetched; a single point that
joins a big component leaves at once (its line is in cache); longer lists are walked after
the loop by ``WALKERS`` interleaved cursors, each prefetching its next point.

:func:`cluster_tree` numbers the clusters as the NumPy path does (the root first, then the
children of the splits from the last split down, the child with the lower dendrogram id
first) and sums the stabilities in the order ``condense`` defines (float sums depend on the
order): the child clusters in number order, apart from the points in index order, cut per
cluster into chunks of ``CHUNK`` points summed on their own (a running sum and count in the
cluster's record, flushed into the cluster's point part at every full chunk and at the end);
:func:`select_and_label` selects (:func:`select_clusters`: excess of mass or leaves, then the
epsilon merge; the device path of ``dendrogram_labels`` calls it too) and labels the points.
:func:`condense_linkage` is :func:`condense_edges` for a kept linkage matrix (the service's
dendrogram), with the same outputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._backend.jit import jit, jit_inline, prefetch

_prefetch = prefetch()

D = 16  # prefetch distance of the finds, in merges
WALKERS = 16  # interleaved list walks
CHUNK = 1024  # points per chunk of a stability sum: condense.CHUNK (a constant here, see _eom)


@jit
def _find(parent: Any, x: int) -> int:  # pragma: no cover - runs compiled
    """The root of ``x`` (``parent`` holds ``-size`` at a root), halving the path."""
    while True:
        p = parent[x]
        if p < 0:
            return x
        g = parent[p]
        if g < 0:
            return p  # type: ignore[no-any-return]
        parent[x] = g
        x = g


@jit
def _walk(  # pragma: no cover - runs compiled
    aux: Any, p_lam: Any, entry: Any, stop: Any, segment: Any, lam: Any, count: int
) -> None:
    """Each event's points get its segment and lambda: the list from ``entry`` along the links
    to ``stop`` (included); ``WALKERS`` lists at a time, in turn, so their misses overlap."""
    F = p_lam.shape[0] // (aux.shape[0] // 4)  # float64 slots per point record
    L = F // 2  # the lambda's slot
    cursor = np.full(WALKERS, -1, dtype=np.int64)
    last = np.zeros(WALKERS, dtype=np.int64)
    seg = np.zeros(WALKERS, dtype=np.int64)
    value = np.zeros(WALKERS)
    taken = 0
    active = 0
    for c in range(WALKERS):
        if taken < count:
            cursor[c] = entry[taken]
            last[c] = stop[taken]
            seg[c] = segment[taken]
            value[c] = lam[taken]
            taken += 1
            active += 1
    while active > 0:
        for c in range(WALKERS):
            p = cursor[c]
            if p < 0:
                continue
            aux[4 * p + 1] = seg[c]
            p_lam[F * p + L] = value[c]
            if p != last[c]:
                q = aux[4 * p]
            elif taken < count:
                q = entry[taken]
                last[c] = stop[taken]
                seg[c] = segment[taken]
                value[c] = lam[taken]
                taken += 1
            else:
                cursor[c] = -1
                active -= 1
                continue
            cursor[c] = q
            _prefetch(aux, 4 * q)


@jit
def _segments(n: int, min_cluster_size: int) -> Any:  # pragma: no cover - runs compiled
    """Room for the segments of ``n`` points (fresh segments hold disjoint >= mcs points each):
    ``(seg_parent, seg_birth, seg_size, splits)``, ``splits`` the (left, right) child segments."""
    cap = 2 * (n // min_cluster_size) + 4
    seg_parent = np.zeros(cap, dtype=np.int64)
    seg_birth = np.zeros(cap)
    seg_size = np.zeros(cap, dtype=np.int64)
    splits = np.empty((cap // 2 + 1, 2), dtype=np.int64)
    return seg_parent, seg_birth, seg_size, splits


@jit
def _split(  # pragma: no cover - runs compiled
    segments: Any, nsplit: int, g: int, first: int, first_size: int, second: int, second_size: int, lam: float
) -> None:
    """Segments ``first`` and ``second`` become the child clusters of the new segment ``g``, born
    at ``lam``: split number ``nsplit``, in that order."""
    seg_parent, seg_birth, seg_size, splits = segments
    seg_parent[first] = g
    seg_parent[second] = g
    seg_birth[first] = lam
    seg_birth[second] = lam
    seg_size[first] = first_size
    seg_size[second] = second_size
    splits[nsplit, 0] = first
    splits[nsplit, 1] = second


@jit
def _events(room: int) -> Any:  # pragma: no cover - runs compiled
    """Room for ``room`` events: each list's ``(entry, stop, segment, lambda)``, for :func:`_walk`."""
    entry = np.empty(room, dtype=np.int64)
    stop = np.empty(room, dtype=np.int64)
    ev_segment = np.empty(room, dtype=np.int64)
    ev_lam = np.empty(room)
    return entry, stop, ev_segment, ev_lam


@jit
def _event(  # pragma: no cover - runs compiled
    events: Any, count: int, entry: int, stop: int, segment: int, lam: float
) -> int:
    """Event number ``count``: the list from ``entry`` to ``stop`` leaves ``segment`` at ``lam``.
    Returns the new count."""
    entries, stops, segments, lams = events
    entries[count] = entry
    stops[count] = stop
    segments[count] = segment
    lams[count] = lam
    return count + 1


@jit
def _leave(  # pragma: no cover - runs compiled
    aux: Any, p_lam: Any, F: int, L: int, events: Any, count: int, b: int, sb: int, g: int, lam: float
) -> int:
    """The points of small root ``b`` (``sb`` of them) leave segment ``g`` at ``lam``: a single
    point at once (never a root again, its line in cache), a list as an event walked after the
    loop (its circular list cut open before ``b``). Returns the new event count."""
    if sb == 1:
        aux[4 * b + 1] = g
        p_lam[F * b + L] = lam
        return count
    return _event(events, count, aux[4 * b], b, g, lam)  # type: ignore[no-any-return]


@jit_inline
def _prefetch_finds(parent: Any, aux: Any, u: Any, v: Any, i: int, m: int) -> None:  # pragma: no cover
    """Before merge ``i``: the endpoints' lines of the merge ``2 D`` ahead, and the parents' lines
    and records of the one ``D`` ahead, whose endpoints' lines have arrived (most finds end there)."""
    ahead = i + 2 * D
    if ahead < m:
        _prefetch(parent, u[ahead])
        _prefetch(parent, v[ahead])
    ahead = i + D
    if ahead < m:
        x = u[ahead]
        p = parent[x]
        r = p if p >= 0 else x
        _prefetch(parent, r)
        _prefetch(aux, 4 * r)
        x = v[ahead]
        p = parent[x]
        r = p if p >= 0 else x
        _prefetch(parent, r)
        _prefetch(aux, 4 * r)


@jit
def condense_edges(  # pragma: no cover - runs compiled
    n: int, u: Any, v: Any, w: Any, min_cluster_size: int, parent: Any, aux: Any, p_lam: Any
) -> Any:
    """Pass 1. ``parent`` (int, ``n``) and the point records (``aux`` and ``p_lam``, two views
    of one buffer, see ``hdbscan._work_arrays``) are work and output arrays: afterwards
    ``aux[4 p + 1]`` is point p's segment and ``p_lam[F p + F / 2]`` the lambda at which it
    leaves it. Returns ``(bad_edge, root_segment, seg_parent, seg_birth,
    seg_size, splits)`` with ``bad_edge`` -1, or the first edge that closes a cycle."""
    m = n - 1
    F = p_lam.shape[0] // n  # float64 slots per point record
    L = F // 2  # the lambda's slot
    segments = _segments(n, min_cluster_size)
    seg_parent, seg_birth, seg_size, splits = segments
    events = _events(n // 2 + 2)  # events of lists of 2 or more points
    count = nseg = nsplit = 0
    for x in range(n):
        parent[x] = -1
        aux[4 * x] = x
    root = 0
    for i in range(m):
        _prefetch_finds(parent, aux, u, v, i, m)
        a = _find(parent, u[i])
        b = _find(parent, v[i])
        if a == b:
            return i, -1, seg_parent, seg_birth, seg_size, splits[:0]
        sa = -parent[a]
        sb = -parent[b]
        d = w[i]
        lam = 1.0 / d if d > 0.0 else np.inf
        if sa < sb:  # a: the larger side, the new root
            a, b = b, a
            sa, sb = sb, sa
        if sb >= min_cluster_size:  # both big: a split, two child clusters of a new segment
            g1 = aux[4 * a + 1]
            g2 = aux[4 * b + 1]
            if aux[4 * a] < aux[4 * b]:  # the lower dendrogram id (the earlier latest merge) first
                _split(segments, nsplit, nseg, g1, sa, g2, sb, lam)
            else:
                _split(segments, nsplit, nseg, g2, sb, g1, sa, lam)
            nsplit += 1
            aux[4 * a + 1] = nseg
            nseg += 1
        elif sa >= min_cluster_size:  # a big, b small: b's points leave a's cluster
            count = _leave(aux, p_lam, F, L, events, count, b, sb, aux[4 * a + 1], lam)
        elif sa + sb >= min_cluster_size or i == m - 1:  # two small make a big one (or the root)
            count = _event(events, count, aux[4 * a], a, nseg, lam)  # a stays the root: walked later
            count = _leave(aux, p_lam, F, L, events, count, b, sb, nseg, lam)
            aux[4 * a + 1] = nseg
            nseg += 1
        else:  # two small lists join
            aux[4 * a], aux[4 * b] = aux[4 * b], aux[4 * a]
        if sa + sb >= min_cluster_size or i == m - 1:
            aux[4 * a] = i  # a big root's link field: its latest merge (its dendrogram id - n)
        parent[b] = a
        parent[a] = -(sa + sb)
        root = a
    root_segment = aux[4 * root + 1]
    _walk(aux, p_lam, *events, count)
    return -1, root_segment, seg_parent[:nseg], seg_birth[:nseg], seg_size[:nseg], splits[:nsplit]


@jit
def condense_linkage(linkage: Any, min_cluster_size: int, aux: Any, p_lam: Any) -> Any:  # pragma: no cover
    """Pass 1 from a linkage matrix (rows in merge order; its own column order decides which
    child of a split comes first). Returns :func:`condense_edges`'s tuple less ``bad_edge``."""
    m = linkage.shape[0]
    n = m + 1
    segments = _segments(n, min_cluster_size)
    seg_parent, seg_birth, seg_size, splits = segments
    events = _events(n)
    count = nseg = nsplit = 0
    # per merge: its segment if big, else one of its points (on its circular list)
    state = np.empty(m, dtype=np.int64)
    for x in range(n):
        aux[4 * x] = x
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
            _split(segments, nsplit, nseg, ea, sa, eb, sb, lam)
            nsplit += 1
            state[i] = nseg
            nseg += 1
        elif big_a or big_b:
            g = ea if big_a else eb
            small = eb if big_a else ea
            count = _event(events, count, aux[4 * small], small, g, lam)
            state[i] = g
        elif int(linkage[i, 3]) >= min_cluster_size or i == m - 1:
            count = _event(events, count, aux[4 * ea], ea, nseg, lam)
            count = _event(events, count, aux[4 * eb], eb, nseg, lam)
            state[i] = nseg
            nseg += 1
        else:  # two small lists join
            aux[4 * ea], aux[4 * eb] = aux[4 * eb], aux[4 * ea]
            state[i] = ea
    _walk(aux, p_lam, *events, count)
    return state[m - 1], seg_parent[:nseg], seg_birth[:nseg], seg_size[:nseg], splits[:nsplit]


@jit
def _eom(parent: Any, stability: Any) -> Any:  # pragma: no cover - runs compiled
    """``select._eom``, line for line. A copy, not an import: Numba's on-disk cache of a
    function is invalidated only by a change of the function's own file, so a compiled caller
    here would keep a stale compiled copy of a callee edited in another file."""
    size = parent.shape[0]
    stab = stability.copy()
    sub = np.zeros(size)
    chose = np.zeros(size, dtype=np.bool_)
    for node in range(size - 1, 0, -1):  # never the root (allow_single_cluster=False)
        if sub[node] > stab[node]:
            stab[node] = sub[node]
        else:
            chose[node] = True
        sub[parent[node]] += stab[node]
    blocked = np.zeros(size, dtype=np.bool_)
    for node in range(1, size):
        up = parent[node]
        blocked[node] = blocked[up] or chose[up]
    return chose & ~blocked


@jit
def _epsilon_merge(selected: Any, cl_parent: Any, birth: Any, epsilon: float) -> Any:  # pragma: no cover
    """``select._epsilon_search`` over cluster indices (0: the root; children after parents)."""
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
def select_clusters(  # pragma: no cover - runs compiled
    cl_parent: Any, birth: Any, stability: Any, leaf: bool, epsilon: float
) -> Any:
    """``select.select_clusters``: the selected clusters' mask (never the root 0)."""
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
    return selected


@jit
def _cluster_numbers(root_seg: int, splits: Any, size: int) -> Any:  # pragma: no cover - runs compiled
    """``(number, segment_of)``: segment -> cluster number and back, numbered as the NumPy path
    does (the root 0, then the children of the splits from the last split down)."""
    number = np.empty(size, dtype=np.int64)
    segment_of = np.empty(size, dtype=np.int64)
    number[root_seg] = 0
    segment_of[0] = root_seg
    k = 1
    for s in range(splits.shape[0] - 1, -1, -1):
        for side in range(2):
            number[splits[s, side]] = k
            segment_of[k] = splits[s, side]
            k += 1
    return number, segment_of


@jit
def _segment_sums(  # pragma: no cover - runs compiled
    segment_of: Any, seg_parent: Any, seg_birth: Any, seg_size: Any, aux: Any, p_lam: Any
) -> Any:
    """Per segment, ``(cluster part, point part, record)`` of its stability, summed in the order
    ``condense`` defines: the child clusters in number order, then the points in index order in
    chunks of ``CHUNK``; ``record[4 g + 2]`` is segment g's death (its largest row lambda)."""
    n = aux.shape[0] // 4
    F = p_lam.shape[0] // n  # float64 slots per point record
    L = F // 2  # the lambda's slot
    size = seg_parent.shape[0]
    # per segment, 32 bytes (a point's random access hits one line): birth, the running chunk's
    # sum, death, the running chunk's count; the cluster part and the point part of the stability
    # apart (a point touches the latter once a chunk)
    record = np.zeros(4 * size)
    for g in range(size):
        record[4 * g] = seg_birth[g]  # the root's stays 0
    clusterpart = np.zeros(size)
    pointpart = np.zeros(size)
    for c in range(1, size):  # the child clusters, in number order
        g = segment_of[c]
        up = seg_parent[g]
        clusterpart[up] += (seg_birth[g] - record[4 * up]) * seg_size[g]
        record[4 * up + 2] = max(record[4 * up + 2], seg_birth[g])
    for p in range(n):  # the points, in index order, in chunks of CHUNK per segment
        if p + D < n:
            _prefetch(record, 4 * aux[4 * (p + D) + 1])
        seg = aux[4 * p + 1]
        g = 4 * seg
        lam = p_lam[F * p + L]
        running = record[g + 1] + (lam - record[g])
        record[g + 2] = max(record[g + 2], lam)
        taken = record[g + 3] + 1.0
        if taken == CHUNK:  # a full chunk: into the point part, in chunk order
            pointpart[seg] += running
            record[g + 1] = 0.0
            record[g + 3] = 0.0
        else:
            record[g + 1] = running
            record[g + 3] = taken
    for g in range(size):  # the last (partial) chunks
        if record[4 * g + 3] > 0.0:
            pointpart[g] += record[4 * g + 1]
    return clusterpart, pointpart, record


@jit
def cluster_tree(  # pragma: no cover - runs compiled
    root_seg: int, seg_parent: Any, seg_birth: Any, seg_size: Any, splits: Any, aux: Any, p_lam: Any
) -> Any:
    """The condensed tree over cluster numbers (0: the root; children after parents):
    ``(number, cl_parent, birth, cl_size, stability, deaths)``, ``number`` mapping segments to
    clusters. Its cluster rows are ``(cl_parent[c], c, birth[c], cl_size[c])`` for ``c >= 1``,
    its point rows ``(number[aux[4 p + 1]], p, lambda of p, 1)``; ``deaths``: each cluster's
    largest row lambda."""
    size = seg_parent.shape[0]
    number, segment_of = _cluster_numbers(root_seg, splits, size)
    clusterpart, pointpart, record = _segment_sums(segment_of, seg_parent, seg_birth, seg_size, aux, p_lam)
    cl_parent = np.zeros(size, dtype=np.int64)
    birth = np.zeros(size)
    cl_size = np.zeros(size, dtype=np.int64)
    stability = np.empty(size)
    deaths = np.empty(size)
    for c in range(size):
        g = segment_of[c]
        if c != 0:
            cl_parent[c] = number[seg_parent[g]]
            birth[c] = seg_birth[g]
            cl_size[c] = seg_size[g]
        stability[c] = clusterpart[g] + pointpart[g]
        deaths[c] = record[4 * g + 2]
    return number, cl_parent, birth, cl_size, stability, deaths


@jit
def select_and_label(  # pragma: no cover - runs compiled
    root_seg: int,
    seg_parent: Any,
    seg_birth: Any,
    seg_size: Any,
    splits: Any,
    aux: Any,
    p_lam: Any,
    leaf: bool,
    epsilon: float,
    labels: Any,
    probabilities: Any,
) -> None:
    """Pass 2: fills ``labels`` (int64) and ``probabilities`` (float64) from pass 1's output."""
    number, cl_parent, birth, _, stability, deaths = cluster_tree(
        root_seg, seg_parent, seg_birth, seg_size, splits, aux, p_lam
    )
    n = aux.shape[0] // 4
    F = p_lam.shape[0] // n  # float64 slots per point record
    L = F // 2  # the lambda's slot
    size = cl_parent.shape[0]
    selected = select_clusters(cl_parent, birth, stability, leaf, epsilon)
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
    # per segment: the label of its points and the largest lambda of their selected cluster
    record = np.empty(2 * size)
    for g in range(size):
        a = anchor[number[g]]
        record[2 * g] = label_of[a]
        record[2 * g + 1] = deaths[a]
    for p in range(n):
        if p + D < n:
            _prefetch(record, 2 * aux[4 * (p + D) + 1])
        g = 2 * aux[4 * p + 1]
        label = np.int64(record[g])
        labels[p] = label
        if label < 0:
            probabilities[p] = 0.0
        else:
            lam = p_lam[F * p + L]
            top = record[g + 1]
            if top == 0.0 or np.isinf(lam):
                probabilities[p] = 1.0
            else:
                probabilities[p] = min(lam, top) / top
