"""Succeeded jobs' result files: awaited while being written, shared by the cache, computed again when lost.

A succeeded job's result file is written by its worker right *after* its answer, so a request for
the result may come first. In the API process that submitted the job, the worker's STORED note
says when the file is there (:meth:`Results.storing`); another API process asks the worker
itself, which answers once the file is written (``AWAIT_STORED``). If the file is lost (it could
not be written, the worker died first, a crash or a power cut, or the size cap removed it), the
job stays ``succeeded``: the forest is deterministic, so the request computes it again from the
stored graph on the graph's worker (in its queue, after the jobs already there) and answers with
it. Only when the graph has been deleted, or its weights changed, meanwhile is that request a 410
(:class:`~service.errors.ResultGoneError`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..errors import ResultGoneError, ServiceUnavailableError, WorkerInternalError
from ..storage.records import JobRecord
from ..storage.store import Store
from .links.fleet import Fleet
from .links.link import consume
from .supervisor.result_cap import used
from .worker.protocol import AWAIT_STORED, MST

log = logging.getLogger("service.runtime.jobs")

#: computes a sharded graph's job's result again at a path: (its summary, the note of its file)
ShardedRun = Callable[[JobRecord, str], Awaitable[tuple[dict[str, Any], asyncio.Future[None]]]]


def check_recomputed(job: JobRecord, summary: dict[str, Any], result_path: str) -> None:
    """Refuse a lost result computed again that differs from the job's record (and remove its file)."""
    differs = [
        key
        for key in ("num_edges", "total_weight", "num_components")
        if key in summary and getattr(job, key) is not None and summary[key] != getattr(job, key)
    ]
    if differs:  # the computation is deterministic: this is a bug, never serve a different answer
        Path(result_path).unlink(missing_ok=True)
        raise WorkerInternalError(
            f"job {job.id}: computing the lost result again gave a different answer "
            f"({', '.join(f'{k} {summary[k]} instead of {getattr(job, k)}' for k in differs)})."
        )


class Results:
    """The result files of the succeeded jobs (see the module's docstring)."""

    def __init__(self, store: Store, fleet: Fleet) -> None:
        self._store = store
        self._fleet = fleet
        #: jobs of this process whose file its worker is writing: the STORED note
        self._storing: dict[str, asyncio.Future[None]] = {}
        #: lost results being computed again, by job id (one computation for concurrent requests)
        self._recomputing: dict[str, asyncio.Future[None]] = {}
        #: set by the coordinator of sharded jobs
        self.sharded_run: ShardedRun | None = None

    def storing(self, job_id: str, note: asyncio.Future[None]) -> None:
        """Hold requests for the job's result until ``note`` says its worker has written it."""
        if note.done():
            return
        self._storing[job_id] = note
        note.add_done_callback(lambda _: self._storing.pop(job_id, None))

    async def path(self, job: JobRecord) -> Path:
        """A succeeded job's result file, once written; computed again first if it was lost."""
        path = self._store.result_path(job.id)
        note = self._storing.get(job.id)
        if note is not None:
            with contextlib.suppress(Exception):  # a failed write: the file is computed again below
                await asyncio.shield(note)
        if not path.exists():
            await self._written_elsewhere(job)
        if path.exists():
            used(path)
            return path
        await self._recompute(job)
        return path

    async def _written_elsewhere(self, job: JobRecord) -> None:
        """Wait for the job's worker to write its file, if it is writing it now."""
        placements = self._store.placements_of(job.graph_id)
        if len(placements) != 1:
            return
        link = self._fleet.link(placements[0].worker)
        if not link.connected:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(link.call(AWAIT_STORED, job.id), 60.0)

    def share(self, earlier_id: str, job_id: str) -> bool:
        """Give a new (cached) job ``earlier``'s result file, a hard link; False when it is gone."""
        source, target = self._store.result_path(earlier_id), self._store.result_path(job_id)
        note = self._storing.get(earlier_id)
        if note is None:
            try:
                os.link(source, target)
            except OSError:
                return False
            return True

        linked: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def link(done: asyncio.Future[None]) -> None:
            with contextlib.suppress(OSError):  # a missing result is computed again when asked for
                os.link(source, target)
            linked.set_result(None)

        note.add_done_callback(link)
        self.storing(job_id, linked)
        return True

    async def _recompute(self, job: JobRecord) -> None:
        """Compute a succeeded job's lost result file again, from its stored graph."""
        pending = self._recomputing.get(job.id)
        if pending is None:
            record = self._store.get_graph(job.graph_id)
            if record is None:
                raise ResultGoneError(
                    f"the result of job {job.id} was lost and its graph {job.graph_id} has been deleted "
                    "since, so it cannot be computed again; upload the graph again and submit a new job."
                )
            if record.weights_version != job.weights_version:
                raise ResultGoneError(
                    f"the result of job {job.id} was lost and the weights of graph {job.graph_id} have "
                    f"changed since (version {job.weights_version}, now {record.weights_version}), so "
                    "it cannot be computed again; submit a new job."
                )
            log.warning("job %s: the result file is missing; computing it again", job.id)
            pending = asyncio.ensure_future(self._compute_again(job, record.shards > 1))
            self._recomputing[job.id] = pending
            pending.add_done_callback(lambda _: self._recomputing.pop(job.id, None))
            pending.add_done_callback(consume)
        try:
            await asyncio.shield(pending)
        except ResultGoneError:
            raise
        except Exception as exc:
            raise ServiceUnavailableError(
                f"the result of job {job.id} was lost and computing it again failed ({exc}); retry shortly."
            ) from None

    async def _compute_again(self, job: JobRecord, sharded: bool) -> None:
        path = str(self._store.result_path(job.id))
        if sharded:
            assert self.sharded_run is not None
            summary, stored = await self.sharded_run(job, path)
        else:
            placements = self._store.placements_of(job.graph_id)
            if not placements:
                raise ResultGoneError(f"the result of job {job.id} was lost and its graph is gone.")
            link = self._fleet.link(placements[0].worker)
            reply, note = link.send(
                MST, job.graph_id, path, job.task, json.loads(job.params), None, note=True
            )
            summary = await reply
            assert note is not None
            stored = note
        await stored
        check_recomputed(job, summary, path)
