"""HDBSCAN*'s fitted model: what :class:`gpu_core.HDBSCAN`, prediction and soft clustering read.

:func:`fit_model` runs the engine's pipeline (the mutual-reachability tree of ``euclidean_mst``,
its dendrogram, ``condense``'s condensed tree, stabilities and deaths, the selection, the labels)
and keeps every stage, on the device for the GPU backend (CuPy arrays; NumPy on the CPU backend):
the labels and probabilities are those of :func:`gpu_core.hdbscan`, bit for bit. The selection
runs on the device (``eom_paths``) with the default options; with ``cluster_selection_epsilon``,
``allow_single_cluster`` or ``max_cluster_size`` it runs on the host over the (few) condensed
clusters (``select``), as the epsilon merge always has.

The tree queries of prediction, soft clustering and GLOSH need each cluster's place in a preorder
of the condensed tree (:class:`TreeTables`): a cluster's points are one interval of the
dendrogram's leaf order (found by pointer jumping from the root, ``find_roots_counted`` on the
device), so the clusters sorted by (interval start, larger first) are in preorder and a subtree
is one range of it. A sparse table over that order then answers "the smallest birth between two
clusters" (the lambda where they split: ``merge_height`` of the hdbscan library) and "the largest
death below a cluster" (GLOSH) for every point at once: no walk up the tree per point.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._backend.resolve import Backend
from .._points.emst import _check_index_metric
from .._points.index import PointIndex, build_index, check_alpha, tree_on_index, validated
from .._points.metrics import resolve_metric
from .._points.tree import EuclideanTree
from .._points.validate import check_min_samples
from ..errors import ClusteringParameterError
from .condense import (
    Clusters,
    Launch,
    condense_columns,
    jump,
    labels_and_probabilities,
    summaries,
)
from .dendrogram_labels import _cupy_launch, _module_of, _to_host

Array = Any  # a NumPy or a CuPy array


@dataclass(frozen=True)
class Options:
    """The clustering's parameters, checked (``min_samples`` resolved: scikit-learn's, the point
    itself counted)."""

    min_cluster_size: int
    min_samples: int
    method: str
    epsilon: float
    allow_single_cluster: bool
    max_cluster_size: int | None
    #: edges weigh max(core_i, core_j, d(i, j) / alpha)
    alpha: float = 1.0


def check_min_cluster_size(value: Any) -> int:
    """``min_cluster_size`` as an int, or a :class:`ClusteringParameterError`: at least 2."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or (value < 2):
        raise ClusteringParameterError(
            f"min_cluster_size must be an integer of at least 2; got {value!r}.",
            field="min_cluster_size",
        )
    return int(value)


def check_method(method: Any) -> str:
    """``cluster_selection_method``, or a :class:`ClusteringParameterError`: "eom" or "leaf"."""
    if method not in ("eom", "leaf"):
        raise ClusteringParameterError(
            f"cluster_selection_method must be 'eom' or 'leaf'; got {method!r}.",
            field="cluster_selection_method",
        )
    return str(method)


def finite_epsilon(epsilon: Any) -> float:
    """``cluster_selection_epsilon`` as a float, or a :class:`ClusteringParameterError`: finite
    and at least 0."""
    eps = float(epsilon)
    if not np.isfinite(eps) or eps < 0.0:
        raise ClusteringParameterError(
            f"cluster_selection_epsilon must be a finite number >= 0; got {epsilon!r}.",
            field="cluster_selection_epsilon",
        )
    return eps


def check_options(
    n: int,
    min_cluster_size: Any,
    min_samples: Any,
    method: Any,
    epsilon: Any,
    allow_single_cluster: Any,
    max_cluster_size: Any,
    alpha: Any = 1.0,
) -> Options:
    """The parameters as :class:`Options`, or a :class:`ClusteringParameterError` naming the bad one."""
    check_min_cluster_size(min_cluster_size)
    wanted = min_cluster_size if min_samples is None else min_samples
    if isinstance(wanted, int | np.integer) and not isinstance(wanted, bool) and wanted > n >= 1:
        raise ClusteringParameterError(
            f"min_samples={wanted} (min_cluster_size where min_samples is None) is larger than the "
            f"number of points, n_samples = {n}; pass more points or a smaller min_samples.",
            field="min_samples",
        )
    k = check_min_samples(wanted, n)
    check_method(method)
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float | np.integer | np.floating):
        raise ClusteringParameterError(
            f"cluster_selection_epsilon must be a number; got {epsilon!r}.", field="cluster_selection_epsilon"
        )
    eps = finite_epsilon(epsilon)
    if not isinstance(allow_single_cluster, bool | np.bool_):
        raise ClusteringParameterError(
            f"allow_single_cluster must be True or False; got {allow_single_cluster!r}.",
            field="allow_single_cluster",
        )
    return Options(
        int(min_cluster_size), k, str(method), eps, bool(allow_single_cluster),
        _size_limit(max_cluster_size), check_alpha(alpha),
    )  # fmt: skip


