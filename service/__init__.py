"""The MST web service: a FastAPI app whose worker processes keep graphs resident on GPUs.

Start it with ``python -m service`` (settings from ``MST_*`` variables, see
:class:`service.settings.Settings`); talk to it with :class:`service.client.Client`.

Its parts, top to bottom (each imports only those below it; ``lint-imports`` checks it):

* ``__main__``, ``openapi_export``: the entry points; ``client``: the Python client and its CLI,
  which talks HTTP and imports nothing else of the service;
* ``app``: the FastAPI app, which wires the API to the runtime when it starts;
* ``api``: the HTTP API: routers, API keys, uploads, encoders, the problem+json mapping of errors;
* ``runtime``: the datasets, the jobs, the workers and their processes;
* ``storage``: records in SQLite and the spool of files;
* ``settings``, ``limits``, ``metrics``, ``models``, ``timing``, then ``api_keys`` and
  ``errors``: what every part shares.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
