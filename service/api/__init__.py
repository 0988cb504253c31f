"""The HTTP API: one router per resource, and what they share.

Top to bottom: the routers (``graphs``, ``points``, ``jobs``, ``mst``, ``health``); job
submission and dataset descriptions shared by the graph and point-set routers
(``submissions``, ``descriptions``); the routers' dependencies (``deps``), OpenAPI pieces
(``docs``), request bodies received into the spool (``uploads``), responses (``encoders``) and
the requests' metrics middleware (``request_metrics``); the API-key middleware (``auth``); the
one mapping of errors to problem+json responses (``problems``); the media types.
"""
