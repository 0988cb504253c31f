"""HDBSCAN*'s cluster selection on the host: excess of mass or leaves, then the epsilon merge.

The reference the device's selection by heavy paths (``eom_paths``) and the compiled one
(``compiled.select_clusters``) must equal; run over the condensed clusters, few next to the points.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]


def _eom(parent: Array, stability: Array) -> Array:
    """Excess of mass over clusters ``0..C-1`` (0 the root, children after parents).

    Bottom-up, a cluster is kept when its stability is at least its children's (summed as
    they were resolved); top-down, a kept cluster is selected unless an ancestor was kept.
    """
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


def select_clusters(parent: Array, birth: Array, stability: Array, method: str, epsilon: float) -> Array:
    """The selected clusters (a mask over cluster numbers, never the root 0): excess of mass
    or leaves, then the epsilon merge. ``parent[0] == 0``."""
    size = parent.shape[0]
    if method == "eom":
        keep = _eom(parent, stability)
    else:  # clusters without child clusters
        keep = np.ones(size, dtype=np.bool_)
        keep[parent[1:]] = False
    keep[0] = False
    if epsilon == 0.0 or size == 1 or not keep.any():
        return keep
    # the epsilon merge walks the cluster tree: dictionaries, built only when needed
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
    out = np.zeros(size, dtype=np.bool_)
    out[list(_epsilon_search(leaves, children, parent_of, birth_lam, 0, epsilon, descendants))] = True
    return out


def _epsilon_search(
    leaves: set[int],
    children: dict[int, list[int]],
    parent_of: dict[int, int],
    birth_lam: dict[int, float],
    root: int,
    epsilon: float,
    descendants: Any,
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
                    if up == root:
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
