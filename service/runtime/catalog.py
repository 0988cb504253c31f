"""The stored datasets as an API process handles them: created from uploads, described, deleted, new weights.

A dataset is created in this order, so a client that got 201 has a dataset that survives any
crash, and a failed upload leaves nothing behind:

1. the body is complete in the spool's tmp folder (fsync running alongside);
2. the chosen worker (:meth:`~.links.fleet.Fleet.place`) parses and validates it and makes it
   resident (errors come back as 4xx naming field and edge index); for text formats it also
   writes the parsed arrays as an npz; it holds the dataset as *provisional*;
3. the npz is renamed into ``spool/graphs/<id>.npz`` (folder fsynced);
4. the record and its placement are committed to the store in one transaction with the check of
   the owner's quotas (so concurrent uploads through different API processes never pass a quota
   together), and the worker is told (``COMMIT``; a refused one is dropped: ``ABANDON``).

New weights go to the graph's worker, which applies them in its queue's order and makes them
durable before it answers (:mod:`service.runtime.worker.weights`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
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
    ShardedGraphError,
)
from ..metrics import Metrics
from ..settings import Settings
from ..storage.graph_table import QuotaCheck
from ..storage.records import GraphRecord, new_id
from ..storage.spool import Upload, remove_files
from ..storage.store import Store
from ..timing import Steps
from .admission import Admission
from .links.fleet import Fleet
from .links.link import consume
from .worker.protocol import ABANDON, COMMIT, DESCRIBE, DROP, LOAD, WEIGHTS, shard_format
from .worker.sources import shard_key

log = logging.getLogger("service.runtime.catalog")


def sharded_weights_refused(graph_id: str, shards: int) -> ShardedGraphError:
    """The 409 of a weight update on a sharded graph."""
    return ShardedGraphError(
        f"graph {graph_id} is sharded across {shards} workers, and the weights of a sharded graph "
        "cannot be changed; upload the graph again with the new weights (and delete this one)."
    )


class Catalog:
    """The stored datasets (see the module's docstring)."""

    def __init__(
        self, settings: Settings, store: Store, fleet: Fleet, admission: Admission, metrics: Metrics
    ) -> None:
        self._settings = settings
        self._store = store
        self._fleet = fleet
        self._admission = admission
        self._metrics = metrics
        #: uploads in progress in this process per owner (an early refusal counts them)
        self._creating: Counter[str] = Counter()

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

    # -- quotas -------------------------------------------------------------------------------

    def admit(self, owner: str) -> None:
        """Refuse an upload of ``owner`` before its body is read when a quota is already used up."""
        count, used = self._store.graph_usage(owner)
        self.quota_check(owner)(count + self._creating[owner], used)

    def quota_check(self, owner: str, device_bytes: int = 0) -> QuotaCheck:
        """The check of ``owner``'s MST_QUOTA_GRAPHS (429) and MST_QUOTA_DEVICE_BYTES (413) for a new
        dataset of ``device_bytes`` (0 before it is loaded: then only a key at its quota is refused)."""
        max_graphs, max_bytes = self._settings.quota_graphs, self._settings.quota_device_bytes

        def check(count: int, used: int) -> None:
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

        return check

    # -- creation -----------------------------------------------------------------------------

    async def create(
        self,
        upload: Upload,
        owner: str,
        kind: str = "graph",
        shards: int | None = None,
        steps: Steps | None = None,
    ) -> GraphRecord:
        """Store the upload as a graph (or point set) of ``owner`` (:meth:`admit` first).

        A graph is sharded across the workers when ``shards`` (2 or more) asks for it, when it has
        more edges than ``MST_SHARD_EDGES_ABOVE`` (then over every worker), or when it does not fit
        one worker but fits across several. ``steps``: where an unsharded upload's time went.
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
        workers = len(self._fleet)
        if shards is not None and shards > max(workers, 1):
            upload.discard()
            raise InvalidParamsError(
                f"?shards={shards} asks for more shards than this service has workers ({workers}).",
                field="shards",
            )
        if shards is not None and shards >= 2:
            return await self._create_sharded(upload, owner, shards)
        threshold = self._settings.shard_edges_above
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

    async def _load(self, worker: int, key: str, args: tuple[Any, ...], estimate: int) -> dict[str, Any]:
        """LOAD on ``worker``, its bytes counted as reserved there meanwhile (placements see them)."""
        self._fleet.reserved[worker] += estimate
        try:
            summary: dict[str, Any] = await self._fleet.link(worker).call(LOAD, key, *args)
        finally:
            self._fleet.reserved[worker] -= estimate
        return summary

    def _tell(self, worker: int, op: str, key: str) -> None:
        reply, _ = self._fleet.link(worker).send(op, key)
        reply.add_done_callback(consume)

    async def _create(
        self, upload: Upload, owner: str, kind: str, keep_upload: bool = False, steps: Steps | None = None
    ) -> GraphRecord:
        """``keep_upload``: a failure because the graph does not fit a worker leaves the upload in
        place (it is sharded next)."""
        graph_id = new_id("p" if kind == "points" else "g")
        worker = self._fleet.place()
        canonical = None if upload.format in ("npz", "points.npz") else self._store.tmp_path(".npz")
        args = (str(upload.path), upload.format, None, None if canonical is None else str(canonical))
        try:
            summary = await self._load(worker, graph_id, args, upload.size)
        except BaseException as exc:
            if canonical is not None:
                canonical.unlink(missing_ok=True)
            if not (keep_upload and isinstance(exc, GraphExceedsWorkerError)):
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
            await asyncio.to_thread(
                self._store.publish, upload.path if canonical is None else canonical, final
            )
            if canonical is not None:
                upload.discard()
            record = _new_record(graph_id, summary, upload.source, final, owner, kind)
            check = self.quota_check(owner, record.device_bytes)
            self._store.commit_graph(record, [(graph_id, worker, record.device_bytes)], check)
            if steps is not None:
                steps.lap("durable")
        except BaseException:
            final.unlink(missing_ok=True)
            upload.discard()
            self._tell(worker, ABANDON, graph_id)
            raise
        self._tell(worker, COMMIT, graph_id)
        return record

    async def _create_sharded(
        self, upload: Upload, owner: str, shards: int | None, above: int | None = None
    ) -> GraphRecord:
        """Store an upload as a sharded graph: ``shards`` shards, or as many as it needs to fit
        (``above``: a graph of at most that many edges is stored unsharded after all)."""
        graph_id = new_id("g")
        final = self._store.graph_path(graph_id)
        canonical = None if upload.format == "npz" else self._store.tmp_path(".npz")
        loaded: list[tuple[int, str]] = []
        try:
            workers = len(self._fleet)
            info = await self._fleet.link(self._fleet.place()).call(
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
            await asyncio.to_thread(
                self._store.publish, upload.path if canonical is None else canonical, final
            )
            if canonical is not None:
                upload.discard()
            placed, sizes = await self._load_shards(graph_id, final, info, count, loaded)
            record = GraphRecord(
                id=graph_id, created_at=time.time(), num_vertices=int(info["num_vertices"]), num_edges=m,
                weight_dtype=str(info["weight_dtype"]), source_format=upload.source,
                payload_bytes=final.stat().st_size, device_bytes=sum(sizes), owner=owner, kind="graph",
                shards=count,
            )  # fmt: skip
            where = [
                (shard_key(graph_id, i), w, size)
                for i, (w, size) in enumerate(zip(placed, sizes, strict=True))
            ]
            self._store.commit_graph(record, where, self.quota_check(owner, record.device_bytes))
        except BaseException:
            final.unlink(missing_ok=True)
            upload.discard()
            if canonical is not None:
                canonical.unlink(missing_ok=True)
            for worker, key in loaded:
                self._tell(worker, ABANDON, key)
            with contextlib.suppress(BaseException):
                await upload.synced
            raise
        for worker, key in loaded:
            self._tell(worker, COMMIT, key)
        log.info("graph %s: %d edges in %d shards", graph_id, m, count)
        return record

    async def _load_shards(
        self, graph_id: str, final: Path, info: dict[str, Any], count: int, loaded: list[tuple[int, str]]
    ) -> tuple[list[int], list[int]]:
        """Load the ``count`` shards of the stored npz ``final`` on their workers, side by side: (each
        shard's worker, its device bytes). Each shard loaded joins ``loaded`` (the caller's to commit
        or abandon); the first failure is raised once every load has ended."""
        ranges = gpu_core.edge_ranges(int(info["num_edges"]), count)
        placed = self._fleet.place_shards(count)
        n = int(info["num_vertices"])
        estimate = int(info["shard_peak"][count - 1]) if count <= len(info["shard_peak"]) else 0

        async def load(i: int, worker: int) -> dict[str, Any]:
            key = shard_key(graph_id, i)
            summary = await self._load(worker, key, (str(final), shard_format(*ranges[i]), n, None), estimate)
            loaded.append((worker, key))
            return summary

        results = await asyncio.gather(*(load(i, w) for i, w in enumerate(placed)), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            raise failed[0]
        answers = [r for r in results if not isinstance(r, BaseException)]
        return placed, [int(summary["device_bytes"]) for summary in answers]

    def _shards_needed(self, info: dict[str, Any], workers: int) -> int:
        """The fewest shards (2 or more) whose largest shard and whose union of shard forests each fit
        a worker; 413 when even one shard per worker does not."""
        capacities = [t for t in self._fleet.total_bytes() if t > 0]
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

    # -- new weights and deletion -------------------------------------------------------------

    async def update_weights(
        self, graph_id: str, owner: str, upload: Upload, partial: bool, steps: Steps | None = None
    ) -> GraphRecord:
        """New weights for a stored graph (all of them, or some), applied by its worker in queue
        order and durable before the answer; the record with the new version."""
        try:
            stored = self.get(graph_id, owner)
            if stored.shards > 1:
                raise sharded_weights_refused(graph_id, stored.shards)
            placements = self._store.placements_of(graph_id)
            if not placements:
                raise GraphNotFoundError(f"no graph has id {graph_id!r}.")
            self._admission.check_queue()
            await upload.synced  # durable before its worker publishes it
            if steps is not None:
                steps.lap("fsync")
            link = self._fleet.link(placements[0].worker)
            summary = await link.call(WEIGHTS, graph_id, str(upload.path), upload.format, partial)
        finally:
            upload.discard()  # (the worker renamed a whole .npy into place: nothing is left of it)
        if steps is not None:
            steps.lap("worker")
            steps.add(summary.get("timings_ms", {}), "w-")
        record: GraphRecord = summary["record"]
        return record

    async def delete(self, graph_id: str, owner: str, kind: str = "graph") -> None:
        """Forget the dataset at once (its queued jobs cancelled, its record and placements gone,
        its workers told to drop it), then remove its files in a thread: they are gone when the
        answer goes out, and the event loop is not held meanwhile."""
        self.get(graph_id, owner, kind)
        # records written, like the deletion's own: on a full disk the store's reserve makes room
        cancelled = self._store.reserve.freeing(lambda: self._store.cancel_queued(graph_id, time.time()))
        for _ in cancelled:
            self._metrics.job_finished("cancelled", None, None)
        placements = self._store.placements_of(graph_id)
        if not self._store.delete_graph(graph_id, remove_payload=False):
            raise GraphNotFoundError(f"no graph has id {graph_id!r}.")
        for placement in placements:
            self._tell(placement.worker, DROP, placement.key)
        # the record is gone: nothing reads the files now (a crash before they are removed leaves
        # payloads without a record, which the next start removes)
        await asyncio.to_thread(
            remove_files, self._store.graph_path(graph_id), self._store.weights_path(graph_id)
        )


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
        facts=json.dumps(summary.get("facts") or {}, separators=(",", ":")),
    )
