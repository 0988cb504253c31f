"""Graphs: minimum and maximum spanning forests of edge lists, exact under ``(weight, edge_id)``.

From the bottom up: the result type (``forest``), validation of edge lists (``validate``), the
edge orders (``order``), the GPU's slot layout and memory estimate (``layout``, ``estimate``),
labels from a forest (``clusters``); the two backends side by side (``cpu``: Borůvka in NumPy;
``gpu``: ECL-MST with CuPy on a graph resident on the device, whose CSR ``gpu_csr`` builds and
re-ranks); the public ``Graph`` type and entry points over them (``graph``), sharded forests
(``shards``) and the graph warm-up (``warm_up``). Imports only ``_backend``, ``_dendrogram`` and
``errors`` from the rest of the engine.
"""
