"""Single-linkage dendrograms (SciPy linkage matrices) of spanning trees in merge order.

``cpu``: the host's union-find, the definition (``linkage_from_sorted_edges``); ``gpu``: the same
matrix on the device, where the tree is, answering bad input through ``cpu``. Below the graphs,
the point sets and the clustering: ``Graph.single_linkage``, ``single_linkage`` of points and
HDBSCAN* all build dendrograms.
"""
