"""HDBSCAN*'s condensed tree, cluster stabilities and labels, written once for any array module.

``xp`` is NumPy (the reference: ``hdbscan``'s NumPy path, CI) or CuPy (``dendrogram_labels``: the
same functions on the device). Everything is vectorized: pointer jumping (:func:`jump`) for the
walks over the dendrogram and the cluster tree, sorts for the numbering. The only parts that
differ are two segment reductions (:func:`segment_sums`, :func:`segment_max`): NumPy code here
(the reference), or with a ``launch`` the kernels of ``kernels/hdbscan_tree.cu``, one thread per
segment adding its segment in order.

**The order of the stability sums** (float sums depend on it). For cluster ``c`` born at
``birth_c``: ``clusterpart = 0.0 + (birth_k - birth_c) * size_k`` over its child clusters ``k``
in number order; ``pointpart = 0.0 + S_0 + S_1 + ...``, where the points whose row parent is
``c``, in index order, are cut into chunks of :data:`CHUNK` consecutive ones and ``S_j = 0.0 +``
the chunk's ``lambda_p - birth_c`` in index order; ``stability = clusterpart + pointpart``. The
chunks let the device sum a large cluster in parallel while every path keeps the same bits
(the compiled passes of ``compiled`` keep a running chunk sum per cluster).

Design: docs/design/dendrogram.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

Array = Any  # a NumPy or a CuPy array
#: ``launch(kernel name, grid, block, args)``: runs a kernel of ``kernels/hdbscan_tree.cu`` (CuPy's
#: ``RawKernel`` on the device; the tests also run the file compiled for the host)
Launch = Callable[[str, tuple[int], tuple[int], tuple[Any, ...]], None]
BLOCK = 256  # threads per block of the segment kernels

CHUNK = 1024
"""Points per chunk of a cluster's stability sum (``compiled.CHUNK`` is the same)."""


