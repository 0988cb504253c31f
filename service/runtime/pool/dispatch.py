"""A worker's task queue and its dispatcher: which queued task is handed to the worker, and when.

Tasks (a job, a one-shot computation, a shard's step, a weight update) wait in their worker's
queue until the dispatcher hands them over; a queued task can be cancelled, a handed one runs
(:meth:`Task.run` sends its requests to the worker, :class:`WorkerCalls`).

Pipelining (``MST_DISPATCH_DEPTH``): up to that many tasks are handed to the worker at once, so
its pipe holds the next jobs while it computes one and it never waits for the API's event loop
between jobs (the loop may be busy with HTTP). The worker still runs them one at a time, in the
order they were queued: the dispatcher starts each handed task's coroutine in queue order and
each sends its request before its first wait (asyncio runs new tasks first in, first out), and
the pipe keeps that order. Only tasks that say so (``pipelined = True``: a job or a lost
result's recomputation on a graph resident now, a one-shot computation) go ahead of an
unfinished one; any other (a weight update, an evicted graph's job that must load it first, a
shard's step) waits until everything handed before it has finished, and everything after it
waits for it. Depth 1 is one task at a time. One-shot computations (``batched = True``) are
handed up to :data:`BATCHED_DEPTH` at once whatever the depth: the worker computes those waiting
together in its pipe as one run, so the pipe must hold the next batch while it computes one.

After a restart the dispatcher leaves the tasks of a dataset being reloaded in the queue (they
keep their order) and hands the others meanwhile; how long a task waited so is kept in
:attr:`Dispatcher.reload_waits` while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Iterator
from typing import Any, Protocol

from ...errors import ServiceUnavailableError
from ..worker.protocol import MAX_COALESCED

log = logging.getLogger("service.runtime.supervisor")

#: batched tasks (one-shots) handed at once, whatever MST_DISPATCH_DEPTH says: two batches' worth
BATCHED_DEPTH = 2 * MAX_COALESCED


class WorkerCalls(Protocol):
    """What a task may ask of the worker it was handed to (a :class:`~.handle.WorkerHandle`)."""

    @property
    def reload_waits(self) -> dict[str, float]:
        """How long handed tasks waited in the queue for their dataset's reload (ms), by task id."""

    async def request(self, op: str, *args: Any) -> dict[str, Any]: ...

    async def request_with_note(self, op: str, *args: Any) -> tuple[dict[str, Any], asyncio.Future[None]]: ...

    async def ensure_resident(self, graph_id: str) -> None: ...

    def touch(self, graph_id: str) -> None: ...

    async def evict(self, needed: int, keep: str | None = None) -> int: ...


class Task(Protocol):
    """A unit of work in a worker's queue (a job, a one-shot computation, a shard's step).

    A task with a true ``pipelined`` attribute may be handed to the worker while others are still
    unfinished (see the module's docstring: it sends its one request before its first wait); one
    with a ``graph_id`` waits while that dataset is reloaded, and keeps it from being evicted.
    """

    task_id: str

    async def run(self, worker: WorkerCalls) -> None: ...

    def abandon(self, reason: str) -> None:
        """The task will never run (the service is stopping)."""


async def settle_from(done: asyncio.Future[Any], work: Awaitable[Any]) -> None:
    """Await ``work`` and settle ``done`` (if still pending) with its answer or its error: how a
    queued task hands its outcome to the caller awaiting ``done``."""
    try:
        answer = await work
    except Exception as exc:
        if not done.done():
            done.set_exception(exc)
    else:
        if not done.done():
            done.set_result(answer)


class QueuedRequest:
    """A queued task whose caller awaits ``done``: its outcome, or the reason it never ran.

    Subclasses say what to ask the worker in :meth:`ask`; ``run`` settles ``done`` with the
    answer or the error (a task that never runs is abandoned with a 503).
    """

    task_id: str
    done: asyncio.Future[Any]

    async def ask(self, worker: WorkerCalls) -> Any:
        raise NotImplementedError

    async def run(self, worker: WorkerCalls) -> None:
        await settle_from(self.done, self.ask(worker))

    def abandon(self, reason: str) -> None:
        if not self.done.done():
            self.done.set_exception(ServiceUnavailableError(reason))


def new_future() -> asyncio.Future[Any]:
    """A future of the running loop (a :class:`QueuedRequest`'s ``done``)."""
    return asyncio.get_running_loop().create_future()


async def await_queued(queue: Dispatcher, task: QueuedRequest) -> Any:
    """Queue ``task`` and await its outcome; a caller that gives up takes it out of the queue (or,
    once it runs, lets it finish unheard)."""
    queue.enqueue(task)
    try:
        return await task.done
    except BaseException:
        if queue.remove(task.task_id) is None and not task.done.done():
            task.done.cancel()
        raise


def _dataset(task: Task) -> str | None:
    graph_id = getattr(task, "graph_id", None)
    return graph_id if isinstance(graph_id, str) else None


def _pipelined(task: Task) -> bool:
    return bool(getattr(task, "pipelined", False))


