"""The requests of one worker, from their making until their answer or their loss.

A request (:class:`~.restarts.Request`) gets its id when it is posted (ids ascend in pipe
order, across the worker's processes), waits in the outbox until its transport writes it
(:meth:`Requests.next_to_send`: at most a limit unanswered at once, and a suspect alone), and is
pending until its reply settles its future; a request whose handler works on after its reply
(a result file) then waits for its STORED note. A request on a dataset whose reload is not
written yet is held until it is, so it follows the reload. When the worker dies the pending and
held requests are sorted out (:func:`~.restarts.triage`): failed, kept for the next process (in
the order they were made), or parked behind their dataset's reload.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Collection, Container, Iterable
from dataclasses import dataclass
from typing import Any

from ..worker.protocol import LOAD
from .restarts import Request, triage


def settle(fut: asyncio.Future[Any] | None, result: Any, error: BaseException | None) -> None:
    """Resolve ``fut`` (if there is one still pending) with ``result``, or fail it with ``error``."""
    if fut is None or fut.done():
        return
    if error is None:
        fut.set_result(result)
    else:
        fut.set_exception(error)


def consume(fut: asyncio.Future[Any]) -> None:
    """Mark a future's error as seen (no 'exception was never retrieved' warning)."""
    if not fut.cancelled():
        fut.exception()


@dataclass(frozen=True)
class Outcome:
    """What became of a dead worker's unanswered requests (see :meth:`Requests.sort_out`)."""

    #: failed: they were running
    lost: int
    #: to be sent to the next process, and how many of them must run alone
    kept: int
    suspects: int
    #: loads of placed datasets, answered by the datasets' reloads
    parked: int


class Requests:
    """The requests of one worker (see the module's docstring)."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        #: requests written (or being written) to the pipe and not answered yet, by request id
        self.pending: dict[int, Request] = {}
        #: STORED notes awaited for answered requests, by request id
        self._notes: dict[int, asyncio.Future[None]] = {}
        self._outbox: deque[Request] = deque()
        #: requests given to the transport and not answered
        self.in_flight = 0
        #: the id of a suspect request given to the transport: nothing goes behind it until it is answered
        self._alone: int | None = None
        #: requests of a dead process that go to the next one
        self._kept: list[Request] = []
        #: requests waiting for their dataset's reload to be written first, by dataset
        self._held: dict[str, list[Request]] = {}
        #: loads of placed datasets made before a death: answered by the dataset's reload
        self._parked: dict[str, list[Request]] = {}

    # -- on their way ---------------------------------------------------------------------------

    def post(self, request: Request) -> None:
        """Give ``request`` its id in the pipe and queue it there (the caller flushes)."""
        request.req_id = next(self._ids)
        self.pending[request.req_id] = request
        self._outbox.append(request)

    def next_to_send(self, limit: int) -> Request | None:
        """The next request for the transport to write, if it may go now: fewer than ``limit``
        unanswered, no suspect unanswered, and a suspect only when nothing is (it runs alone)."""
        if not self._outbox or self.in_flight >= limit or self._alone is not None:
            return None
        if self._outbox[0].suspect and self.in_flight:
            return None
        request = self._outbox.popleft()
        self.in_flight += 1
        if request.suspect:
            self._alone = request.req_id
        return request

    def hold(self, request: Request) -> None:
        """Keep ``request`` until its dataset's reload is written (:meth:`release`)."""
        assert request.dataset is not None
        self._held.setdefault(request.dataset, []).append(request)

    def release(self, dataset: str) -> list[Request]:
        """The requests held for ``dataset``'s reload, in the order they were made."""
        return self._held.pop(dataset, [])

    def held_datasets(self) -> Iterable[str]:
        return list(self._held)

    # -- answers --------------------------------------------------------------------------------

    def replied(self, req_id: int) -> Request | None:
        """A reply came: the request it answers (None for one no longer known)."""
        self.in_flight -= 1
        if req_id == self._alone:
            self._alone = None
        return self.pending.pop(req_id, None)

    def answer(self, request: Request, ok: bool, payload: Any) -> None:
        """Settle ``request`` with its reply; a note follows only a request that succeeded."""
        if request.note is not None:
            if ok:
                self._notes[request.req_id] = request.note
            else:
                settle(request.note, None, payload)
        settle(request.future, payload if ok else None, None if ok else payload)

    def stored(self, req_id: int, error: BaseException | None) -> None:
        """The STORED note of an answered request: its work behind the reply is done (or failed)."""
        settle(self._notes.pop(req_id, None), None, error)

    # -- a death --------------------------------------------------------------------------------

    def drop_outbox(self) -> None:
        """The process is gone (or new): nothing of the old pipe is in flight any more."""
        self._outbox.clear()
        self.in_flight = 0
        self._alone = None

    def lose_notes(self, lost: BaseException) -> None:
        """The notes still awaited fail (answered jobs' results are computed again if asked for)."""
        for fut in self._notes.values():
            settle(fut, None, lost)
        self._notes.clear()

    def sort_out(
        self, lost: BaseException, running: Collection[int], stopping: bool, placed: Container[str]
    ) -> Outcome | None:
        """Fail, keep or park the unanswered requests of a dead process (see :func:`~.restarts.triage`;
        ``running``: the ids of the run it was computing, ``placed``: the datasets placed on the
        worker, whose loads their reloads answer). Stopping, every request fails: None."""
        pending = [*self.pending.values(), *(r for rs in self._held.values() for r in rs)]
        self.pending.clear()
        self._held.clear()
        if stopping:
            for request in [*pending, *self._kept, *(r for rs in self._parked.values() for r in rs)]:
                settle(request.future, None, lost)
                settle(request.note, None, lost)
            self._kept.clear()
            self._parked.clear()
            return None
        out = triage(pending, running)
        for request in [*out.lost, *out.dropped]:
            settle(request.future, None, lost)
            settle(request.note, None, lost)
        for request in out.kept:
            dataset = request.args[0] if request.op == LOAD else None
            if dataset in placed:  # an evicted dataset's load (ensure_resident): its reload answers it
                self._parked.setdefault(str(dataset), []).append(request)
            else:
                self._kept.append(request)
        self._kept.sort(key=lambda r: r.seq)
        suspects = sum(r.suspect for r in self._kept)
        return Outcome(len(out.lost), len(self._kept), suspects, len(self._parked))

    def take_kept(self) -> list[Request]:
        """The requests a dead process left for this one, in the order they were made."""
        kept, self._kept = self._kept, []
        return kept

    def expire(self, lost: BaseException) -> None:
        """No process took the kept and parked requests in time: they fail."""
        expired = [*self._kept, *(r for rs in self._parked.values() for r in rs)]
        self._kept.clear()
        self._parked.clear()
        for request in expired:
            settle(request.future, None, lost)
            settle(request.note, None, lost)

    def fail_parked(self, keep: Collection[str], lost: BaseException) -> None:
        """The parked loads of datasets not in ``keep`` (deleted or evicted since) fail."""
        for dataset in [d for d in self._parked if d not in keep]:
            for request in self._parked.pop(dataset):
                settle(request.future, None, lost)

    def answer_parked(self, dataset: str, summary: Any, error: BaseException | None) -> None:
        """The loads parked for ``dataset`` get the answer of its reload."""
        for request in self._parked.pop(dataset, []):
            settle(request.future, summary, error)
