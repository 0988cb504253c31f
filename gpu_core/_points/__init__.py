"""Point sets: the exact Euclidean minimum spanning tree and HDBSCAN*'s mutual-reachability tree.

From the bottom up: validation (``validate``), the tree type and the exact squared distance both
backends share (``tree``), SciPy's k-d tree as an exact search (``kdtree``: the CPU backend's, and
the GPU's for large ``min_samples``); the two backends side by side (``cpu``: Borůvka over the
k-d tree; ``gpu``: Borůvka over a bounding-volume hierarchy on the device); the index either one
builds once per point set (``index``); the entry points ``euclidean_mst`` and ``single_linkage``
(``emst``, which states the semantics); the nearest points of an index's own points and of query
points, which HDBSCAN*'s prediction reads (``neighbours``). Imports ``_backend``, ``_dendrogram``
and ``errors``.
"""
