"""Graphs on a worker: a spool file parsed, checked and made resident; new weights; a graph's tasks.

A graph comes in as a spool file (``npz``, mapped when large; text and other formats through
:func:`gpu_core.read_graph`), or one shard of the spool's npz (format ``npz[lo:hi]``, a view of
its edges, see :func:`~.protocol.shard_format`). It is checked against the service's limits
(``MST_MAX_EDGES``, ``MST_MAX_VERTICES``) and the worker's memory (:meth:`~.state.Worker.admit`)
before anything of its size is allocated, then built and prepared (a job's one-time work
happens at the load, not on its path). A task's summary is the reply; its result file is
written behind it (:class:`~.protocol.Reply`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpu_core.errors import GraphValidationError
from gpu_core.formats import EdgeArrays

from ...errors import InvalidUploadError, PayloadTooLargeError, WorkerInternalError
from ...limits import check_vertices
from ...storage import npzio
from ...timing import Steps
from .protocol import Reply, parse_shard_format
from .state import Worker

if TYPE_CHECKING:
    import gpu_core


def parse(worker: Worker, path: str, fmt: str) -> Any:
    """The edge arrays of a spool file: a plain npz is read (mapped when large), the rest is parsed."""
    import gpu_core

    if fmt == "npz":
        edges = npzio.plain_graph(path)
        if edges is not None:
            return edges
        # anything unusual: the engine's reader decides, and words its errors
    config = worker.config
    data = Path(path).read_bytes()
    return gpu_core.read_graph(
        data, fmt, max_inflated_bytes=config.max_inflated_bytes, max_ratio=config.max_compression_ratio
    )


def checked_edges(worker: Worker, path: str, fmt: str, num_vertices: int | None) -> tuple[Any, int | None]:
    """A spool file's edge arrays and vertex count, within the service's limits (not yet the
    engine's validation)."""
    shard = parse_shard_format(fmt)
    edges = parse(worker, path, "npz" if shard is not None else fmt)
    if shard is not None:  # one shard of a sharded graph: a slice of its edges (a view, no copy)
        lo, hi = shard
        edges = EdgeArrays(edges.src[lo:hi], edges.dst[lo:hi], edges.weight[lo:hi], edges.num_vertices)
    if edges.weight.shape[:1] and int(edges.weight.shape[0]) > worker.config.max_edges:
        raise PayloadTooLargeError(
            f"the graph has {int(edges.weight.shape[0])} edges, more than this service's limit of "
            f"{worker.config.max_edges} (MST_MAX_EDGES).",
            field="body",
        )
    n = num_vertices if num_vertices is not None else edges.num_vertices
    check_vertices(edges.src, edges.dst, n, worker.config.max_vertices)  # before n-sized estimates
    return edges, n


def read(
    worker: Worker,
    path: str,
    fmt: str,
    num_vertices: int | None,
    steps: Steps | None = None,
) -> tuple[Any, gpu_core.Graph]:
    """Parse a spool file and make it a resident graph; (the parsed edge arrays, the graph)."""
    import gpu_core

    steps = steps or Steps()
    edges, n = checked_edges(worker, path, fmt, num_vertices)
    worker.admit(edges, n)
    steps.lap("parse")
    shard = parse_shard_format(fmt)
    try:
        graph = gpu_core.Graph(edges.src, edges.dst, edges.weight, n, backend=worker.backend)
    except GraphValidationError as exc:
        raise exc if shard is None else in_whole_graph(exc, shard[0]) from None
    steps.lap("build")
    return edges, graph


def write_canonical(edges: Any, num_vertices: int, out: str) -> None:
    """Write a parsed upload as the spool's npz (fsynced), so reloads skip parsing."""
    import numpy as np

    arrays = {"src": edges.src, "dst": edges.dst, "weight": edges.weight}
    npzio.write_npz_file(out, {**arrays, "num_vertices": np.int64(num_vertices)}, sync=True)


def load_graph(
    worker: Worker,
    graph_id: str,
    path: str,
    fmt: str,
    num_vertices: int | None,
    canonical: str | None,
    weights: str | None = None,
) -> dict[str, Any]:
    """Make a graph resident from a spool file; with ``canonical``, also write it there as npz.

    ``weights``: an ``.npy`` of weights that replaced the uploaded ones (a reload after an update).
    """
    steps = Steps()
    edges, graph = read(worker, path, fmt, num_vertices, steps)
    if canonical is not None:
        write_canonical(edges, graph.num_vertices, canonical)
        steps.lap("canonical")
    del edges
    if weights is not None:
        replaced = read_weights(weights, "npy")[1]
        shard = parse_shard_format(fmt)
        graph.set_weights(replaced if shard is None else replaced[shard[0] : shard[1]])
        steps.lap("weights")
    graph.prepare()  # a first computation's one-time work (the CPU backend's ranking) happens here
    steps.lap("prepare")
    worker.graphs[graph_id] = graph
    return {**worker.graph_summary(graph), "timings_ms": steps.ms}


def replace_weights(
    worker: Worker, graph_id: str, path: str, fmt: str, out: str | None, expected: int
) -> dict[str, Any]:
    """New weights for a resident graph from a spool file (all of them, or ``edge_ids`` + ``weights``).

    ``expected``: the weights version the graph has now (the API's record); it becomes
    ``expected + 1``. ``out``: where to write the complete new weights as ``.npy`` (fsynced),
    when the file received is not that already (a partial update, or an npz).
    """
    graph = worker.resident_graph(graph_id)
    steps = Steps()
    edge_ids, values = read_weights(path, fmt, to_device=graph.backend == "gpu")
    if edge_ids is None:
        graph.set_weights(values)
    else:
        graph.update_weights(edge_ids, values)
    del edge_ids, values
    steps.lap("apply")
    if out is not None:
        import numpy as np

        host = graph.weights()
        with open(out, "wb") as f:
            np.save(f, host, allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
        steps.lap("save")
    graph.prepare()  # the new weights' one-time work now, not on the next job's path
    steps.lap("prepare")
    summary = worker.graph_summary(graph)
    summary["weights_version"] = expected + 1
    summary["timings_ms"] = steps.ms
    return summary


def read_weights(path: str, fmt: str, to_device: bool = False) -> tuple[Any, Any]:
    """(edge ids or None, weights) of a weights file: an ``.npy`` of every weight, or an ``.npz``
    with ``weight`` (every weight) or ``edge_ids`` and ``weights`` (some). Never unpickles.

    ``to_device``: an ``.npy`` goes straight to a device array (pinned pieces, overlapped).
    """
    import numpy as np

    from gpu_core.formats import npz_arrays

    try:
        if fmt == "npy" and to_device:
            from gpu_core._backend.staging import npy_to_device

            return None, npy_to_device(path)
        if fmt == "npy":
            return None, np.load(path, mmap_mode="r", allow_pickle=False)
        npz = npz_arrays(Path(path).read_bytes())  # not np.load: it allocates what a member's header says
        names = set(npz)
        if names == {"weight"}:
            return None, npz["weight"]
        if names == {"edge_ids", "weights"}:
            return npz["edge_ids"], npz["weights"]
    except (ValueError, OSError, EOFError) as exc:  # gpu_core's GraphValidationError is a ValueError
        raise InvalidUploadError(f"the weights file cannot be read as {fmt}: {exc}", field="body") from None
    raise InvalidUploadError(
        f"an npz of weights holds either 'weight' (every weight) or 'edge_ids' and 'weights' (some); "
        f"this one holds {sorted(names)}.",
        field="body",
    )


def in_whole_graph(exc: GraphValidationError, lo: int) -> GraphValidationError:
    """A shard's validation error as the whole graph's: its edge index counted from edge 0, not ``lo``."""
    if exc.index is None or lo == 0:
        return exc
    shifted = copy.copy(exc)
    local, index = exc.index, exc.index + lo
    shifted.index = index
    shifted.message = exc.message.replace(f"[{local}]", f"[{index}]", 1)
    shifted.args = (shifted.message,)
    return shifted


def launch_ahead(worker: Worker, requests: Iterable[Sequence[Any]]) -> None:
    """Start on the device the forests of MST requests (their arguments: graph id, result path,
    task, parameters): the first and the ``MST_LAUNCH_AHEAD`` behind it, one run per graph (a
    graph's run already started is left to finish). Each request's own turn
    then collects its run (:meth:`gpu_core.Graph.launch_forest`). A request that is not a plain
    forest of a resident graph (another task, edges excluded, a point set, a graph not loaded) is
    passed over: it computes at its turn, as it would have anyway."""
    seen = set()
    for position, (graph_id, _, *rest) in enumerate(requests):
        if position > worker.config.launch_ahead:
            break
        task, params = (rest[0] if rest else "mst"), ((rest[1] if len(rest) > 1 else None) or {})
        graph = worker.graphs.get(graph_id)
        if graph_id in seen or graph is None or task != "mst" or params.get("exclude") is not None:
            continue
        seen.add(graph_id)
        with contextlib.suppress(ValueError):  # not an objective: its own turn words the error
            graph.launch_forest(objective=params.get("objective", "min"))


def run_task(
    worker: Worker,
    graph: gpu_core.Graph,
    task: str,
    params: dict[str, Any],
    result_path: str,
    edge_ids: Any = None,
) -> Reply:
    """A graph task's summary and, behind it, its result file. ``edge_ids``: the global id of each
    of the graph's edges, when they are not its positions (the union graph of :meth:`merge`)."""
    if task == "mst":
        forest = graph.minimum_spanning_forest(
            objective=params.get("objective", "min"), exclude=params.get("exclude")
        )
        if edge_ids is not None:
            forest = dataclasses.replace(forest, edge_ids=edge_ids[forest.edge_ids])
        return Reply(forest_summary(forest), lambda: worker.write_result(forest, result_path))
    started = time.perf_counter()
    arrays: dict[str, Any]
    summary: dict[str, Any]
    if task == "dendrogram":
        linkage = graph.single_linkage()
        arrays = {"linkage": linkage}
        summary = {"num_edges": int(linkage.shape[0]), "num_components": 1}
    else:
        if task == "components":
            labels = graph.component_labels(exclude=params.get("exclude"))
        elif task == "clusters":
            labels = graph.cluster_labels(k=params.get("k"), threshold=params.get("threshold"))
        else:
            raise WorkerInternalError(f"unknown task {task!r}.")
        arrays = {"labels": labels}
        clusters = int(labels.max()) + 1 if labels.size else 0
        summary = {"num_edges": graph.num_vertices - clusters, "num_components": clusters}
    summary.update(total_weight=None, compute_ms=(time.perf_counter() - started) * 1e3)
    return Reply(summary, lambda: worker.write_arrays(arrays, result_path))


def forest_summary(forest: Any) -> dict[str, Any]:
    return {
        "num_edges": forest.num_edges,
        "total_weight": forest.total_weight,
        "num_components": forest.num_components,
        "compute_ms": forest.compute_ms,
        "weight_dtype": str(forest.weights.dtype),
    }
