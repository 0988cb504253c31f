"""The trees of a fitted :class:`gpu_core.HDBSCAN`, as the hdbscan library's users reach them.

``condensed_tree_``, ``single_linkage_tree_`` and ``minimum_spanning_tree_`` with the library's
``to_numpy()`` (its array layouts), ``to_pandas()`` (pandas, an optional dependency: the
``pandas`` extra) and ``plot()`` (matplotlib, the ``plot`` extra), and
``single_linkage_tree_.get_clusters(cut_distance, min_cluster_size)``. The arrays are NumPy
copies of the model's (on the GPU backend they are copied from the device when first asked for).
Cluster numbers in the condensed tree are ``n + c`` for the engine's cluster ``c`` (the root is
``n``, as in the library; the others are numbered children after parents, but not in the
library's order).
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]

CONDENSED_DTYPE = np.dtype(
    [("parent", np.intp), ("child", np.intp), ("lambda_val", np.float64), ("child_size", np.intp)]
)


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:  # pragma: no cover - the test extra installs it
        raise ImportError("to_pandas() needs pandas: pip install 'mst-service[pandas]'") from None
    return pandas


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - the test extra installs it
        raise ImportError("plot() needs matplotlib: pip install 'mst-service[plot]'") from None
    return plt


class CondensedTree:
    """The condensed tree: one row per cluster split (``child_size > 1``) and per point leaving a
    cluster (``child_size == 1``), as the library's ``_raw_tree``: parents before children."""

    def __init__(self, rows: Array, labels: Array, selected: Array) -> None:
        self._rows = rows
        self._labels = labels
        self._selected = selected  # the selected clusters' numbers (n + c), in label order

    def to_numpy(self) -> Array:
        """The rows: a structured array with fields ``parent``, ``child``, ``lambda_val``, ``child_size``."""
        return self._rows.copy()

    def to_pandas(self) -> Any:
        return _pandas().DataFrame(self._rows)

    def _layout(self) -> dict[int, tuple[float, float, float, float]]:
        """Per cluster: (x centre, width in points, birth lambda, death lambda) for the icicles,
        leaves side by side in depth-first order, a parent centred over its children."""
        rows = self._rows
        clusters = rows[rows["child_size"] > 1]
        root = int(rows["parent"].min())
        children: dict[int, list[int]] = {}
        for p, c in zip(clusters["parent"].tolist(), clusters["child"].tolist(), strict=True):
            children.setdefault(p, []).append(c)
        size = {root: float(np.count_nonzero(rows["child_size"] == 1))}
        birth = {root: 0.0}
        for c, s, lam in zip(clusters["child"].tolist(), clusters["child_size"].tolist(),
                             clusters["lambda_val"].tolist(), strict=True):  # fmt: skip
            size[c], birth[c] = float(s), lam
        finite = rows["lambda_val"][np.isfinite(rows["lambda_val"])]
        ceiling = float(finite.max()) if finite.size else 1.0
        death: dict[int, float] = {}
        for parent, lam in zip(rows["parent"].tolist(), rows["lambda_val"].tolist(), strict=True):
            value = lam if np.isfinite(lam) else ceiling
            death[parent] = max(death.get(parent, 0.0), value)
        out: dict[int, tuple[float, float, float, float]] = {}
        cursor = 0.0

        def place(node: int) -> float:
            nonlocal cursor
            kids = children.get(node, [])
            if kids:
                centre = float(np.mean([place(k) for k in kids]))
            else:
                centre = cursor + size[node] / 2
                cursor += size[node] + 1
            out[node] = (centre, size[node], birth[node], death.get(node, birth[node]))
            return centre

        stack_limit = 10 * len(size) + 1000
        import sys

        if sys.getrecursionlimit() < stack_limit:
            sys.setrecursionlimit(stack_limit)
        place(root)
        return out

    def plot(
        self,
        *,
        select_clusters: bool = False,
        label_clusters: bool = False,
        axis: Any = None,
        cmap: str = "viridis",
        colorbar: bool = True,
        log_size: bool = False,
    ) -> Any:
        """An icicle plot: each cluster a bar from its birth down to its death lambda, as wide as
        its points (log of it with ``log_size``) and coloured by it; ``select_clusters`` rings the
        selected ones (``label_clusters``: with their labels). Returns the matplotlib axes."""
        plt = _pyplot()
        from matplotlib.patches import Ellipse, Rectangle

        ax = axis if axis is not None else plt.gca()
        layout = self._layout()
        widths = {c: (np.log(w) if log_size else w) for c, (_, w, _, _) in layout.items()}
        top = max(widths.values()) or 1.0
        colours = plt.get_cmap(cmap)
        for c, (x, _, birth, death) in layout.items():
            w = widths[c]
            ax.add_patch(Rectangle((x - w / 2, birth), w, max(death - birth, 0.0), color=colours(w / top)))
        xs = [x for x, _, _, _ in layout.values()]
        ys = [d for _, _, _, d in layout.values()]
        ax.set_xlim(min(xs) - top, max(xs) + top)
        ax.set_ylim(max(ys) * 1.05 if ys else 1.0, 0.0)  # lambda grows downwards, as the library draws it
        ax.set_xticks([])
        ax.set_ylabel("λ value")
        if select_clusters:
            for label, c in enumerate(self._selected.tolist()):
                x, _, birth, death = layout[c]
                w = widths[c]
                ring = Ellipse((x, (birth + death) / 2), w * 1.3, max(death - birth, 1e-9) * 1.3,
                               fill=False, edgecolor="red", linewidth=2)  # fmt: skip
                ax.add_patch(ring)
                if label_clusters:
                    ax.annotate(str(label), (x, birth), color="red")
        if colorbar:
            mappable = plt.cm.ScalarMappable(cmap=colours, norm=plt.Normalize(0, top))
            bar = ax.figure.colorbar(mappable, ax=ax)
            bar.set_label("log(Number of points)" if log_size else "Number of points")
        return ax


