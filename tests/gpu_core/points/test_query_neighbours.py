"""Each backend's neighbour lists of query points (HDBSCAN*'s prediction) are exact.

The device searches the queries in the index's Morton order, each from a first bound taken from
the points where its code falls among the index's (``_Device.query_lists``); the host's k-d tree
ranks by its own rounding, and near-ties at the k-th are ranked again exactly. The oracle is a
brute force by the contract's formula. Lists must agree in ids and squared distances, row by row, ordered by
(distance, id): on sets with ties (duplicates, collinear points, integer grids), for queries that
are copies of index points, between them, and far outside the index's box (clamped codes).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpu_core._backend.arrays import to_host
from gpu_core._points.index import build_point_index
from gpu_core._points.neighbours import query_neighbours
from tests.utils.backends import BACKENDS
from tests.utils.points import point_sets


def on_backend(backend: str, array: np.ndarray) -> object:
    if backend == "gpu":
        import cupy

        return cupy.asarray(array)
    return array


def _oracle(points: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` nearest by brute force: squared distances by the contract's formula (float64, in
    dimension order), rows ordered by (distance, id)."""
    w2 = np.zeros((queries.shape[0], points.shape[0]))
    for j in range(points.shape[1]):
        diff = queries[:, j][:, None] - points[:, j][None, :]
        w2 = w2 + diff * diff
    ids = np.lexsort((np.broadcast_to(np.arange(points.shape[0]), w2.shape), w2), axis=1)[:, :k]
    return ids, np.take_along_axis(w2, ids, axis=1)


def _queries(points: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n, d = points.shape
    lo, hi = points.min(axis=0), points.max(axis=0)
    return np.concatenate([
        points[rng.integers(0, n, 40)].astype(np.float64),  # on index points: distance 0 ties
        rng.uniform(lo, hi, (80, d)),  # inside the box
        (points[:20] + points[-20:]) / 2.0,  # midpoints: equal distances to two points
        hi + rng.uniform(1.0, 50.0, (15, d)),  # outside the box, beyond each corner
        lo - rng.uniform(1.0, 50.0, (15, d)),
    ])  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("d", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("k", [1, 4, 8, 17, 40])
def test_query_lists_are_exact(backend: Any, d: int, k: int) -> None:
    for ps in point_sets(300, d, seed=10 * d + k):
        points = ps.points.astype(np.float64)
        queries = _queries(points, seed=k)
        index = build_point_index(points, backend=backend)
        want_ids, want_w2 = _oracle(points, queries, k + 1)
        got_ids, got_w2 = (to_host(a) for a in query_neighbours(index, on_backend(backend, queries), k))
        assert np.array_equal(got_w2, want_w2[:, :k]), ps.name
        # which of the points tied at the k-th distance a list holds is either search's choice
        # (each then in id order); below that distance the lists are the same points
        settled = want_w2[:, :k] < want_w2[:, k - 1 : k]
        assert np.array_equal(np.where(settled, got_ids, -1), np.where(settled, want_ids[:, :k], -1)), ps.name
        unique = want_w2[:, k - 1] < want_w2[:, k]
        assert unique.any(), ps.name
        assert np.array_equal(got_ids[unique], want_ids[unique, :k]), ps.name
