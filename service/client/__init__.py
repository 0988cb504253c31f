"""A small synchronous Python client of the service (httpx), and a CLI on top of it.

>>> with Client("http://127.0.0.1:8000", api_key=key) as mst: # doctest: +SKIP
...     graph = mst.upload_arrays(src, dst, weight)
...     job = mst.submit(graph["id"], wait=30)
...     forest = mst.result(job["id"])                          # arrays, via the binary npz
...     forest.total_weight, forest.edge_ids[:5]

``api_key``: the service's API key, sent as ``Authorization: Bearer <key>`` (not needed when the
service runs without keys). The CLI takes it from ``MST_API_KEY`` (or ``--api-key``, which other
users of the machine can see in the process list).

SciPy sparse matrices and NetworkX graphs go up with :meth:`Client.upload_graph` (or
:meth:`Client.one_shot_graph`), and their forests come back as the same kind of object with
``result(job_id, output="networkx" | "scipy")`` (see :mod:`service.client.interop`).

CLI: ``python -m service.client [--url URL] [--api-key KEY] [--progress | --no-progress] upload FILE
[--format F] | list | mst GRAPH_ID [--wait S] | job JOB_ID | result JOB_ID [--out FILE.npz]
| delete GRAPH_ID | oneshot FILE``; progress bars on stderr for transfers of 4 MB or more, by
default when stderr is a terminal.

Its parts, top to bottom: ``cli`` (the command line, imported only when it runs) on ``client``
(the library: :class:`Client`, one method per route), on ``direct`` (the kept connection a job's
and a result's binary answers come over), ``transfer`` (large bodies sent and received fast),
``interop`` (SciPy and NetworkX graphs in and out) and ``progress`` (the bars); ``estimator``
(:class:`RemoteHDBSCAN`, ``gpu_core.HDBSCAN``'s constructor plus a service's URL and key) on
``client``.
This module is the library's one public surface.
"""

from __future__ import annotations

from .client import OUTPUTS, Client, ClientError, Forest, npz_bytes
from .estimator import RemoteHDBSCAN
from .transfer import OCTET, binary_headers, body_pieces, read_response, receive_buffer

__all__ = [
    "OCTET",
    "OUTPUTS",
    "Client",
    "ClientError",
    "Forest",
    "RemoteHDBSCAN",
    "binary_headers",
    "body_pieces",
    "main",
    "npz_bytes",
    "read_response",
    "receive_buffer",
]


def main(argv: list[str] | None = None) -> int:
    """The CLI (``python -m service.client``, :mod:`service.client.cli`): imported only when run."""
    from .cli import main as cli_main

    return cli_main(argv)
