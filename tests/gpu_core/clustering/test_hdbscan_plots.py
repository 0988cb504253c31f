"""The tree objects of ``gpu_core.HDBSCAN`` draw with matplotlib (Agg) and convert to pandas."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.collections import LineCollection
from matplotlib.patches import Ellipse, Rectangle

import gpu_core


@pytest.fixture(scope="module")
def model() -> gpu_core.HDBSCAN:
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(c, 0.4, size=(60, 2)) for c in ((0, 0), (4, 4), (0, 5))])
    return gpu_core.HDBSCAN(min_cluster_size=8, backend="cpu").fit(x)


def test_condensed_tree_icicles_and_selected_rings(model: gpu_core.HDBSCAN) -> None:
    fig, ax = plt.subplots()
    out = model.condensed_tree_.plot(select_clusters=True, label_clusters=True, axis=ax)
    clusters = model.condensed_tree_.to_numpy()
    count = int((clusters["child_size"] > 1).sum()) + 1  # the root's bar too
    assert out is ax
    assert sum(isinstance(p, Rectangle) for p in ax.patches) == count
    assert sum(isinstance(p, Ellipse) for p in ax.patches) == int(model.labels_.max()) + 1
    assert [t.get_text() for t in ax.texts] == [str(j) for j in range(int(model.labels_.max()) + 1)]
    assert ax.get_ylabel() == "λ value"
    fig.canvas.draw()
    plt.close(fig)


def test_single_linkage_dendrogram_draws_every_merge(model: gpu_core.HDBSCAN) -> None:
    fig, ax = plt.subplots()
    model.single_linkage_tree_.plot(axis=ax)
    segments = sum(len(c.get_segments()) for c in ax.collections if isinstance(c, LineCollection))
    assert segments == len(model.labels_) - 1
    top = model.single_linkage_tree_.to_numpy()[:, 2].max()
    assert ax.get_ylim()[1] >= top
    fig.canvas.draw()
    plt.close(fig)


def test_minimum_spanning_tree_draws_its_edges(model: gpu_core.HDBSCAN) -> None:
    fig, ax = plt.subplots()
    model.minimum_spanning_tree_.plot(axis=ax)
    (lines,) = [c for c in ax.collections if isinstance(c, LineCollection)]
    edges = model.minimum_spanning_tree_.to_numpy()
    assert len(lines.get_segments()) == len(edges) == len(model.labels_) - 1
    assert np.array_equal(np.asarray(lines.get_array()), edges[:, 2])
    fig.canvas.draw()
    plt.close(fig)


def test_to_pandas(model: gpu_core.HDBSCAN) -> None:
    condensed = model.condensed_tree_.to_pandas()
    assert list(condensed.columns) == ["parent", "child", "lambda_val", "child_size"]
    assert len(condensed) == len(model.condensed_tree_.to_numpy())
    linkage = model.single_linkage_tree_.to_pandas()
    assert list(linkage.columns) == ["parent", "left_child", "right_child", "distance", "size"]
    assert linkage["size"].iloc[-1] == len(model.labels_)
    mst = model.minimum_spanning_tree_.to_pandas()
    assert list(mst.columns) == ["from", "to", "distance"]
    assert np.isclose(mst["distance"].sum(), model.minimum_spanning_tree_.to_numpy()[:, 2].sum())
