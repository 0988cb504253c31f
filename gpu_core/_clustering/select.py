"""HDBSCAN*'s cluster selection on the host: excess of mass or leaves, then the epsilon merge.

The reference the device's selection by heavy paths (``eom_paths``) and the compiled one
(``compiled.select_clusters``) must equal; run over the condensed clusters, few next to the points.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]


def _eom(
    parent: Array,
    stability: Array,
    *,
    allow_single_cluster: bool = False,
    too_big: Array | None = None,
    resolved: Array | None = None,
) -> Array:
    """Excess of mass over clusters ``0..C-1`` (0 the root, children after parents).

    Bottom-up, a cluster is kept when its stability is at least its children's (summed as
    they were resolved); top-down, a kept cluster is selected unless an ancestor was kept.
    ``allow_single_cluster``: the root takes part too (the hdbscan library's and scikit-learn's
    option); ``too_big``: clusters never kept (``max_cluster_size``); ``resolved``: receives the
    resolved stabilities (a cluster not kept: its children's sum).
    """
    size = parent.shape[0]
    stab = stability.copy()
    sub = np.zeros(size)
    chose = np.zeros(size, dtype=np.bool_)
    last = 0 if allow_single_cluster else 1
    for node in range(size - 1, last - 1, -1):
        if sub[node] > stab[node] or (too_big is not None and too_big[node]):
            stab[node] = sub[node]
        else:
            chose[node] = True
        if node:
            sub[parent[node]] += stab[node]
    blocked = np.zeros(size, dtype=np.bool_)
    for node in range(1, size):
        up = parent[node]
        blocked[node] = blocked[up] or chose[up]
    if resolved is not None:
        resolved[:] = stab
    return chose & ~blocked


def select_clusters(
    parent: Array,
    birth: Array,
    stability: Array,
    method: str,
    epsilon: float,
    *,
    allow_single_cluster: bool = False,
    max_cluster_size: int | None = None,
    size: Array | None = None,
    resolved: Array | None = None,
) -> Array:
    """The selected clusters (a mask over cluster numbers): excess of mass or leaves, then the
    epsilon merge. ``parent[0] == 0``. The root 0 is selected only with ``allow_single_cluster``
    (by excess of mass, or by the epsilon merge climbing to it), as in the hdbscan library and
    scikit-learn; ``max_cluster_size`` (excess of mass only; None: no limit) needs ``size``,
    the clusters' points. ``resolved``: receives the resolved stabilities of excess of mass."""
    count = parent.shape[0]
    if method == "eom":
        too_big = None
        if max_cluster_size is not None:
            assert size is not None, "max_cluster_size needs the clusters' sizes"
            too_big = _too_big(parent, size, max_cluster_size)
        keep = _eom(
            parent, stability, allow_single_cluster=allow_single_cluster, too_big=too_big, resolved=resolved
        )
    else:  # clusters without child clusters
        keep = np.ones(count, dtype=np.bool_)
        keep[parent[1:]] = False
        keep[0] = False
        if resolved is not None:
            resolved[:] = stability
    if not allow_single_cluster:
        keep[0] = False
    if epsilon == 0.0 or count == 1 or not keep.any() or keep[0]:
        return keep
    return _epsilon_merge(keep, parent, birth, epsilon, allow_single_cluster)


def _too_big(parent: Array, size: Array, max_cluster_size: int) -> Array:
    """The clusters of more than ``max_cluster_size`` points (``size``), the root sized as the
    library sizes it: by its child clusters (0 without any)."""
    sizes = np.asarray(size, dtype=np.int64).copy()
    sizes[0] = int(sizes[1:][parent[1:] == 0].sum())
    return sizes > max_cluster_size


def _epsilon_merge(
    keep: Array, parent: Array, birth: Array, epsilon: float, allow_single_cluster: bool
) -> Array:
    """The epsilon merge of the selected clusters ``keep``: it walks the cluster tree, over
    dictionaries built only when it runs."""
    count = parent.shape[0]
    children: dict[int, list[int]] = {}
    parent_of: dict[int, int] = {}
    birth_lam: dict[int, float] = {}
    for c, (p, lam) in enumerate(zip(parent[1:].tolist(), birth[1:].tolist(), strict=True), start=1):
        children.setdefault(p, []).append(c)
        parent_of[c] = p
        birth_lam[c] = lam

    def descendants(node: int) -> list[int]:
        out, stack = [], list(children.get(node, []))
        while stack:
            x = stack.pop()
            out.append(x)
            stack.extend(children.get(x, []))
        return out

    leaves = set(np.flatnonzero(keep).tolist())
    out = np.zeros(count, dtype=np.bool_)
    found = _epsilon_search(
        leaves, children, parent_of, birth_lam, 0, epsilon, descendants, allow_single_cluster
    )
    out[list(found)] = True
    return out


def _epsilon_search(
    leaves: set[int],
    children: dict[int, list[int]],
    parent_of: dict[int, int],
    birth_lam: dict[int, float],
    root: int,
    epsilon: float,
    descendants: Any,
    allow_single_cluster: bool = False,
) -> set[int]:
    selected: list[int] = []
    processed: set[int] = set()
    for leaf in sorted(leaves):
        eps = 1.0 / birth_lam[leaf]
        if eps < epsilon:
            if leaf not in processed:
                node = leaf
                while True:  # traverse upwards while the parent is still born below epsilon
                    up = parent_of[node]
                    if up == root:  # the library's traverse_upwards: the root itself, if allowed
                        node = root if allow_single_cluster else node
                        break
                    if 1.0 / birth_lam[up] > epsilon:
                        node = up
                        break
                    node = up
                selected.append(node)
                processed.update(x for x in descendants(node) if x != node)
        else:
            selected.append(leaf)
    return set(selected)
