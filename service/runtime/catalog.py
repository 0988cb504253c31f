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
job submitted for a graph still loading waits for its reload, which then
comes before those no job waits for (see :mod:`service.runtime.pool.datasets`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import gpu_core

from ..errors import (
    DeviceQuotaExceededError,
    GraphExceedsWorkerError,
    GraphNotFoundError,
    InvalidParamsError,
    PointSetNotFoundError,
    QuotaExceededError,
)
from ..storage.records import GraphRecord, new_id
from ..storage.spool import Upload, remove_files, remove_later
from ..storage.store import Store
from ..timing import Steps
from .jobs import Jobs, sharded_weights_refused
from .pool.handle import WorkerHandle
from .pool.residency import GraphSource
from .supervisor import Supervisor, parse_shard_key, shard_key
from .worker.protocol import DESCRIBE, shard_format

log = logging.getLogger("service.runtime.catalog")


class Catalog:
    def __init__(self, store: Store, supervisor: Supervisor, jobs: Jobs) -> None:
        self._store = store
        self._supervisor = supervisor
        self._jobs = jobs
        #: uploads in progress per owner (they count against MST_QUOTA_GRAPHS already)
        self._creating: Counter[str] = Counter()
        #: per graph: weight updates make their new weights durable one at a time, in version order
        self._publishing: dict[str, asyncio.Lock] = {}
        #: per owner: a new graph's quota check, publication and record, one upload at a time
        self._committing: dict[str, asyncio.Lock] = {}

    def source(self, key: str) -> GraphSource | None:
        """Where a worker reloads a stored graph (or one shard of one) from (None when it was deleted)."""
        shard = parse_shard_key(key)
        graph_id = key if shard is None else shard[0]
        record = self._store.get_graph(graph_id)
        if record is None or (shard is not None and shard[1] >= record.shards):
            return None
        fmt = "points.npz" if record.kind == "points" else "npz"
        if shard is not None:
            fmt = shard_format(*gpu_core.edge_ranges(record.num_edges, record.shards)[shard[1]])
        weights = self._store.weights_path(graph_id) if record.weights_version else None
        return GraphSource(
            key,
            str(self._store.graph_path(graph_id)),
            record.num_vertices,
            None if weights is None or not weights.exists() else str(weights),
            fmt=fmt,
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

    async def create(
        self,
        upload: Upload,
        owner: str,
        kind: str = "graph",
        shards: int | None = None,
        steps: Steps | None = None,
    ) -> GraphRecord:
        """Store the upload as a graph (or point set) of ``owner`` (:meth:`admit` first).

        A graph is sharded across the workers (see :mod:`service.runtime.sharding`) when ``shards``
        (2 or more) asks for it, when it has more edges than ``MST_SHARD_EDGES_ABOVE`` (then over
        every worker), or when it does not fit one worker but fits across several. ``steps``: where
        an unsharded upload's time went (the worker's round trip and its own steps, the commit).
        """
        self._creating[owner] += 1
        try:
            if kind == "graph":
                return await self._create_graph(upload, owner, shards, steps)
            return await self._create(upload, owner, kind, steps=steps)
        finally:
            self._creating[owner] -= 1
            if not self._creating[owner]:
                del self._creating[owner]

    async def _create_graph(
        self, upload: Upload, owner: str, shards: int | None, steps: Steps | None
    ) -> GraphRecord:
        workers = len(self._supervisor.workers)
        if shards is not None and shards > max(workers, 1):
            upload.discard()
            raise InvalidParamsError(
                f"?shards={shards} asks for more shards than this service has workers ({workers}).",
                field="shards",
            )
        if shards is not None and shards >= 2:
            return await self._create_sharded(upload, owner, shards)
        threshold = self._supervisor.settings.shard_edges_above
        if shards is None and threshold and workers >= 2:
            return await self._create_sharded(upload, owner, None, above=threshold)
        try:
            return await self._create(
                upload, owner, "graph", keep_upload=shards is None and workers >= 2, steps=steps
            )
        except GraphExceedsWorkerError:
            if shards is not None or workers < 2:
                raise
            return await self._create_sharded(upload, owner, None)  # does not fit one worker: shard it

    async def _create_sharded(
        self, upload: Upload, owner: str, shards: int | None, above: int | None = None
    ) -> GraphRecord:
        """Store an upload as a sharded graph: ``shards`` shards, or as many as it needs to fit
        (``above``: a graph of at most that many edges is stored unsharded after all)."""
        graph_id = new_id("g")
        final = self._store.graph_path(graph_id)
        canonical = None if upload.format == "npz" else self._store.tmp_path(".npz")
        loaded: list[tuple[WorkerHandle, str]] = []
        try:
            workers = len(self._supervisor.workers)
            info = await self._supervisor.place(upload.size).request(
                DESCRIBE,
                str(upload.path),
                upload.format,
                None if canonical is None else str(canonical),
                workers,
            )
            m = int(info["num_edges"])
            if above is not None and m <= above:  # small enough: an ordinary graph, from the npz
                try:
                    return await self._create_canonical(upload, canonical, owner)
                except GraphExceedsWorkerError:
                    if workers < 2:
                        raise  # else it does not fit one worker: sharded after all
            count = shards if shards is not None else self._shards_needed(info, workers)
            await upload.synced
            Store.publish(upload.path if canonical is None else canonical, final)
            if canonical is not None:
                upload.discard()
            ranges = gpu_core.edge_ranges(m, count)
            handles = self._supervisor.place_shards(count)
            n = int(info["num_vertices"])
            estimate = int(info["shard_peak"][count - 1]) if count <= len(info["shard_peak"]) else 0

            async def load(i: int, handle: WorkerHandle) -> tuple[dict[str, Any], int]:
                key = shard_key(graph_id, i)
                fmt = shard_format(*ranges[i])
                result = await handle.load_new(key, str(final), fmt, n, None, estimate)
                loaded.append((handle, key))
                return result

            results = await asyncio.gather(
                *(load(i, h) for i, h in enumerate(handles)), return_exceptions=True
            )
            failed = [r for r in results if isinstance(r, BaseException)]
            if failed:
                raise failed[0]
            answers = [r for r in results if not isinstance(r, BaseException)]
            device_bytes = sum(int(summary["device_bytes"]) for summary, _ in answers)
            self.check_quotas(owner, device_bytes)
            record = GraphRecord(
                id=graph_id,
                created_at=time.time(),
                num_vertices=n,
                num_edges=m,
                weight_dtype=str(info["weight_dtype"]),
                source_format=upload.source,
                payload_bytes=final.stat().st_size,
                device_bytes=device_bytes,
                owner=owner,
                kind="graph",
                shards=count,
            )
            self._store.add_graph(record)
        except BaseException:
            final.unlink(missing_ok=True)
            upload.discard()
            if canonical is not None:
                canonical.unlink(missing_ok=True)
            for handle, key in loaded:
                handle.datasets.forget(key, loaded=True)
            with contextlib.suppress(BaseException):
                await upload.synced
            raise
        self._jobs.graph_owners[graph_id] = owner
        self._supervisor.sharded[graph_id] = count
        for (summary, generation), handle, i in zip(answers, handles, range(count), strict=True):
            handle.datasets.adopt(shard_key(graph_id, i), int(summary["device_bytes"]), generation)
        log.info("graph %s: %d edges in %d shards", graph_id, m, count)
        return record

    def _shards_needed(self, info: dict[str, Any], workers: int) -> int:
        """The fewest shards (2 or more) whose largest shard and whose union of shard forests each fit
        a worker; 413 when even one shard per worker does not."""
        capacities = [w.total_bytes for w in self._supervisor.workers if w.total_bytes > 0]
        capacity = min([int(info["capacity"]), *capacities])
        for k in range(2, workers + 1):
            if info["shard_peak"][k - 1] <= capacity and info["union_peak"][k - 1] <= capacity:
                return k
        k = workers
        needed = max(int(info["shard_peak"][k - 1]), int(info["union_peak"][k - 1]))
        raise GraphExceedsWorkerError(
            f"the graph ({info['num_vertices']} vertices, {info['num_edges']} edges) does not fit one "
            f"worker, nor split across all {workers}: its largest shard and the union of the shard "
            f"forests need up to {needed} bytes, each worker has {capacity}.",
            needed=needed,
            capacity=capacity,
            field="body",
        )

    async def _create_canonical(self, upload: Upload, canonical: Path | None, owner: str) -> GraphRecord:
        """Create an ordinary graph from an upload already written as npz at ``canonical`` (or that is
        an npz); a graph larger than a worker leaves the npz in place (it is sharded next)."""
        if canonical is None:
            return await self._create(upload, owner, "graph", keep_upload=True)
        await upload.synced
        upload.discard()
        converted = Upload(canonical, "npz", canonical.stat().st_size, upload.source, upload.synced)
        return await self._create(converted, owner, "graph", keep_upload=True)

    async def _create(
        self, upload: Upload, owner: str, kind: str, keep_upload: bool = False, steps: Steps | None = None
    ) -> GraphRecord:
        """``keep_upload``: a failure because the graph does not fit a worker leaves the upload in
        place (it is sharded next)."""
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
        except BaseException as exc:
            if canonical is not None:
                canonical.unlink(missing_ok=True)
            if keep_upload and isinstance(exc, GraphExceedsWorkerError):
                raise
            upload.discard()
            with contextlib.suppress(BaseException):
                await upload.synced
            raise
        if steps is not None:
            steps.lap("worker")
            steps.add(summary.get("timings_ms", {}), "w-")
        final = self._store.graph_path(graph_id)
        try:
            await upload.synced
            # with the real size, against the stored graphs only: under the owner's lock from the
            # check to add_graph, so concurrent uploads of the owner are counted one after the other
            # (the rename and its folder's fsync run in a thread: milliseconds on a disk)
            async with self._committing.setdefault(owner, asyncio.Lock()):
                self.check_quotas(owner, int(summary["device_bytes"]))
                await asyncio.to_thread(Store.publish, upload.path if canonical is None else canonical, final)
                if canonical is not None:
                    upload.discard()
                record = self._new_record(graph_id, summary, upload.source, final, owner, kind)
                self._store.add_graph(record)
            if steps is not None:
                steps.lap("durable")
        except BaseException:
            final.unlink(missing_ok=True)
            upload.discard()
            handle.datasets.forget(graph_id, loaded=True)
            raise
        self._jobs.graph_owners[graph_id] = owner
        handle.datasets.adopt(graph_id, record.device_bytes, generation)
        return record

    @staticmethod
    def _new_record(
        graph_id: str, summary: dict[str, Any], source: str, final: Path, owner: str, kind: str
    ) -> GraphRecord:
        return GraphRecord(
            id=graph_id,
            created_at=time.time(),
            num_vertices=int(summary["num_vertices"]),
            num_edges=int(summary["num_edges"]),
            weight_dtype=str(summary["weight_dtype"]),
            source_format=source,
            payload_bytes=final.stat().st_size,
            device_bytes=int(summary["device_bytes"]),
            owner=owner,
            kind=kind,
        )

    async def update_weights(
        self, graph_id: str, owner: str, upload: Upload, partial: bool, steps: Steps | None = None
    ) -> GraphRecord:
        """New weights for a stored graph (all of them, or some): resident first, then durable.

        The worker applies them in queue order (see :meth:`Jobs.update_weights`); then the complete
        weights are renamed into ``spool/graphs/<id>.weights.npy`` and the record's version is
        committed, so a restart reloads the graph with them. ``steps``: where its time went.
        """
        try:
            stored = self.get(graph_id, owner)
            if stored.shards > 1:
                raise sharded_weights_refused(graph_id, stored.shards)
            summary = await self._jobs.update_weights(graph_id, upload.path, upload.format, partial)
        except BaseException:
            upload.discard()
            with contextlib.suppress(BaseException):
                await upload.synced
            raise
        if steps is not None:
            steps.lap("worker")
            steps.add(summary.get("timings_ms", {}), "w-")
        weights_file = Path(summary["weights_file"])
        # The worker answers in version order and nothing awaits between its answer and this lock
        # (FIFO), so the file in place and the record always hold the latest acknowledged weights,
        # even when an earlier update's fsync ends after a later one's.
        async with self._publishing.setdefault(graph_id, asyncio.Lock()):
            try:
                await upload.synced
                if steps is not None:
                    steps.lap("fsync")
                replaced = await asyncio.to_thread(
                    self._store.publish_replacing, weights_file, self._store.weights_path(graph_id)
                )
            finally:
                upload.discard()
                weights_file.unlink(missing_ok=True)
            if replaced is not None:  # freeing 100s of MB takes the disk tens of ms: not on this path
                remove_later(replaced)
            if steps is not None:
                steps.lap("publish")
            record = self._store.set_graph_weights(
                graph_id,
                int(summary["weights_version"]),
                str(summary["weight_dtype"]),
                int(summary["device_bytes"]),  # a new dtype changes it (the device-bytes quota counts it)
            )
        if record is None:  # deleted meanwhile
            raise GraphNotFoundError(f"no graph has id {graph_id!r}.")
        if steps is not None:
            steps.lap("commit")
        handle = self._supervisor.holder(graph_id)
        placed = None if handle is None else handle.graphs.get(graph_id)
        if placed is not None:
            placed.device_bytes = int(summary["device_bytes"])
        return record

    async def delete(self, graph_id: str, owner: str, kind: str = "graph") -> None:
        """Forget the dataset at once (record, placement, queued jobs), then remove its files in a
        thread: they are gone when the answer goes out, and the event loop is not held meanwhile."""
        self.get(graph_id, owner, kind)
        # records written, like the deletion's own: on a full disk the store's reserve makes room
        self._store.reserve.freeing(lambda: self._jobs.cancel_for_graph(graph_id))
        handle = self._supervisor.holder(graph_id)
        if not self._store.delete_graph(graph_id, remove_payload=False):
            raise GraphNotFoundError(f"no graph has id {graph_id!r}.")
        self._jobs.graph_owners.pop(graph_id, None)
        lock = self._publishing.get(graph_id)
        if lock is not None and not lock.locked():
            del self._publishing[graph_id]
        if handle is not None:
            handle.datasets.forget(graph_id)
        for key, holder in self._supervisor.shard_holders(graph_id) or []:
            if holder is not None:
                holder.datasets.forget(key)
        self._supervisor.sharded.pop(graph_id, None)
        # the record is gone: nothing reads the files now (a crash before they are removed leaves
        # payloads without a record, which the next start removes)
        await asyncio.to_thread(
            remove_files, self._store.graph_path(graph_id), self._store.weights_path(graph_id)
        )

    def restore(self) -> None:
        """Place every stored graph on a worker; each worker reloads its own when it is up."""
        graphs = self._store.list_graphs()
        self._jobs.graph_owners.update((g.id, g.owner) for g in graphs)
        whole = [g for g in graphs if g.shards <= 1]
        self._supervisor.place_existing((g.id, g.device_bytes, g.weights_version) for g in whole)
        for g in graphs:
            if g.shards > 1:
                self._supervisor.place_existing_shards(g.id, g.shards, g.device_bytes)
        if graphs:
            log.info("reloading %d stored graph(s)", len(graphs))
