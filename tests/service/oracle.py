"""What a forest returned by the service must equal: the engine's answer, Kruskal's ids and SciPy's total."""

from __future__ import annotations

from typing import Any

import numpy as np

import gpu_core
from tests.utils.oracles import kruskal_edge_ids, scipy_forest_total


def check_forest(edge_ids: Any, weights: Any, total_weight: Any, num_components: int, graph: Any) -> None:
    """``graph`` has ``src``, ``dst``, ``weight``, ``num_vertices`` (a tests.utils EdgeGraph)."""
    src, dst, weight, n = graph.src, graph.dst, graph.weight, graph.num_vertices
    engine = gpu_core.minimum_spanning_forest(src, dst, weight, num_vertices=n, backend="cpu")
    ids = np.asarray(edge_ids, dtype=np.int64)
    assert ids.tolist() == engine.edge_ids.tolist(), "edge ids differ from the engine's"
    assert ids.tolist() == kruskal_edge_ids(src, dst, weight, n), "edge ids differ from Kruskal's"
    assert np.asarray(weights).tolist() == np.asarray(weight)[ids].tolist()
    assert total_weight == engine.total_weight
    assert num_components == engine.num_components
    scipy_total, scipy_components = scipy_forest_total(src, dst, weight, n)
    assert num_components == scipy_components
    if np.asarray(weight).dtype.kind == "i":
        assert total_weight == scipy_total
    else:
        assert abs(float(total_weight) - scipy_total) <= 1e-9 * max(1.0, float(np.abs(weight).sum()))