def _size_limit(max_cluster_size: Any) -> int | None:
    """``max_cluster_size`` as the largest cluster allowed (None: no limit, as 0 means in the
    hdbscan library), or a :class:`ClusteringParameterError`."""
    if max_cluster_size is None:
        return None
    if (
        isinstance(max_cluster_size, bool)
        or not isinstance(max_cluster_size, int | np.integer)
        or (max_cluster_size < 0)
    ):
        raise ClusteringParameterError(
            f"max_cluster_size must be None or an integer >= 0 (0: no limit, as in the hdbscan "
            f"library); got {max_cluster_size!r}.",
            field="max_cluster_size",
        )
    return int(max_cluster_size) or None


@dataclass(eq=False)
class Model:
    """A fitted HDBSCAN* model. Arrays on the device (CuPy) for the GPU backend, else NumPy;
    ``labels`` and ``probabilities`` always NumPy. Cluster numbers are ``condense``'s (0 the
    root, children after parents); ``labels`` number the selected clusters in that order."""

    options: Options
    index: PointIndex
    tree: EuclideanTree  # the mutual-reachability tree, edges in merge order
    linkage: Array  # (n - 1, 4) float64
    clusters: Clusters
    stability: Array  # (C,) raw
    persistence_stability: Array  # (C,) as the selection resolved it (host), else the raw one
    deaths: Array  # (C,) the largest lambda of a cluster's rows
    selected: Array  # (C,) bool, the root only with allow_single_cluster
    cluster_label: Array  # (C,) int64: the label of a cluster's selected ancestor-or-self, -1 if none
    labels: np.ndarray[Any, np.dtype[np.int64]]
    probabilities: np.ndarray[Any, np.dtype[np.float64]]
    timings_ms: dict[str, float]
    _tables: TreeTables | None = field(default=None, repr=False)

    @property
    def xp(self) -> Any:
        return _module_of(self.clusters.point_lam)

    @property
    def launch(self) -> Launch | None:
        return None if self.xp is np else _cupy_launch

    @property
    def n(self) -> int:
        return self.index.n

    @property
    def num_labels(self) -> int:
        return int(self.labels.max(initial=-1)) + 1

    def selected_clusters(self) -> Array:
        """The selected clusters' numbers in label order (``(L,)`` int64)."""
        return self.xp.flatnonzero(self.selected).astype(self.xp.int64)

    def tables(self) -> TreeTables:
        """The preorder tables of the condensed tree (made once, on first use)."""
        if self._tables is None:
            self._tables = tree_tables(self)
        return self._tables


