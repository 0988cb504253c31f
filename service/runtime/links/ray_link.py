"""The API process's link to a Ray actor worker (``MST_WORKER_POOL=ray``): actor calls, one at a time.

The same link as a socket's (:class:`~.link.WorkerLink`: ids, futures, notes, a death's triage),
with another transport: each request is one actor call (:meth:`MSTWorker.call
<service.runtime.supervisor.ray_workers.MSTWorker.call>`) whose answer brings its reply and its
STORED note. Ray does not keep the order of calls from one caller to a threaded actor, so the
link keeps **one** request in flight and sends the next when the answer is back; the one in
flight when the actor dies counts as running. The next actor is reached once its supervisor's
slot says it serves.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from ray.exceptions import RayActorError

from ...errors import WorkerInternalError
from ..board import Board
from ..supervisor.ray_workers import RaySlot, first_line
from .link import Pending, WorkerLink


class RayLink(WorkerLink):
    """This API process's link to one worker actor (see the module's docstring)."""

    def __init__(self, slot: RaySlot, board: Board, start_timeout_s: float) -> None:
        super().__init__(slot.index, "", board, 0, start_timeout_s)
        self._ray = slot
        self._queue: list[Pending] = []
        self._calling: Pending | None = None
        self._tasks: set[asyncio.Future[Any]] = set()

    def _post(self, request: Pending) -> None:
        request.req_id = next(self._ids)
        self.pending[request.req_id] = request
        self._queue.append(request)
        self._next()

    def _next(self) -> None:
        if self._calling is not None or not self._queue or self._sock is None:
            return
        request = self._queue.pop(0)
        self._calling = request
        actor, generation = self._ray.actor, self._ray.generation
        ref = actor.call.remote(*request.message())
        task = asyncio.ensure_future(self._answer(ref, request, generation))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, ref: Any, request: Pending, generation: int) -> None:
        try:
            messages, fatal, numbers = await ref
            self._ray.publish(numbers)
        except RayActorError as exc:
            self._ray.lost(generation, f"the Ray actor died: {first_line(exc)}")
            self._lost_worker()
            return
        except Exception as exc:  # the answer could not be brought back (e.g. it does not unpickle)
            error = WorkerInternalError(f"the worker's answer was lost in Ray: {type(exc).__name__}: {exc}")
            messages, fatal = [(request.req_id, False, error)], False
        self._calling = None
        for message in messages:
            self._on_message(message)
        if fatal:  # a device error: a fresh actor gets a fresh CUDA context
            self._ray.lost(generation, "the worker hit a device error and is replaced")
            self._lost_worker()
            return
        self._next()

    def _running_ids(self) -> set[int]:
        return set() if self._calling is None else {self._calling.req_id}

    def _drop_transport(self) -> None:
        self._sock = None
        self._calling = None
        self._queue.clear()

    async def written(self) -> None:
        """(A request is in Ray's hands once made; the actor takes them in order.)"""

    async def _connecting(self) -> None:
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ray.serving.wait(), self._start_timeout_s)
                self._sock = object()  # type: ignore[assignment]  # connected: the actor serves
                held, self.held = self.held, []
                for request in held:
                    if not request.future.done():
                        self._post(request)
                return
            self._expire_held()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self._sock = None
        await super().close()
