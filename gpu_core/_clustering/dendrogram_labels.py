"""HDBSCAN*'s flat clustering from a dendrogram, where the dendrogram lies: NumPy or CuPy arrays.

:func:`labels_from_dendrogram` takes the dendrogram as columns (``left``, ``right`` child ids:
points ``0..n-1``, merge ``i`` is ``n + i``; ``sizes``; the merge distances, in merge order, as
``linkage_from_sorted_edges`` builds them) and returns labels and probabilities as arrays of the
same module. The condensed tree, the stabilities, the deaths and the labels run vectorized on
that module (``condense``, one code for both). The selection runs there too, by heavy paths
(``eom_paths``), for excess of mass and leaves; with a ``cluster_selection_epsilon`` it runs on
the host, over the clusters (few next to the points): their parents, births and stabilities are
copied there and go through ``select``'s selection, compiled by Numba where the host path would be.

With NumPy it is ``hdbscan``'s NumPy path (which calls it); with CuPy it gives the same bits:
the float operations are the same elementwise ones (one rounding each, no FMA), the sums
(stabilities) run one thread per segment in the order ``condense`` defines, and the excess of
mass one thread per path in the host's order. Walks up the trees are one kernel each
(``find_roots``). Host syncs on the device: the sizes of the cluster and chunk arrays, and the
paths' launch bounds (or the host selection's copy).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .condense import Launch, condense_columns, labels_and_probabilities, summaries
from .eom_paths import select_on_device
from .passes import passes_for, plain
from .select import select_clusters

Array = Any  # a NumPy or a CuPy array


def _module_of(array: Any) -> Any:
    if type(array).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def labels_from_dendrogram(
    left: Array,
    right: Array,
    sizes: Array,
    distances: Array,
    min_cluster_size: int,
    method: str = "eom",
    epsilon: float = 0.0,
    *,
    compiled: bool | None = None,
) -> tuple[Array, Array]:
    """Labels (int64, -1: noise) and probabilities (float64) of HDBSCAN*'s flat clustering.

    ``left``, ``right``, ``sizes``: the dendrogram's merges (any integer or float dtype, one
    array module), ``distances``: their heights (float64). ``compiled``: the host selection as
    in ``hdbscan.labels_from_edges`` (None: compiled for more than ``COMPILED_FROM`` points
    where Numba is installed). The same bits as ``hdbscan.labels_from_tree``.
    """
    xp = _module_of(left)
    launch = None if xp is np else _cupy_launch
    return dendrogram_labels(
        xp, launch, left, right, sizes, distances, min_cluster_size, method, epsilon, compiled=compiled
    )


def dendrogram_labels(
    xp: Any,
    launch: Launch | None,
    left: Array,
    right: Array,
    sizes: Array,
    distances: Array,
    min_cluster_size: int,
    method: str = "eom",
    epsilon: float = 0.0,
    *,
    compiled: bool | None = None,
) -> tuple[Array, Array]:
    """:func:`labels_from_dendrogram` on array module ``xp`` with the segment kernels run by
    ``launch`` (None: NumPy's reference code; the tests also pass the kernels compiled for the host)."""
    n = int(left.shape[0]) + 1
    if n < 2:  # one point: noise
        return xp.full(n, -1, dtype=xp.int64), xp.zeros(n, dtype=xp.float64)
    clusters = condense_columns(left, right, distances, sizes, min_cluster_size, xp, launch)
    stability, deaths = summaries(clusters, xp, launch)
    if launch is not None and epsilon == 0.0:  # the selection by heavy paths, where the tree is
        selected, anchor = select_on_device(clusters.parent, clusters.size, stability, method, xp, launch)
        return labels_and_probabilities(clusters, selected, deaths, xp, anchor)
    selected = _select_on_host(
        n, _to_host(clusters.parent), _to_host(clusters.birth), _to_host(stability), method, epsilon, compiled
    )
    return labels_and_probabilities(clusters, xp.asarray(selected), deaths, xp, launch=launch)


def _to_host(array: Array) -> Array:
    if isinstance(array, np.ndarray):
        return array
    if type(array).__module__.split(".")[0] != "cupy":  # the tests' stand-in for a device
        return array.get()
    from .._backend.staging import to_pinned

    return to_pinned(array)


def _select_on_host(
    n: int, parent: Array, birth: Array, stability: Array, method: str, epsilon: float, compiled: bool | None
) -> Array:
    """The selected clusters' mask: ``select``'s selection, compiled where the host path's is."""
    passes = passes_for(compiled, n)
    if passes is None:
        return select_clusters(parent, birth, stability, method, epsilon)
    return passes.select_clusters(
        plain(parent, np.int64), plain(birth, np.float64), plain(stability, np.float64),
        method == "leaf", float(epsilon),
    )  # fmt: skip


def _cupy_launch(name: str, grid: tuple[int], block: tuple[int], args: tuple[Any, ...]) -> None:
    from .._backend.kernels import HDBSCAN_FILE, kernel

    kernel(name, HDBSCAN_FILE)(grid, block, args)


#: dendrogram sizes of :func:`warm_up_device`: CuPy picks some reduction and scan kernels by the
#: size of their input (``_graphs.warm_up.WARM_UP_SIZES`` says the same of the graph engine)
WARM_UP_POINTS: tuple[int, ...] = tuple(2**j + 1 for j in range(2, 21, 2))


def warm_up_device(sizes: tuple[int, ...] = WARM_UP_POINTS) -> None:
    """Compile the kernels of the device path from a tree to labels (the dendrogram's, the
    condensed tree's and the selection's, and the CuPy kernels around them) on the current
    device: random trees of ``sizes`` points (:func:`warm_up_device_size`)."""
    for n in sizes:
        warm_up_device_size(n)


def warm_up_device_size(n: int) -> None:
    """The device path from a random tree of ``n`` points (some distances zero) to labels: every
    method with and without epsilon up to a few thousand points, excess of mass above."""
    import cupy

    from .._dendrogram.gpu import linkage_on_device

    rng = np.random.default_rng(n)
    u = rng.permutation(n)
    v = u[(rng.random(n - 1) * np.arange(1, n)).astype(np.int64)]  # u[i + 1] under an earlier one
    w = np.where(rng.random(n - 1) < 0.1, 0.0, rng.random(n - 1))  # zeros: lambda inf
    order = np.argsort(w, kind="stable")
    u, v, w = u[1:][order], v[order], w[order]
    z = linkage_on_device(n, cupy.asarray(u), cupy.asarray(v), cupy.asarray(w))
    runs = (("eom", 0.0), ("leaf", 0.0), ("eom", 0.5), ("leaf", 0.5)) if n < 5000 else (("eom", 0.0),)
    for method, epsilon in runs:
        labels_from_dendrogram(z[:, 0], z[:, 1], z[:, 3], z[:, 2], 3, method, epsilon)