def fit_model(
    points: Any,
    options_of: Any,
    backend: Backend = "auto",
    *,
    metric: Any = "euclidean",
    metric_params: dict[str, Any] | None = None,
) -> Model:
    """Validate ``points`` (an ``(n, d)`` NumPy or CuPy array, a distance matrix for
    ``metric="precomputed"``, or a :class:`PointIndex`: then of its own metric), check the options
    (``options_of(n)`` returns :class:`Options`) and fit."""
    started = time.perf_counter()
    if isinstance(points, PointIndex):
        _check_index_metric(points, metric, metric_params)
        index = points
        fresh = False
    else:
        resolved = resolve_metric(metric, metric_params)
        coords, chosen, from_cupy = validated(points, backend, resolved)
        index = build_index(points, coords, chosen, from_cupy, metric=resolved)
        fresh = True
    options: Options = options_of(index.n)
    tree = tree_on_index(
        index,
        options.min_samples,
        started,
        fresh=fresh,
        on_device=index.backend == "gpu",
        alpha=options.alpha,
    )
    timings = dict(tree.timings_ms)
    t0 = time.perf_counter()
    n = index.n
    linkage = _linkage(tree, n)
    xp = _module_of(linkage)
    launch = None if xp is np else _cupy_launch
    t1 = time.perf_counter()
    clusters, stability, deaths = _condensed(linkage, n, options.min_cluster_size, xp, launch)
    selected, anchor, resolved = _select(clusters, stability, options, xp, launch)
    if n == 1:  # nothing to select
        selected = xp.zeros(1, dtype=xp.bool_)
    label_of = xp.where(selected, xp.cumsum(selected, dtype=xp.int64) - 1, -1)
    cluster_label = label_of[anchor]
    if n > 1 and bool(selected[0]):  # allow_single_cluster chose the root
        labels, probabilities = _single_cluster_labels(clusters, deaths, options.epsilon, xp)
    elif n > 1:
        labels, probabilities = labels_and_probabilities(clusters, selected, deaths, xp, anchor)
    else:
        labels, probabilities = xp.full(1, -1, dtype=xp.int64), xp.zeros(1)
    t2 = time.perf_counter()
    timings["linkage_ms"] = (t1 - t0) * 1e3
    timings["selection_ms"] = (t2 - t1) * 1e3
    return Model(
        options=options, index=index, tree=tree, linkage=linkage, clusters=clusters, stability=stability,
        persistence_stability=resolved, deaths=deaths, selected=selected, cluster_label=cluster_label,
        labels=np.asarray(_to_host(labels), dtype=np.int64),
        probabilities=np.asarray(_to_host(probabilities), dtype=np.float64), timings_ms=timings,
    )  # fmt: skip


def _linkage(tree: EuclideanTree, n: int) -> Array:
    """The tree's dendrogram, where the tree is (a NumPy or a CuPy linkage matrix)."""
    if _module_of(tree.src) is np:
        from .._dendrogram.cpu import linkage_from_sorted_edges

        return linkage_from_sorted_edges(n, tree.src, tree.dst, tree.weights)
    from .._dendrogram.gpu import linkage_on_device

    return linkage_on_device(n, tree.src, tree.dst, tree.weights)


def _condensed(
    linkage: Array, n: int, min_cluster_size: int, xp: Any, launch: Launch | None
) -> tuple[Clusters, Array, Array]:
    """The condensed tree of ``linkage``, its clusters' stabilities and deaths."""
    if n == 1:  # one point: one cluster (the root) without rows, the point noise
        clusters = Clusters(
            parent=xp.zeros(1, dtype=xp.int64), birth=xp.zeros(1), size=xp.ones(1, dtype=xp.int64),
            point_cluster=xp.zeros(1, dtype=xp.int64), point_lam=xp.zeros(1),
            node=xp.zeros(1, dtype=xp.int64),
        )  # fmt: skip
        return clusters, xp.zeros(1), xp.zeros(1)
    z = linkage
    clusters = condense_columns(z[:, 0], z[:, 1], z[:, 2], z[:, 3], min_cluster_size, xp, launch)
    stability, deaths = summaries(clusters, xp, launch)
    return clusters, stability, deaths


def _select(
    clusters: Clusters, stability: Array, options: Options, xp: Any, launch: Launch | None
) -> tuple[Array, Array, Array]:
    """The selected clusters' mask, each cluster's selected ancestor-or-self (the root 0 where
    none) and the stabilities as the selection resolved them."""
    count = int(clusters.parent.shape[0])
    ids = xp.arange(count, dtype=xp.int64)
    default = options.epsilon == 0.0 and not options.allow_single_cluster and options.max_cluster_size is None
    if launch is not None and default and count > 1:  # on the device, by heavy paths
        from .eom_paths import select_on_device

        selected, anchor = select_on_device(
            clusters.parent, clusters.size, stability, options.method, xp, launch
        )
        return selected, anchor, stability  # selected clusters keep their own stability
    from .select import select_clusters

    resolved = np.empty(count)
    mask = select_clusters(
        _to_host(clusters.parent), _to_host(clusters.birth),
        np.asarray(_to_host(stability), dtype=np.float64),
        options.method, options.epsilon, allow_single_cluster=options.allow_single_cluster,
        max_cluster_size=options.max_cluster_size, size=_to_host(clusters.size), resolved=resolved,
    )  # fmt: skip
    selected = xp.asarray(mask)
    anchor = jump(xp.where(selected, ids, clusters.parent), xp, launch)
    return selected, anchor, xp.asarray(resolved)


