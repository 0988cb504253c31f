"""``warm_up``: the graphs' and point sets' kernels and the clustering's compiled host passes, so no
request compiles.

Composed here, above both parts, so that neither imports the other.
"""

from __future__ import annotations

from ._backend.resolve import Backend
from ._clustering.hdbscan import warm_up_compiled
from ._graphs.warm_up import warm_up_graphs
from ._points.warm_up import warm_up_points


def warm_up(backend: Backend = "auto", *, host_passes: bool = True, points: bool = True) -> str:
    """Compile every kernel a request can need, so no request pays for compilation.

    Builds, prepares and computes a small graph for every vertex-id dtype an upload can carry and
    every weight dtype, from host arrays as an upload hands them over (validation on the device
    included), and takes the validation's error paths (a vertex id out of range, a non-finite
    weight) and the empty and loop-only graphs once. On the GPU, CuPy compiles an elementwise or
    reduction kernel for each dtype it first meets: without this, the first upload of int32 ids
    took 3.6 s. Then every query of a resident graph runs once per weight dtype: minimum and
    maximum forests, a what-if, cluster labels, and weight updates
    (:func:`gpu_core._graphs.warm_up.warm_up_graphs`). Where Numba is installed and
    ``host_passes``, first compiles (or loads from its cache: about 1 s) the host passes of
    ``hdbscan`` and ``single_linkage`` (:func:`gpu_core._clustering.hdbscan.warm_up_compiled`; the service's
    workers do that on a thread while they start). With ``points``, every kernel a point-set
    request can meet on the GPU, the hierarchy's and brute force's
    (:func:`gpu_core._points.warm_up.warm_up_points`; the service's workers do that while they
    start too). Returns the backend that was warmed up.
    """
    if host_passes:
        warm_up_compiled()
    chosen = warm_up_graphs(backend)
    if points:
        warm_up_points(chosen)
    return chosen
