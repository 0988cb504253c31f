"""``minimum_spanning_tree(csgraph)``: :func:`scipy.sparse.csgraph.minimum_spanning_tree` on this engine.

``from gpu_core import minimum_spanning_tree`` is the one-line change for SciPy users: the same
signature, the same input conversion and the same tree. What SciPy does, and so this does:

* The input is read as SciPy reads it (``validate_graph`` of ``scipy.sparse.csgraph``): a sparse
  array or matrix of any format becomes CSR with float64 data (COO duplicates summed); a dense
  array becomes a graph whose edges are its entries that are not close to zero (``|x| > 1e-8``),
  not infinite and not NaN; in a masked array the unmasked entries are the edges.
* Every stored entry ``(i, j)`` is an edge, explicit zeros included (zero-weight edges, as the
  ``scipy.sparse.csgraph`` documentation says). Both ``(i, j)`` and ``(j, i)`` may be stored,
  with different weights: each is an edge of the undirected graph, and the lighter one can be
  chosen, in its own orientation. Self-loops are never chosen.
* Kruskal on a stable sort of the weights in CSR storage order, which is this engine's
  ``(weight, edge_id)`` order with the CSR position as the edge id: the same tree as SciPy's,
  ties included. Infinite and NaN entries of a sparse input sort last, as in SciPy.
* The result is an N x N CSR of float64 holding the chosen entries where the input had them;
  chosen zero-weight edges cannot be stored in it and are dropped (``eliminate_zeros``), as
  SciPy drops them. It is a ``csr_matrix`` for a sparse matrix input, else a ``csr_array``.
* ``overwrite=True``: the input's arrays are used in place (no copy) and its data array is
  overwritten (the entries not in the tree are zeroed), as SciPy allows itself to.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._backend.resolve import Backend
from .._graphs.graph import minimum_spanning_forest


def _scipy() -> Any:
    try:
        import scipy.sparse
        import scipy.sparse.csgraph
    except ImportError:
        raise ImportError(
            "gpu_core.minimum_spanning_tree needs SciPy (pip install 'mst-service[scipy]')."
        ) from None
    return scipy


def _as_csr(scipy: Any, csgraph: Any, overwrite: bool) -> Any:
    """The graph as a float64 CSR, converted the way SciPy's ``validate_graph`` converts it."""
    sparse, csgraph_mod = scipy.sparse, scipy.sparse.csgraph
    if sparse.issparse(csgraph):
        graph = csgraph.tocsr(copy=not overwrite).astype(np.float64, copy=False)
    elif np.ma.isMaskedArray(csgraph):
        graph = csgraph_mod.csgraph_from_masked(csgraph)
    else:
        dense = np.asarray(csgraph)
        if dense.ndim != 2 or dense.shape[0] != dense.shape[1]:
            raise ValueError(f"the graph must be a square (N, N) matrix; got shape {dense.shape}.")
        graph = csgraph_mod.csgraph_from_dense(dense, null_value=0, infinity_null=True, nan_null=True)
    if graph.ndim != 2 or graph.shape[0] != graph.shape[1]:
        raise ValueError(f"the graph must be a square (N, N) matrix; got shape {graph.shape}.")
    return graph


def minimum_spanning_tree(csgraph: Any, overwrite: bool = False, *, backend: Backend = "auto") -> Any:
    """The minimum spanning forest of an undirected graph given as an N x N matrix, as SciPy computes it.

    A drop-in for :func:`scipy.sparse.csgraph.minimum_spanning_tree` (see the module's notes);
    ``backend`` picks the engine's backend (``"auto"``: the GPU where there is one).
    """
    scipy = _scipy()
    graph = _as_csr(scipy, csgraph, overwrite)
    n = int(graph.shape[0])
    indptr = np.asarray(graph.indptr)
    indices = np.asarray(graph.indices)
    data = np.asarray(graph.data)
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    dst = indices.astype(np.int64, copy=False)
    weight = data
    if not np.all(np.isfinite(data)):
        # SciPy sorts inf and NaN last; the engine takes finite weights: the stable ranks order alike
        order = np.argsort(data, kind="stable")
        weight = np.empty(data.shape[0], dtype=np.int64)
        weight[order] = np.arange(data.shape[0], dtype=np.int64)
    forest = minimum_spanning_forest(src, dst, weight, num_vertices=n, backend=backend)
    in_tree = np.zeros(data.shape[0], dtype=bool)
    in_tree[forest.edge_ids] = True
    data[~in_tree] = 0  # a copy of the input's data, or with overwrite=True the input's own
    make = scipy.sparse.csr_matrix if scipy.sparse.isspmatrix(csgraph) else scipy.sparse.csr_array
    tree = make((data, indices, indptr), shape=(n, n))
    tree.eliminate_zeros()
    return tree
