"""A worker's death: which request it was running, what becomes of the others, how its datasets come back.

**Which request was running.** A worker process computes the requests in its pipe one run at a
time, in pipe order: one request, or several as one run (identical MST jobs coalesced, one-shots
batched into one union graph). Before a run it writes the first and last request id of the run
into a :class:`~service.runtime.worker.protocol.RunStamp` (two integers of shared memory, no
message), and clears it once the run's replies are sent, before the work behind them (a result
file). Its handle reads the stamp once the process is gone: the ids between them that have no
reply are the requests that were running; with a clear stamp nothing was (the worker was idle,
reading the next request, or writing a result file). The Ray pool has no shared memory with its
actors, but it keeps one request in flight: that one counts as running.

**What becomes of each request** (:func:`triage`), unreplied when the worker died:

* the one request of a run of one: **lost** (:class:`~service.errors.WorkerLostError`,
  ``worker_lost``): it may be what killed the worker, and must not kill the next one;
* each request of a run of several: the handle cannot tell which one killed the worker, so
  each is kept and re-sent, marked **suspect**: a suspect is written to the pipe alone (nothing
  before it unanswered, nothing after it until it is answered), so it runs alone, and it is lost
  if a worker dies running it (it was running when two workers died in a row);
* a request that had not started: **kept**, re-sent to the next worker in the order it was
  made, each behind its dataset's reload;
* the handle's own reloads: **dropped** (the next worker reloads every dataset anyway).

**Reloads.** The next worker takes requests as soon as it has warmed up; its datasets come back
from the spool in the background, one at a time, in the order :func:`next_reload` picks (those
requests or queued tasks wait for first). A request for a dataset whose reload has not been
sent is held until it is, so it follows the reload in the pipe; the dispatcher leaves the tasks
of a dataset being reloaded in the queue meanwhile and hands those of the others.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: creation order of requests (they are re-sent in it after a death)
_SEQUENCE = itertools.count(1)


@dataclass(eq=False)
class Request:
    """A request for a worker, from the moment it is made until its reply (or its loss)."""

    op: str
    args: tuple[Any, ...]
    future: asyncio.Future[Any]
    #: the STORED note that follows its reply (see :meth:`.handle.WorkerHandle.request_with_note`)
    note: asyncio.Future[None] | None = None
    #: the dataset it computes on (an MST or a weights update): written only after its reload
    dataset: str | None = None
    #: the handle's reload of a dataset: never re-sent
    reload: bool = False
    #: it ran with others when a worker died: it runs alone from now on
    suspect: bool = False
    #: its id in the current worker's pipe (0 until it is written there)
    req_id: int = 0
    seq: int = field(default_factory=lambda: next(_SEQUENCE))

    def message(self) -> tuple[Any, ...]:
        return (self.op, self.req_id, *self.args)


@dataclass
class Triage:
    """What becomes of a dead worker's unreplied requests (see the module's docstring)."""

    #: fail with worker_lost: they were running
    lost: list[Request]
    #: go to the next worker, in this order
    kept: list[Request]
    #: the handle's reloads, which fail quietly
    dropped: list[Request]


def triage(pending: Iterable[Request], running: Collection[int]) -> Triage:
    """Sort the unreplied requests of a dead worker; ``running``: the ids of the run in progress."""
    ordered = sorted(pending, key=lambda r: r.seq)
    ran = [r for r in ordered if r.req_id and r.req_id in running]
    out = Triage([], [], [])
    for request in ordered:
        if request in ran and (len(ran) == 1 or request.suspect or request.reload):
            out.lost.append(request)
        elif request in ran:
            request.suspect = True  # which of the run killed it is unknown: each runs alone next
            out.kept.append(request)
        elif request.reload:
            out.dropped.append(request)
        else:
            out.kept.append(request)
    for request in out.kept:
        request.req_id = 0
    return out


def next_reload(waiting: Collection[str], needed: Iterable[str], sizes: Mapping[str, int]) -> str | None:
    """The dataset to reload next, of those ``waiting``: the smallest of those that held requests,
    handed or queued tasks need (``needed``), else the smallest. One reload at a time blocks the
    worker's pipe, so small datasets first keep the waits short (a job on a dataset back already
    waits at most for the reload in progress)."""
    wanted = {dataset for dataset in needed if dataset in waiting}
    pool = wanted or set(waiting)
    if not pool:
        return None
    return min(pool, key=lambda d: (sizes.get(d, 0), d))
