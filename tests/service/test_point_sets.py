"""A resident point set in the worker (in process, CPU and GPU): one spatial index, built on first
need, reused by every tree of any min_samples, counted in the point set's bytes; the answers are
host arrays equal to the CPU backend's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gpu_core
from service.runtime.worker.points import ResidentPoints


@pytest.mark.parametrize("backend", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_one_index_per_point_set(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    builds: list[gpu_core.PointIndex] = []
    build = gpu_core.build_point_index

    def counting(points: Any, **kwargs: Any) -> gpu_core.PointIndex:
        builds.append(build(points, **kwargs))
        return builds[-1]

    monkeypatch.setattr(gpu_core, "build_point_index", counting)
    rng = np.random.default_rng(3)
    points = np.concatenate([c + rng.normal(0, 0.3, (100, 2)) for c in ((0, 0), (5, 5), (0, 6))])
    resident = ResidentPoints(points, backend)
    assert resident.nbytes == points.nbytes and not builds  # nothing built at upload
    flags = []
    answers: dict[str, dict[str, Any]] = {}
    for task, params in (
        ("hdbscan", {"min_cluster_size": 10, "min_samples": 5}),
        ("hdbscan", {"min_cluster_size": 10, "min_samples": 16}),
        ("emst", {}),
        ("single_linkage", {}),
        ("hdbscan", {"min_cluster_size": 20, "min_samples": 16}),
    ):
        summary, arrays = resident.run(task, params)
        answers[task] = arrays
        flags.append((summary["reused_tree"], summary["reused_index"]))
    assert flags == [(False, False), (False, True), (False, True), (True, True), (True, True)]
    assert len(builds) == 1 and builds[0].backend == backend
    assert all(isinstance(a, np.ndarray) for got in answers.values() for a in got.values())
    tree = gpu_core.euclidean_mst(points, backend="cpu")
    assert all(np.array_equal(answers["emst"][k], getattr(tree, k)) for k in ("src", "dst", "weights"))
    linkage = gpu_core.single_linkage(points, backend="cpu")
    assert np.array_equal(answers["single_linkage"]["linkage"], linkage)
    index, reused = resident.index()
    assert index is builds[0] and reused
    trees = sum(t.src.nbytes + t.dst.nbytes + t.weights.nbytes for t in resident._trees.values())
    linkages = sum(z.nbytes for z in resident._linkages.values())
    assert index.nbytes > 0 and resident.nbytes == points.nbytes + trees + linkages + index.nbytes
    expected = gpu_core.hdbscan(points, min_cluster_size=20, min_samples=16, backend="cpu")
    assert np.array_equal(arrays["labels"], expected.labels)
    assert np.array_equal(arrays["probabilities"], expected.probabilities)