def jump(ptr: Array, xp: Any = np, launch: Launch | None = None, *, parents_after: bool = False) -> Array:
    """Follow the pointers from every node to their fixed point (``ptr[x] == x``): by pointer
    doubling (a host check after each round), or with ``launch`` in one kernel (``find_roots``),
    which overwrites ``ptr`` (an int64 array the caller made for it). ``parents_after``: parents
    have larger ids than their children (else smaller): the kernel starts from the ancestors."""
    if launch is not None:
        count = int(ptr.shape[0])
        if count:
            args = (ptr, np.int64(count), np.int64(parents_after))
            launch("find_roots", ((count + BLOCK - 1) // BLOCK,), (BLOCK,), args)
        return ptr
    while True:
        nxt = ptr[ptr]
        if bool(xp.array_equal(nxt, ptr)):
            return ptr
        ptr = nxt


def argsort(keys: Array, xp: Any) -> Array:
    """A stable argsort (CuPy's is always stable and takes no ``kind``)."""
    return np.argsort(keys, kind="stable") if xp is np else keys.argsort()


def _quiet(xp: Any) -> Any:
    """NumPy's floating-point warnings off (inf by design); CuPy raises none."""
    return (
        np.errstate(divide="ignore", over="ignore", invalid="ignore")
        if xp is np
        else contextlib.nullcontext()
    )


@dataclass(frozen=True)
class Clusters:
    """The condensed tree by cluster number (0: the root; children after parents, the two
    children of a split numbered consecutively) and its point rows, in point index order."""

    parent: Array  # (C,) int64, the root's own number (0) at the root
    birth: Array  # (C,) float64: the lambda of a cluster's row (the root: 0.0)
    size: Array  # (C,) int64: the size of a cluster's row (the root: n)
    point_cluster: Array  # (n,) int64: the cluster each point leaves
    point_lam: Array  # (n,) float64: the lambda at which it leaves
    #: (C,) int64: the dendrogram node each cluster is (the root: the last merge, 2n - 2); None
    #: where the clusters were not made from a dendrogram
    node: Array | None = None


def condense_columns(
    left: Array,
    right: Array,
    distances: Array,
    sizes: Array,
    min_cluster_size: int,
    xp: Any = np,
    launch: Launch | None = None,
) -> Clusters:
    """The condensed tree of a dendrogram given as columns (merge ``i`` is node ``n + i``).

    Clusters are numbered as the compiled passes number them: the root 0, then the children of
    the splits from the last merge down, the left child (``left``'s column) first. ``launch``:
    the walks up the dendrogram by ``find_roots`` (None: pointer doubling).
    """
    m = int(left.shape[0])
    n = m + 1
    nodes = 2 * n - 1
    root = m - 1  # merges are indexed locally: merge i is node n + i
    left = left.astype(xp.int64)
    right = right.astype(xp.int64)
    msize = sizes.astype(xp.int64)
    dist = distances.astype(xp.float64)
    with _quiet(xp):
        lam_of_merge = xp.where(dist > 0.0, 1.0 / xp.where(dist > 0.0, dist, 1.0), xp.inf)
    merges = xp.arange(m, dtype=xp.int64)
    parent = xp.arange(nodes, dtype=xp.int64)  # node ids
    parent[left] = merges + n
    parent[right] = merges + n
    up = parent[n:] - n  # each merge's parent merge (the root's: itself)
    big = msize >= min_cluster_size  # per merge; points are never big (min_cluster_size >= 2)
    big[root] = True  # the root is always processed
    starts_cluster = _starts_cluster(left, right, big, n, xp)
    # every merge belongs to the cluster started by its nearest ancestor-or-self that starts one
    owner = jump(xp.where(starts_cluster, merges, up), xp, launch, parents_after=True)
    split_children, number = _numbered(starts_cluster, up, left, n, xp)
    count = int(split_children.shape[0]) + 1
    cl_parent = xp.zeros(count, dtype=xp.int64)
    birth = xp.zeros(count, dtype=xp.float64)
    cl_size = xp.full(count, n, dtype=xp.int64)
    split = up[split_children]
    cl_parent[1:] = number[owner[split]]
    birth[1:] = lam_of_merge[split]
    cl_size[1:] = msize[split_children]
    cl_node = xp.full(count, nodes - 1, dtype=xp.int64)
    cl_node[1:] = split_children + n
    # a point leaves at the parent of its topmost small ancestor-or-self
    top_small = jump(xp.where(big | big[up], merges, up), xp, launch, parents_after=True)
    first_up = parent[:n] - n
    leave_at = xp.where(big[first_up], first_up, up[top_small[first_up]])
    return Clusters(
        parent=cl_parent,
        birth=birth,
        size=cl_size,
        point_cluster=number[owner[leave_at]],
        point_lam=lam_of_merge[leave_at],
        node=cl_node,
    )


def _starts_cluster(left: Array, right: Array, big: Array, n: int, xp: Any) -> Array:
    """Per merge: whether it starts a cluster, a big merge whose sibling is big too (a true split),
    and the root."""
    nodes = 2 * n - 1
    sibling = xp.empty(nodes, dtype=xp.int64)
    sibling[left] = right
    sibling[right] = left
    sibling[nodes - 1] = nodes - 1
    big_node = xp.zeros(nodes, dtype=xp.bool_)
    big_node[n:] = big
    starts_cluster = big & big_node[sibling[n:]]
    starts_cluster[n - 2] = True  # the root (merge m - 1)
    return starts_cluster


def _numbered(starts_cluster: Array, up: Array, left: Array, n: int, xp: Any) -> tuple[Array, Array]:
    """The merges that start a cluster below a split, in cluster number order, and each merge's
    cluster number (-1: none): the root 0, the others by descending parent merge, the left child
    first. Takes the root out of ``starts_cluster``."""
    m = n - 1
    root = m - 1
    starts_cluster[root] = False  # numbered apart
    starters = xp.flatnonzero(starts_cluster)
    merge_of = up[starters]
    key = (root - merge_of) * 2 + (starters + n != left[merge_of]).astype(xp.int64)  # unique
    split_children = starters[argsort(key, xp)]
    count = int(split_children.shape[0]) + 1
    number = xp.full(m, -1, dtype=xp.int64)
    number[root] = 0
    number[split_children] = xp.arange(1, count, dtype=xp.int64)
    return split_children, number


def _launched(name: str, values: Array, starts: Array, ends: Array, xp: Any, launch: Launch) -> Array:
    count = int(starts.shape[0])
    out = xp.empty(count, dtype=xp.float64)
    if count:
        args = (
            xp.ascontiguousarray(values, dtype=xp.float64),
            xp.ascontiguousarray(starts, dtype=xp.int64),
            xp.ascontiguousarray(ends, dtype=xp.int64),
            np.int64(count),
            out,
        )
        launch(name, ((count + BLOCK - 1) // BLOCK,), (BLOCK,), args)
    return out


def segment_sums(
    values: Array, starts: Array, ends: Array, xp: Any = np, launch: Launch | None = None
) -> Array:
    """``out[s] = 0.0 + values[starts[s]] + ... + values[ends[s] - 1]``, added in that order."""
    if launch is not None:
        return _launched("segment_sums", values, starts, ends, xp, launch)
    lengths = ends - starts
    out = np.zeros(starts.shape[0])
    if not out.size:
        return out
    order = np.argsort(-lengths, kind="stable")  # the longest first: the active ones a prefix
    first = starts[order]
    desc = lengths[order]
    acc = np.zeros(out.size)
    for j in range(int(desc[0])):
        active = int(np.searchsorted(-desc, -j, side="left"))  # the segments longer than j
        acc[:active] += values[first[:active] + j]  # one addition per segment: in order
    out[order] = acc
    return out


def segment_max(
    values: Array, starts: Array, ends: Array, xp: Any = np, launch: Launch | None = None
) -> Array:
    """``out[s] = max(0.0, values[starts[s]:ends[s]])`` (no NaN among the values)."""
    if launch is not None:
        return _launched("segment_max", values, starts, ends, xp, launch)
    out = np.zeros(starts.shape[0])
    lengths = ends - starts
    ids = np.repeat(np.arange(starts.shape[0]), lengths)
    offsets = np.arange(ids.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    np.maximum.at(out, ids, values[np.repeat(starts, lengths) + offsets])
    return out


def _grouped(keys: Array, count: int, xp: Any) -> tuple[Array, Array, Array]:
    """A stable order grouping ``keys`` (``0..count-1``) and each key's range in it."""
    narrow = keys.astype(xp.int32) if count < 2**31 else keys  # the device's radix sort: half the passes
    order = argsort(narrow, xp)
    ids = xp.arange(count, dtype=xp.int64)
    sorted_keys = keys[order]
    return (
        order,
        xp.searchsorted(sorted_keys, ids, side="left"),
        xp.searchsorted(sorted_keys, ids, side="right"),
    )


def summaries(clusters: Clusters, xp: Any = np, launch: Launch | None = None) -> tuple[Array, Array]:
    """Each cluster's stability (summed in the order of the module docstring) and death (the
    largest lambda of its rows: its child clusters' births and its points' lambdas). ``launch``:
    the segment reductions' kernels (None: NumPy's reference code)."""
    count = int(clusters.birth.shape[0])
    birth = clusters.birth
    if count > 1:
        child_parent = clusters.parent[1:]
        order, first, end = _grouped(child_parent, count, xp)
        contrib = (birth[1:] - birth[child_parent]) * clusters.size[1:]
        clusterpart = segment_sums(contrib[order], first, end, xp, launch)
        child_max = segment_max(birth[1:][order], first, end, xp, launch)
    else:
        clusterpart = xp.zeros(1, dtype=xp.float64)
        child_max = xp.zeros(1, dtype=xp.float64)
    order, first, end = _grouped(clusters.point_cluster, count, xp)
    lam = clusters.point_lam[order]
    values = lam - birth[clusters.point_cluster[order]]
    chunks = (end - first + CHUNK - 1) // CHUNK
    chunk_end = xp.cumsum(chunks)
    chunk_first = chunk_end - chunks
    total = int(chunk_end[-1])
    chunk = xp.arange(total, dtype=xp.int64)
    owner = xp.searchsorted(chunk_end, chunk, side="right")
    start = first[owner] + (chunk - chunk_first[owner]) * CHUNK
    stop = xp.minimum(start + CHUNK, end[owner])
    chunk_sums = segment_sums(values, start, stop, xp, launch)
    pointpart = segment_sums(chunk_sums, chunk_first, chunk_end, xp, launch)
    chunk_max = segment_max(lam, start, stop, xp, launch)  # in chunks too: no thread walks a whole cluster
    deaths = xp.maximum(segment_max(chunk_max, chunk_first, chunk_end, xp, launch), child_max)
    return clusterpart + pointpart, deaths


def labels_and_probabilities(
    clusters: Clusters,
    selected: Array,
    deaths: Array,
    xp: Any = np,
    anchor: Array | None = None,
    launch: Launch | None = None,
) -> tuple[Array, Array]:
    """Labels (selected clusters numbered in cluster order; -1: noise) and probabilities: a
    point's lambda over the death of its selected cluster (1 where that is 0 or the lambda inf).
    ``anchor``: each cluster's selected ancestor-or-self (0 where none), if already known;
    ``launch``: else found by ``find_roots`` (None: pointer doubling)."""
    count = int(selected.shape[0])
    ids = xp.arange(count, dtype=xp.int64)
    selected = selected.copy()
    selected[0] = False
    if anchor is None:  # the nearest selected ancestor-or-self
        anchor = jump(xp.where(selected, ids, clusters.parent), xp, launch)
    label_of = xp.where(selected, xp.cumsum(selected, dtype=xp.int64) - 1, -1)
    a = anchor[clusters.point_cluster]
    labels = label_of[a]  # -1 where the anchor is the (never selected) root
    lam = clusters.point_lam
    top = deaths[a]
    with _quiet(xp):
        ratio = xp.minimum(lam, top) / top
    prob = xp.where((top == 0.0) | xp.isinf(lam), 1.0, ratio)
    return labels, xp.where(labels >= 0, prob, 0.0)
