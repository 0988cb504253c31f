"""The engine behind other libraries' interfaces: SciPy's ``minimum_spanning_tree(csgraph)``
(``scipy_compat``) and a NetworkX dispatch backend, ``mst_service`` (``nx_backend``, found by
NetworkX through the entry points in pyproject.toml). On top: imports only ``_graphs`` and
``_backend``."""