class Dispatcher:
    """The queue of one worker's tasks and the loop that hands them over (see the module's docstring).

    ``worker``: what the tasks run on; ``accepting``: set while the worker takes requests;
    ``reloading``: the datasets being reloaded now; ``resident``: whether a dataset is resident
    now; ``stopping``: whether the service stops (nothing more is handed).
    """

    def __init__(
        self,
        worker: WorkerCalls,
        depth: int,
        accepting: asyncio.Event,
        reloading: Callable[[], Collection[str]],
        resident: Callable[[str], bool],
        stopping: Callable[[], bool],
        name: str,
    ) -> None:
        self._worker = worker
        self._depth = depth
        self._accepting = accepting
        self._reloading = reloading
        self._resident = resident
        self._stopping = stopping
        self._name = name
        self._tasks: deque[Task] = deque()
        #: tasks handed to the worker and not finished (in the order they were handed)
        self.running: list[Task] = []
        #: set when a task is queued
        self._has_tasks = asyncio.Event()
        #: set whenever a handed task finishes, or a reload ends (the next task may go)
        self._slot = asyncio.Event()
        #: set when the loop has handed what it could and waits (see :meth:`hand_over`)
        self._dispatched = asyncio.Event()
        #: when the loop first left a task in the queue for its dataset's reload, by task id
        self._held_since: dict[str, float] = {}
        #: how long handed tasks waited in the queue for their dataset's reload (ms), by task id
        self.reload_waits: dict[str, float] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._handed: set[asyncio.Future[None]] = set()

    @property
    def queue_depth(self) -> int:
        return len(self._tasks)

    def queued(self) -> Iterator[Task]:
        """The queued tasks, in queue order."""
        return iter(list(self._tasks))

    def datasets(self) -> set[str]:
        """The datasets with a task queued or running: never evicted."""
        return {d for d in map(_dataset, [*self._tasks, *self.running]) if d is not None}

    def needed(self) -> Iterator[str]:
        """The datasets of the running, then the queued tasks, in that order (a reload's priority)."""
        for task in [*self.running, *self._tasks]:
            dataset = _dataset(task)
            if dataset is not None:
                yield dataset

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._dispatch_loop(), name=self._name)

    def cancel_handed(self) -> None:
        """Cancel the handed tasks still running (a pool whose worker is gone for good)."""
        for run in list(self._handed):
            run.cancel()

    async def stop(self) -> None:
        """Hand nothing more; abandon the queued tasks (the handed ones finish, or not, unheard)."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        for task in self._tasks:
            task.abandon("the service stopped before the job ran")
        self._tasks.clear()

    def enqueue(self, task: Task) -> None:
        self._tasks.append(task)
        self._has_tasks.set()
        if self._reloading():  # the tasks ahead may all wait for reloads: this one may not
            self._slot.set()

    def remove(self, task_id: str) -> Task | None:
        for task in self._tasks:
            if task.task_id == task_id:
                self._tasks.remove(task)
                return task
        return None

    def wake(self) -> None:
        """Something a queued task may wait for has changed (a reload ended): look again."""
        self._slot.set()

    def reloads_begin(self) -> None:
        """A new process reloads its datasets: their tasks' waits are counted from now."""
        self._held_since.clear()

    async def hand_over(self) -> None:
        """Let the loop hand the queued tasks it can now, and return once it has (before a reload
        goes into the pipe: jobs of datasets already back go first).

        It hands them, then sets ``_dispatched`` and waits; asyncio runs the handed tasks' first
        steps (each writes its request) before this coroutine wakes up.
        """
        if not self._tasks:
            return
        self._dispatched.clear()
        self._has_tasks.set()
        self._slot.set()
        await self._dispatched.wait()

    def _may_pipeline(self, task: Task) -> bool:
        """Whether ``task`` may be handed while others are unfinished (see the module's docstring)."""
        if not _pipelined(task):
            return False
        dataset = _dataset(task)
        return dataset is None or self._resident(dataset)

    def _must_wait(self, head: Task) -> bool:
        if not self.running:
            return False
        depth = max(self._depth, BATCHED_DEPTH) if getattr(head, "batched", False) else self._depth
        return (
            len(self.running) >= depth
            or not self._may_pipeline(head)
            or not all(_pipelined(t) for t in self.running)  # a barrier task lets none behind it
        )

    async def _dispatch_loop(self) -> None:
        while True:
            while not self._tasks or self._stopping():
                self._has_tasks.clear()
                self._dispatched.set()
                await self._has_tasks.wait()
            await self._accepting.wait()
            if not self._tasks:
                continue
            self._slot.clear()
            head = self._next_task()
            if head is None or self._must_wait(head):
                self._dispatched.set()
                await self._slot.wait()
                continue
            if head is self._tasks[0]:
                self._tasks.popleft()
            else:
                self._tasks.remove(head)
            held_since = self._held_since.pop(head.task_id, None)
            if held_since is not None:
                self.reload_waits[head.task_id] = (time.monotonic() - held_since) * 1e3
            self.running.append(head)
            run = asyncio.ensure_future(self._run(head))  # started in queue order: asyncio runs tasks FIFO
            self._handed.add(run)
            run.add_done_callback(self._handed.discard)

    def _next_task(self) -> Task | None:
        """The first queued task that does not wait for its dataset's reload (the tasks of a
        dataset keep their order: all of them wait while it reloads); None when all wait."""
        reloading = self._reloading()
        if not reloading:
            return self._tasks[0]
        now = time.monotonic()
        for task in self._tasks:
            if _dataset(task) not in reloading:
                return task
            self._held_since.setdefault(task.task_id, now)
        return None

    async def _run(self, task: Task) -> None:
        try:
            await task.run(self._worker)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("task %s failed unexpectedly", task.task_id)
        finally:
            self.running.remove(task)
            self.reload_waits.pop(task.task_id, None)
            self._slot.set()