def _single_cluster_labels(clusters: Clusters, deaths: Array, epsilon: float, xp: Any) -> tuple[Array, Array]:
    """The labels when the root is the one selected cluster (``allow_single_cluster``), as the
    hdbscan library's ``do_labelling`` gives them: a point is in it when it leaves at a lambda of
    at least the root's death (with an epsilon: ``1 / epsilon``), else noise."""
    lam = clusters.point_lam
    death = deaths[0]
    threshold = 1.0 / epsilon if epsilon != 0.0 else death
    labels = xp.where(lam >= threshold, 0, -1).astype(xp.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = xp.minimum(lam, death) / xp.where(death == 0.0, 1.0, death)
    prob = xp.where((death == 0.0) | xp.isinf(lam), 1.0, ratio)
    return labels, xp.where(labels >= 0, prob, 0.0)


# --- preorder tables -----------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class TreeTables:
    """The condensed tree in preorder: cluster ``c`` is at ``tin[c]``, its subtree spans
    ``tin[c] .. tout[c] - 1``; ``birth_min``: a sparse table of the births in preorder (minimum
    over ranges, :func:`range_min`); ``subtree_death``: each cluster's largest death in its
    subtree (GLOSH's ``lambda_max``)."""

    tin: Array
    tout: Array
    birth_min: Array  # (levels, C)
    log2: Array  # (C + 1,) floor(log2(x))
    subtree_death: Array


def jump_sums(ptr: Array, values: Array, xp: Any, launch: Launch | None, *, parents_after: bool) -> Array:
    """Each node's sum of ``values`` from itself up to its root, the root's excluded (``values``
    must be 0 at the roots; sums below 2^32 on the device): ``find_roots_counted``, or pointer
    doubling."""
    if launch is not None:
        size = int(ptr.shape[0])
        words = ptr.astype(xp.uint64) | (values.astype(xp.uint64) << 32)
        grid = ((size + 255) // 256,)
        launch("find_roots_counted", grid, (256,), (words, np.int64(size), np.int64(parents_after)))
        return (words >> 32).astype(xp.int64)
    acc = values.astype(np.int64)
    p = ptr.copy()
    while True:
        nxt = p[p]
        if bool(np.array_equal(nxt, p)):
            return acc
        acc = acc + acc[p]
        p = nxt


def sparse_table(values: Array, xp: Any, op: Any) -> tuple[Array, Array]:
    """``table[j, i] = op`` over ``values[i : i + 2^j]`` (where that fits) and ``log2[x]``."""
    count = int(values.shape[0])
    levels = max(1, count.bit_length())
    table = xp.empty((levels, count), dtype=values.dtype)
    table[0] = values
    for j in range(1, levels):
        half = 1 << (j - 1)
        table[j] = table[j - 1]
        if count > half:
            table[j, : count - half] = op(table[j - 1, : count - half], table[j - 1, half:])
    log2 = xp.zeros(count + 1, dtype=xp.int64)
    for j in range(1, levels):
        log2[1 << j :] += 1
    return table, log2


def range_query(table: Array, log2: Array, lo: Array, hi: Array, xp: Any, op: Any) -> Array:
    """``op`` over positions ``lo .. hi - 1`` (``hi > lo``, arrays of any shape)."""
    level = log2[hi - lo]
    return op(table[level, lo], table[level, hi - xp.left_shift(1, level)])


def tree_tables(model: Model) -> TreeTables:
    xp, launch = model.xp, model.launch
    clusters = model.clusters
    n = model.n
    count = int(clusters.parent.shape[0])
    if n == 1 or clusters.node is None:
        zeros = xp.zeros(count, dtype=xp.int64)
        table, log2 = sparse_table(clusters.birth, xp, xp.minimum)
        return TreeTables(zeros, zeros + 1, table, log2, model.deaths.copy())
    z = model.linkage
    nodes = 2 * n - 1
    left = z[:, 0].astype(xp.int64)
    right = z[:, 1].astype(xp.int64)
    merges = xp.arange(n, nodes, dtype=xp.int64)
    parent = xp.arange(nodes, dtype=xp.int64)
    parent[left] = merges
    parent[right] = merges
    sizes = xp.ones(nodes, dtype=xp.int64)
    sizes[n:] = z[:, 3].astype(xp.int64)
    offset = xp.zeros(nodes, dtype=xp.int64)
    offset[right] = sizes[left]  # a right child's leaves follow its left sibling's
    start = jump_sums(parent, offset, xp, launch, parents_after=True)
    lo = start[clusters.node]
    hi = lo + clusters.size
    order = xp.lexsort(xp.stack((-clusters.size, lo)))  # by start, the larger (the ancestor) first
    tin = xp.empty(count, dtype=xp.int64)
    tin[order] = xp.arange(count, dtype=xp.int64)
    tout = xp.searchsorted(lo[order], hi, side="left").astype(xp.int64)
    birth_min, log2 = sparse_table(clusters.birth[order], xp, xp.minimum)
    death_max, _ = sparse_table(model.deaths[order], xp, xp.maximum)
    subtree_death = range_query(death_max, log2, tin, tout, xp, xp.maximum)
    del death_max
    return TreeTables(tin, tout, birth_min, log2, subtree_death)


def merge_heights(tables: Any, point_cluster: Array, lam: Array, chosen: Array, xp: Any) -> Array:
    """The hdbscan library's ``merge_height`` of each row's cluster with each cluster of
    ``chosen`` (``(r, L)``): the row's lambda where one is an ancestor-or-self of the other, else
    the lambda at which the two split (the births of their lowest common ancestor's children).
    ``tables``: anything with :class:`TreeTables`' ``tin``, ``tout``, ``birth_min`` and ``log2``."""
    a_in = tables.tin[point_cluster][:, None]
    a_out = tables.tout[point_cluster][:, None]
    b_in = tables.tin[chosen][None, :]
    b_out = tables.tout[chosen][None, :]
    nested = ((a_in <= b_in) & (b_in < a_out)) | ((b_in <= a_in) & (a_in < b_out))
    lo = xp.where(nested, 0, xp.minimum(a_in, b_in) + 1)
    hi = xp.where(nested, 1, xp.maximum(a_in, b_in) + 1)
    split = range_query(tables.birth_min, tables.log2, lo, hi, xp, xp.minimum)
    return xp.where(nested, lam[:, None], split)


def glosh_scores(model: Model) -> Array:
    """GLOSH outlier scores, the hdbscan library's ``outlier_scores``: ``(lambda_max - lambda_p) /
    lambda_max`` with ``lambda_max`` the largest death in the subtree of the cluster the point
    leaves (0 where that is 0 or the point's lambda is infinite)."""
    xp = model.xp
    if model.n == 1:
        return xp.zeros(1)
    c = model.clusters
    top = model.tables().subtree_death[c.point_cluster]
    lam = c.point_lam
    with np.errstate(divide="ignore", invalid="ignore"):
        score = (top - lam) / xp.where(top == 0.0, 1.0, top)
    return xp.where((top == 0.0) | xp.isinf(lam), 0.0, score)


def exemplar_points(model: Model, cluster_label: Array | None = None) -> tuple[Array, Array]:
    """Each selected cluster's exemplars, as the hdbscan library's prediction data picks them:
    the points of the leaf clusters below it that leave at their leaf's largest lambda. Point
    indices and their labels, ordered by (label, point). ``cluster_label``: each cluster's label
    (the model's own where None)."""
    xp = model.xp
    c = model.clusters
    count = int(c.parent.shape[0])
    leaf = xp.ones(count, dtype=xp.bool_)
    leaf[c.parent[1:]] = False
    pc = c.point_cluster
    label = (model.cluster_label if cluster_label is None else cluster_label)[pc]
    keep = leaf[pc] & (c.point_lam == model.deaths[pc]) & (label >= 0)
    points = xp.flatnonzero(keep).astype(xp.int64)
    order = xp.argsort(label[points], kind="stable") if xp is np else xp.argsort(label[points])
    return points[order], label[points][order]
