"""Membership vectors' distances to each cluster's nearest exemplar: the searches in the exemplars'
indexes (large models) give exactly what computing every distance gives (small ones), on both
backends, and the indexes are built once per model."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pytest

import gpu_core
from gpu_core._clustering import prediction
from tests.utils.backends import BACKENDS


def _host(array: Any) -> np.ndarray:
    return array.get() if hasattr(array, "get") else np.asarray(array)


def _model(backend: Any) -> gpu_core.HDBSCAN:
    rng = np.random.default_rng(4)
    centres = rng.uniform(-10, 10, size=(6, 2))
    points = np.concatenate([c + rng.normal(0, 0.8, size=(700, 2)) for c in centres])
    points = np.concatenate([points, rng.uniform(-12, 12, size=(300, 2)), points[:40]])  # duplicates
    return gpu_core.HDBSCAN(min_cluster_size=40, min_samples=4, backend=backend).fit(points)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_searches_give_every_distance_s_answer(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(backend)
    data = model.prediction_data_
    sizes = np.bincount(_host(data.exemplar_label))
    assert data.num_labels >= 4 and sizes.max() > 2 * prediction.DENSE_EXEMPLARS, sizes  # the premise
    exemplars = _host(data.exemplars)
    rng = np.random.default_rng(9)
    queries = np.concatenate([
        rng.uniform(-14, 14, size=(500, 2)),
        exemplars[::7],  # distance 0
        (exemplars[:50] + exemplars[1:51]) / 2,  # midpoints: equal distances to two exemplars
    ])  # fmt: skip
    if backend == "gpu":
        import cupy

        queries = cupy.asarray(queries)

    def both_ways() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return (
            _host(prediction._exemplar_distances(data, queries)),
            _host(gpu_core.membership_vector(model, queries)),
            _host(gpu_core.all_points_membership_vectors(model)),
            _host(prediction._exemplar_distances(data, queries[:3])),
        )

    monkeypatch.setattr(prediction, "DENSE_DEVICE", 1 << 62)
    monkeypatch.setattr(prediction, "DENSE_HOST", 1 << 62)
    dense = both_ways()
    monkeypatch.setattr(prediction, "DENSE_DEVICE", 0)
    monkeypatch.setattr(prediction, "DENSE_HOST", 0)
    for few in (prediction.DENSE_EXEMPLARS, 2):  # clusters of few exemplars computed, and searched too
        monkeypatch.setattr(prediction, "DENSE_EXEMPLARS", few)
        prediction._INDEXES.clear()
        searched = both_ways()
        for got, want in zip(searched, dense, strict=True):
            assert got.shape == want.shape
            assert np.array_equal(got, want)
    assert (dense[0] == 0.0).any(), "the queries on exemplars: distance 0"


@pytest.mark.parametrize("backend", BACKENDS)
def test_exemplar_indexes_are_built_once_per_model(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prediction, "DENSE_DEVICE", 0)
    monkeypatch.setattr(prediction, "DENSE_HOST", 0)
    model = _model(backend)
    built: list[int] = []
    original = gpu_core.build_point_index

    def counting(points: Any, **kwargs: Any) -> Any:
        built.append(int(points.shape[0]))
        return original(points, **kwargs)

    monkeypatch.setattr(prediction, "build_point_index", counting)
    first = _host(gpu_core.all_points_membership_vectors(model))
    count = len(built)
    assert count > 0
    again = _host(gpu_core.all_points_membership_vectors(model))
    assert len(built) == count and np.array_equal(first, again)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_exemplar_indexes_bytes_are_counted_and_bounded_before(backend: Any) -> None:
    """Before a search: nothing held, a bound of the build; after: what the indexes hold, within
    that bound, and nothing more to build."""
    model = _model(backend)
    data = model.prediction_data_
    name: Literal["cpu", "gpu"] = "cpu" if backend == "cpu" else "gpu"
    # the fewest queries that search (the device's threshold is 64x the host's: 2000 did not there)
    threshold = prediction.DENSE_HOST if name == "cpu" else prediction.DENSE_DEVICE
    count = threshold // (int(data.pad.size) * data.dimensions) + 1
    assert prediction.searches_exemplars(data, count, on_host=name == "cpu")  # the premise
    assert not prediction.searches_exemplars(data, 1, on_host=name == "cpu")
    assert prediction.exemplar_index_bytes(data) == 0
    bound = prediction.exemplar_index_build_bytes(data, name)
    assert bound > 0
    queries = np.random.default_rng(2).uniform(-14, 14, size=(count, 2))
    if backend == "gpu":
        import cupy

        queries = cupy.asarray(queries)
    gpu_core.membership_vector(model, queries)
    indexes = [index for _, _, index in prediction._INDEXES[data] if index is not None]
    assert indexes, "a search built the large clusters' indexes"
    held = prediction.exemplar_index_bytes(data)
    assert held == sum(index.nbytes for index in indexes) > 0
    assert held <= bound
    assert prediction.exemplar_index_build_bytes(data, name) == 0
