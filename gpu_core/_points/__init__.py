"""Point sets: exact minimum spanning trees under a metric (Euclidean by default) and HDBSCAN*'s
mutual-reachability tree.

From the bottom up: validation (``validate``), the tree type and the exact squared distance both
backends share (``tree``), SciPy's k-d tree as an exact search (``kdtree``: the CPU backend's, and
the GPU's for large ``min_samples``); the two backends side by side (``cpu``: Borůvka over the
k-d tree; ``gpu``: Borůvka over a bounding-volume hierarchy on the device); the index either one
builds once per point set (``index``); the entry points ``euclidean_mst`` and ``single_linkage``
(``emst``, which states the semantics); the nearest points of an index's own points and of query
points, which HDBSCAN*'s prediction reads (``neighbours``). Points of many coordinates are searched
by brute force instead (``filter``: the fast distances' error bound; ``brute``: Borůvka over exact
neighbour lists, both backends; ``brute_cpu``, ``brute_gpu``: their tiled searches with an exact
recheck); ``estimate`` bounds an index's and a tree's memory; ``warm_up`` compiles what a point-set
request meets. The metrics (``metrics``: keys, search coordinates, maps to distances; ``detmath``
and ``metric_kernels``: the arithmetic both backends share; ``brute_exact``: Minkowski keys by brute
force; ``precomputed``, ``precomputed_gpu``: distance matrices). Imports ``_graphs`` (a sparse
distance matrix's forest), ``_backend``, ``_dendrogram`` and ``errors``.
"""
