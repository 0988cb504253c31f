"""New weights for a resident graph, applied and made durable by the worker that holds it, in queue order.

The graph's worker is the one place its weights change: the jobs queued before an update
compute on the old weights and those after it on the new ones, whichever API processes sent
them. Before the reply the complete new weights are in place in the spool (fsynced, renamed
over the previous ones) and the graph's record holds the new version, so an acknowledged update
survives any crash. If making them durable fails, the graph is dropped from the worker (its next
job loads the durable weights back) and the update is refused.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ...errors import GraphNotFoundError
from ...storage.spool import remove_files
from .graphs import replace_weights
from .holdings import Holdings


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_and_publish(
    holdings: Holdings, graph_id: str, path: str, fmt: str, partial: bool
) -> dict[str, Any]:
    """Apply the weights in the spool file ``path`` (all of them, or some with ``partial``) to the
    resident graph and make them durable; the worker's summary with the graph's new ``record``."""
    store = holdings.store
    started = time.perf_counter()
    expected = holdings.versions.get(graph_id, 0)
    out = None if fmt == "npy" and not partial else store.tmp_path(".npy")
    summary = replace_weights(
        holdings.worker, graph_id, path, fmt, None if out is None else str(out), expected
    )
    try:
        source = Path(path) if out is None else out
        _fsync(source)  # the API process's fsync of the body has normally run already: cheap
        replaced = store.publish_replacing(source, store.weights_path(graph_id))
        published = time.perf_counter()
        record = store.set_graph_weights(
            graph_id, expected + 1, str(summary["weight_dtype"]), int(summary["device_bytes"])
        )
        if record is None:
            raise GraphNotFoundError(f"no graph has id {graph_id!r}.")
    except BaseException:
        holdings.forget(graph_id)  # its next job loads the weights that are durable
        if out is not None:
            out.unlink(missing_ok=True)
        raise
    if replaced is not None:
        remove_files(replaced)
    holdings.versions[graph_id] = expected + 1
    holdings.sized(graph_id, int(summary["device_bytes"]))
    applied_ms = sum(summary.get("timings_ms", {}).values())
    summary["timings_ms"] = {
        **summary.get("timings_ms", {}),
        "publish": (published - started) * 1e3 - applied_ms,
        "commit": (time.perf_counter() - published) * 1e3,
    }
    summary["record"] = record
    return summary
