"""HDBSCAN*: flat clusterings of the mutual-reachability tree, with scikit-learn's semantics.

From the bottom up: the condensed tree, stabilities and labels for any array module
(``condense``); the host's selection, the reference (``select``); the passes compiled by Numba
and the choice of them (``compiled``, ``passes``); the selection on the device by heavy paths
(``eom_paths``); from a dendrogram to labels where the dendrogram lies, NumPy or CuPy
(``dendrogram_labels``: the device path and the NumPy reference); the entry point ``hdbscan`` and
the host's paths from a tree (``hdbscan``); the fitted model that keeps every stage (``model``),
prediction, soft clustering and GLOSH over it (``prediction``), the hdbscan library's tree objects
(``trees``), what the estimator does as scikit-learn's does (``sklearn_compat``: parameter
constraints, non-finite rows, centers, DBSCAN* cuts) and the scikit-learn estimator ``HDBSCAN`` with
the prediction functions on top (``estimator``). Imports ``_backend``, ``_dendrogram``, ``_points``
and ``errors``.
"""