class SingleLinkageTree:
    """The single-linkage hierarchy of the mutual-reachability distances (a SciPy linkage matrix)."""

    def __init__(self, linkage: Array) -> None:
        self._linkage = linkage

    def to_numpy(self) -> Array:
        """The ``(n - 1) x 4`` linkage matrix: left, right, distance, size."""
        return self._linkage.copy()

    def to_pandas(self) -> Any:
        z = self._linkage
        n = z.shape[0] + 1
        return _pandas().DataFrame({
            "parent": np.arange(n, 2 * n - 1), "left_child": z[:, 0].astype(np.intp),
            "right_child": z[:, 1].astype(np.intp), "distance": z[:, 2], "size": z[:, 3].astype(np.intp),
        })  # fmt: skip

    def get_clusters(self, cut_distance: float, min_cluster_size: int = 5) -> Array:
        """The flat clustering at ``cut_distance`` (DBSCAN* with epsilon ``cut_distance``): the
        points joined by merges below it, components of fewer than ``min_cluster_size`` points
        noise (-1); clusters numbered by their lowest point."""
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        z = self._linkage
        n = z.shape[0] + 1
        below = np.flatnonzero(z[:, 2] < cut_distance)
        nodes = 2 * n - 1
        ends = np.concatenate((z[below, 0], z[below, 1])).astype(np.int64)
        merges = np.concatenate((below, below)) + n
        graph = coo_matrix((np.ones(ends.size), (ends, merges)), shape=(nodes, nodes))
        _, comp = connected_components(graph, directed=False)
        comp = comp[:n]
        sizes = np.bincount(comp)
        big = sizes >= min_cluster_size
        number = np.where(big, np.cumsum(big) - 1, -1)  # components are numbered by their lowest node
        labels: Array = number[comp].astype(np.int64)
        return labels

    def plot(self, *, axis: Any = None, truncate_mode: str | None = None, p: int = 0, **kwargs: Any) -> Any:
        """The dendrogram (SciPy's, drawn by matplotlib); ``truncate_mode`` and ``p`` as SciPy's.
        Returns the matplotlib axes."""
        plt = _pyplot()
        from scipy.cluster.hierarchy import dendrogram

        ax = axis if axis is not None else plt.gca()
        dendrogram(self._linkage, ax=ax, truncate_mode=truncate_mode, p=p, no_labels=True,
                   color_threshold=0, above_threshold_color="k", **kwargs)  # fmt: skip
        ax.set_ylabel("distance")
        return ax


class MinimumSpanningTree:
    """The mutual-reachability minimum spanning tree over the training points."""

    def __init__(self, edges: Array, points: Array) -> None:
        self._edges = edges
        self._points = points

    def to_numpy(self) -> Array:
        """``(n - 1) x 3``: from, to, distance (float64), in merge order."""
        return self._edges.copy()

    def to_pandas(self) -> Any:
        e = self._edges
        return _pandas().DataFrame({"from": e[:, 0].astype(np.intp), "to": e[:, 1].astype(np.intp),
                                    "distance": e[:, 2]})  # fmt: skip

    def plot(self, *, axis: Any = None, node_size: float = 40, edge_cmap: str = "viridis_r",
             edge_linewidth: float = 2, colorbar: bool = True) -> Any:  # fmt: skip
        """The points (their first two coordinates) and the tree's edges coloured by distance.
        Returns the matplotlib axes."""
        plt = _pyplot()
        from matplotlib.collections import LineCollection

        ax = axis if axis is not None else plt.gca()
        pts = self._points
        xy = pts[:, :2] if pts.shape[1] >= 2 else np.column_stack((pts[:, 0], np.zeros(pts.shape[0])))
        e = self._edges
        segments = np.stack((xy[e[:, 0].astype(np.intp)], xy[e[:, 1].astype(np.intp)]), axis=1)
        lines = LineCollection(list(segments), array=e[:, 2], cmap=edge_cmap, linewidths=edge_linewidth)
        ax.add_collection(lines)
        ax.scatter(xy[:, 0], xy[:, 1], s=node_size, c="k", zorder=3)
        ax.autoscale_view()
        if colorbar:
            ax.figure.colorbar(lines, ax=ax).set_label("Mutual reachability distance")
        return ax


def condensed_rows(
    n: int, parent: Array, birth: Array, size: Array, point_cluster: Array, point_lam: Array
) -> Array:
    """The library's raw condensed tree from the engine's clusters: cluster rows, then point rows,
    each by parent (a cluster's rows after its parent's)."""
    count = parent.shape[0]
    rows = np.empty(count - 1 + n, dtype=CONDENSED_DTYPE)
    cl = np.arange(1, count)
    rows["parent"][: count - 1] = n + parent[1:]
    rows["child"][: count - 1] = n + cl
    rows["lambda_val"][: count - 1] = birth[1:]
    rows["child_size"][: count - 1] = size[1:]
    rows["parent"][count - 1 :] = n + point_cluster
    rows["child"][count - 1 :] = np.arange(n)
    rows["lambda_val"][count - 1 :] = point_lam
    rows["child_size"][count - 1 :] = 1
    order = np.argsort(rows["parent"], kind="stable")
    return rows[order]
