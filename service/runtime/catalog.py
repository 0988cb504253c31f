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
from collections import Counter
from pathlib import Path
from typing import Any

from ..api.uploads import Upload
from ..errors import DeviceQuotaExceededError, GraphNotFoundError, PointSetNotFoundError, QuotaExceededError
from ..models import GraphOut, PointSetOut, Residency, timestamp
from ..storage.store import GraphRecord, Store, new_id
from .jobs import Jobs
from .supervisor import GraphSource, Supervisor

log = logging.getLogger("service.runtime.catalog")


class Catalog:
    def __init__(self, store: Store, supervisor: Supervisor, jobs: Jobs) -> None:
        self._store = store
        self._supervisor = supervisor
        self._jobs = jobs
        #: uploads in progress per owner (they count against MST_QUOTA_GRAPHS already)
        self._creating: Counter[str] = Counter()

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
            fmt="points.npz" if record.kind == "points" else "npz",
        )

    def get(self, graph_id: str, owner: str, kind: str = "graph") -> GraphRecord:
        """The dataset's record; 404 when there is none, it is another owner's or of another kind
        (the same answer)."""
        record = self._store.get_graph(graph_id, owner)
        if record is None or record.kind != kind:
            if kind == "points":
                raise PointSetNotFoundError(f"no point set has id {graph_id!r}.")
            raise GraphNotFoundError(f"no graph has id {graph_id!r}.")
        return record

    def owned(self, owner: str, kind: str = "graph") -> list[GraphRecord]:
        """The graphs (or point sets) of ``owner``, oldest first."""
        return self._store.list_graphs(owner, kind)

    def admit(self, owner: str) -> None:
        """Refuse an upload of ``owner`` before its body is read when a quota is already used up."""
        self.check_quotas(owner, pending=self._creating[owner])

    def check_quotas(self, owner: str, device_bytes: int = 0, *, pending: int = 0) -> None:
        """Refuse a new graph of ``owner`` over MST_QUOTA_GRAPHS (429) or MST_QUOTA_DEVICE_BYTES (413).

        ``device_bytes``: what the new graph takes on the device (0 before it is loaded: then only
        a key already at its quota is refused); ``pending``: its other uploads in progress.
        """
        settings = self._supervisor.settings
        max_graphs, max_bytes = settings.quota_graphs, settings.quota_device_bytes
        if not max_graphs and not max_bytes:
            return
        count, used = self._store.graph_usage(owner)
        count += pending
        if max_graphs and count >= max_graphs:
            raise QuotaExceededError(
                f"this API key stores or is uploading {count} graph(s), its quota MST_QUOTA_GRAPHS "
                f"is {max_graphs}; delete a graph before uploading another.",
                quota="MST_QUOTA_GRAPHS",
                limit=max_graphs,
                used=count,
                retry_after=60,
            )
        if max_bytes and (used >= max_bytes or used + device_bytes > max_bytes):
            raise DeviceQuotaExceededError(
                f"this API key's graphs hold {used} device bytes and this one would add "
                f"{device_bytes or 'more'}; its quota MST_QUOTA_DEVICE_BYTES is {max_bytes}. "
                "Delete graphs or upload a smaller one.",
                quota="MST_QUOTA_DEVICE_BYTES",
                limit=max_bytes,
                used=used,
            )

    async def create(self, upload: Upload, owner: str, kind: str = "graph") -> GraphRecord:
        """Store the upload as a graph (or point set) of ``owner`` (:meth:`admit` first)."""
        self._creating[owner] += 1
        try:
            return await self._create(upload, owner, kind)
        finally:
            self._creating[owner] -= 1
            if not self._creating[owner]:
                del self._creating[owner]

    async def _create(self, upload: Upload, owner: str, kind: str) -> GraphRecord:
        graph_id = new_id("p" if kind == "points" else "g")
        handle = self._supervisor.place(estimate=upload.size)
        canonical = None if upload.format in ("npz", "points.npz") else self._store.tmp_path(".npz")
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
            # with the real size, against the stored graphs only: nothing awaits from here to
            # add_graph, so concurrent uploads of the owner are counted one after the other
            self.check_quotas(owner, int(summary["device_bytes"]))
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
                owner=owner,
                kind=kind,
            )
            self._store.add_graph(record)
        except BaseException:
            final.unlink(missing_ok=True)
            upload.discard()
            handle.forget(graph_id, loaded=True)
            raise
        self._jobs.graph_owners[graph_id] = owner
        handle.adopt(graph_id, record.device_bytes, generation)
        return record

    async def update_weights(self, graph_id: str, owner: str, upload: Upload, partial: bool) -> GraphRecord:
        """New weights for a stored graph (all of them, or some): resident first, then durable.

        The worker applies them in queue order (see :meth:`Jobs.update_weights`); then the complete
        weights are renamed into ``spool/graphs/<id>.weights.npy`` and the record's version is
        committed, so a restart reloads the graph with them.
        """
        try:
            self.get(graph_id, owner)
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
            graph_id,
            int(summary["weights_version"]),
            str(summary["weight_dtype"]),
            int(summary["device_bytes"]),  # a new dtype changes it (the device-bytes quota counts it)
        )
        if record is None:  # deleted meanwhile
            raise GraphNotFoundError(f"no graph has id {graph_id!r}.")
        handle = self._supervisor.holder(graph_id)
        placed = None if handle is None else handle.graphs.get(graph_id)
        if placed is not None:
            placed.device_bytes = int(summary["device_bytes"])
        return record

    def delete(self, graph_id: str, owner: str, kind: str = "graph") -> None:
        self.get(graph_id, owner, kind)
        self._jobs.cancel_for_graph(graph_id)
        handle = self._supervisor.holder(graph_id)
        if not self._store.delete_graph(graph_id):
            raise GraphNotFoundError(f"no graph has id {graph_id!r}.")
        self._jobs.graph_owners.pop(graph_id, None)
        if handle is not None:
            handle.forget(graph_id)

    def restore(self) -> None:
        """Place every stored graph on a worker; each worker reloads its own when it is up."""
        graphs = self._store.list_graphs()
        self._jobs.graph_owners.update((g.id, g.owner) for g in graphs)
        self._supervisor.place_existing((g.id, g.device_bytes, g.weights_version) for g in graphs)
        if graphs:
            log.info("reloading %d stored graph(s)", len(graphs))

    def describe_points(self, record: GraphRecord) -> PointSetOut:
        return PointSetOut(
            id=record.id,
            created_at=timestamp(record.created_at),  # type: ignore[arg-type]
            num_points=record.num_vertices,
            dims=record.num_edges,
            dtype=record.weight_dtype,  # type: ignore[arg-type]
            source_format=record.source_format,
            payload_bytes=record.payload_bytes,
            residency=self._residency(record),
        )

    def describe(self, record: GraphRecord) -> GraphOut:
        return GraphOut(
            id=record.id,
            created_at=timestamp(record.created_at),  # type: ignore[arg-type]
            num_vertices=record.num_vertices,
            num_edges=record.num_edges,
            weight_dtype=record.weight_dtype,  # type: ignore[arg-type]
            source_format=record.source_format,
            payload_bytes=record.payload_bytes,
            weights_version=record.weights_version,
            residency=self._residency(record),
        )

    def _residency(self, record: GraphRecord) -> Residency:
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
                "device_bytes": 0 if placed.status == "evicted" else placed.device_bytes,
                "error": placed.error,
            }
        return Residency(**residency)
