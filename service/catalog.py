"""The stored graphs: creating one from an upload, describing, deleting, and reloading them all at start-up.

A graph is created in this order, so a client that got 201 has a graph that
survives any crash, and a failed upload leaves nothing behind:

1. the body is complete in the spool's tmp folder (fsync running alongside);
2. the chosen worker parses and validates it and makes it resident (errors
   come back as 4xx naming field and edge index); for text formats it also
   writes the parsed arrays as an npz;
3. the npz is renamed into ``spool/graphs/<id>.npz`` (folder fsynced);
4. the record is committed to SQLite and the graph is placed on the worker.

At start-up every stored graph is placed again and reloaded **eagerly**, in
the background: ``/readyz`` turns ready as soon as a worker answers, and a
job submitted for a graph still loading simply runs after the reload (the
worker's pipe is ordered).
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Any

from .errors import GraphNotFoundError
from .jobs import Jobs
from .models import GraphOut, Residency, timestamp
from .store import GraphRecord, Store, new_id
from .supervisor import GraphSource, Supervisor
from .uploads import Upload

log = logging.getLogger("service.catalog")


class Catalog:
    def __init__(self, store: Store, supervisor: Supervisor, jobs: Jobs) -> None:
        self._store = store
        self._supervisor = supervisor
        self._jobs = jobs

    def source(self, graph_id: str) -> GraphSource | None:
        """Where a worker reloads a stored graph from (None when it was deleted)."""
        record = self._store.get_graph(graph_id)
        if record is None:
            return None
        weights = self._store.weights_path(graph_id) if record.weights_version else None
        return GraphSource(
            graph_id,
            str(self._store.graph_path(graph_id)),
            record.num_vertices,
            None if weights is None or not weights.exists() else str(weights),
        )

    def get(self, graph_id: str) -> GraphRecord:
        record = self._store.get_graph(graph_id)
        if record is None:
            raise GraphNotFoundError(f"no graph has id {graph_id!r}.")
        return record

    async def create(self, upload: Upload) -> GraphRecord:
        graph_id = new_id("g")
        handle = self._supervisor.place(estimate=upload.size)
        canonical = None if upload.format == "npz" else self._store.tmp_path(".npz")
        try:
            summary, generation = await handle.load_new(
                graph_id,
                str(upload.path),
                upload.format,
                None,
                None if canonical is None else str(canonical),
                upload.size,
            )
        except BaseException:
            upload.discard()
            if canonical is not None:
                canonical.unlink(missing_ok=True)
            with contextlib.suppress(BaseException):
                await upload.synced
            raise
        final = self._store.graph_path(graph_id)
        try:
            await upload.synced
            if canonical is None:
                Store.publish(upload.path, final)
            else:
                Store.publish(canonical, final)
                upload.discard()
            record = GraphRecord(
                id=graph_id,
                created_at=time.time(),
                num_vertices=int(summary["num_vertices"]),
                num_edges=int(summary["num_edges"]),
                weight_dtype=str(summary["weight_dtype"]),
                source_format=upload.source,
                payload_bytes=final.stat().st_size,
                device_bytes=int(summary["device_bytes"]),
            )
            self._store.add_graph(record)
        except BaseException:
            final.unlink(missing_ok=True)
            upload.discard()
            handle.forget(graph_id, loaded=True)
            raise
        handle.adopt(graph_id, record.device_bytes, generation)
        return record

    async def update_weights(self, graph_id: str, upload: Upload, partial: bool) -> GraphRecord:
        """New weights for a stored graph (all of them, or some): resident first, then durable.

        The worker applies them in queue order (see :meth:`Jobs.update_weights`); then the complete
        weights are renamed into ``spool/graphs/<id>.weights.npy`` and the record's version is
        committed, so a restart reloads the graph with them.
        """
        self.get(graph_id)
        try:
            summary = await self._jobs.update_weights(graph_id, upload.path, upload.format, partial)
        except BaseException:
            upload.discard()
            with contextlib.suppress(BaseException):
                await upload.synced
            raise
        weights_file = Path(summary["weights_file"])
        try:
            await upload.synced
            Store.publish(weights_file, self._store.weights_path(graph_id))
        finally:
            upload.discard()
            weights_file.unlink(missing_ok=True)
        record = self._store.set_graph_weights(
            graph_id, int(summary["weights_version"]), str(summary["weight_dtype"])
        )
        if record is None:  # deleted meanwhile
            raise GraphNotFoundError(f"no graph has id {graph_id!r}.")
        handle = self._supervisor.holder(graph_id)
        placed = None if handle is None else handle.graphs.get(graph_id)
        if placed is not None:
            placed.device_bytes = int(summary["device_bytes"])
        return record

    def delete(self, graph_id: str) -> None:
        self.get(graph_id)
        self._jobs.cancel_for_graph(graph_id)
        handle = self._supervisor.holder(graph_id)
        if not self._store.delete_graph(graph_id):
            raise GraphNotFoundError(f"no graph has id {graph_id!r}.")
        if handle is not None:
            handle.forget(graph_id)

    def restore(self) -> None:
        """Place every stored graph on a worker; each worker reloads its own when it is up."""
        graphs = self._store.list_graphs()
        self._supervisor.place_existing((g.id, g.device_bytes, g.weights_version) for g in graphs)
        if graphs:
            log.info("reloading %d stored graph(s)", len(graphs))

    def describe(self, record: GraphRecord) -> GraphOut:
        handle = self._supervisor.holder(record.id)
        placed = None if handle is None else handle.graphs.get(record.id)
        residency: dict[str, Any]
        if handle is None or placed is None:
            residency = {
                "status": "unplaced",
                "worker": None,
                "backend": None,
                "device": None,
                "device_bytes": 0,
            }
        else:
            residency = {
                "status": placed.status,
                "worker": handle.index,
                "backend": handle.info.get("backend", handle.config.backend),
                "device": handle.info.get("device"),
                "device_bytes": placed.device_bytes,
                "error": placed.error,
            }
        return GraphOut(
            id=record.id,
            created_at=timestamp(record.created_at),  # type: ignore[arg-type]
            num_vertices=record.num_vertices,
            num_edges=record.num_edges,
            weight_dtype=record.weight_dtype,  # type: ignore[arg-type]
            source_format=record.source_format,
            payload_bytes=record.payload_bytes,
            weights_version=record.weights_version,
            residency=Residency(**residency),
        )
