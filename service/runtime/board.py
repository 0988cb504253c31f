"""The board: numbers every process of the service reads about the workers, in one block of shared memory.

The supervisor makes it (:meth:`Board.create`) before it spawns anything and hands it to every
worker and API process it starts. Each number has one writer:

* the supervisor: a worker's life (``state``, ``generation``, ``pid``, ``restarts``);
* the worker: its ``heartbeat``, what it holds and has free, its queue, and before each run the
  ids of the requests of each API process that the run answers (:meth:`Board.stamp`, read by that
  API process if the worker dies: those were running);
* each API process: its requests to each worker not answered yet (``outstanding``: queued there,
  running, or on their way), and those it lost or re-sent when a worker died (``lost``, ``resent``).

Plain doubles, no locks: each value is written whole by its one writer (integers are exact up
to 2**53) and read as it is at that moment.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

#: a worker's life, as ``state`` holds it
WORKER_STATES = ("starting", "reloading", "ready", "dead", "stopped")

#: per worker: the supervisor's, then the worker's own numbers
_WORKER_FIELDS = (
    "state",
    "generation",
    "pid",
    "restarts",
    "heartbeat",
    "free_bytes",
    "total_bytes",
    "queue_depth",
    "datasets",
    "held_bytes",
    "evicted",
    "reloads_pending",
    "computing",
)
#: per worker and API process
_LINK_FIELDS = ("run_first", "run_last", "run_mask", "lost", "resent", "outstanding")
#: ids past a run's first one that its stamp names one by one, as the bits of ``run_mask`` (a
#: double holds integers below 2**53 exactly). A run whose ids of one API process span more is
#: stamped as every id from its first to its last: more than ran, and a request caught in that
#: range when the worker dies is sent again suspect (or lost, if suspect already) without having run
_MASK_SPAN = 52
_W = {name: i for i, name in enumerate(_WORKER_FIELDS)}
_L = {name: i for i, name in enumerate(_LINK_FIELDS)}


@dataclass(frozen=True)
class WorkerNumbers:
    """One worker's numbers as read at one moment."""

    index: int
    state: str
    generation: int
    pid: int
    restarts: int
    heartbeat_age: float
    free_bytes: int
    total_bytes: int
    queue_depth: int
    datasets: int
    held_bytes: int
    evicted: int
    reloads_pending: int
    computing: int
    lost: int
    resent: int

    @property
    def accepting(self) -> bool:
        return self.state in ("reloading", "ready")


class Board:
    """Shared numbers of ``workers`` workers and ``api_slots`` API processes (see the module's docstring)."""

    def __init__(self, array: Any, workers: int, api_slots: int) -> None:
        self.array = array
        self.workers = workers
        self.api_slots = api_slots
        self._link_base = workers * len(_WORKER_FIELDS)

    @classmethod
    def create(cls, workers: int, api_slots: int) -> Board:
        size = workers * (len(_WORKER_FIELDS) + api_slots * len(_LINK_FIELDS))
        array = multiprocessing.get_context("spawn").RawArray("d", max(size, 1))
        return cls(array, workers, api_slots)

    def __reduce__(self) -> tuple[Any, ...]:  # handed to a spawned child with its shared array
        return (Board, (self.array, self.workers, self.api_slots))

    # -- per worker ---------------------------------------------------------------------------

    def _at(self, worker: int, name: str) -> int:
        return worker * len(_WORKER_FIELDS) + _W[name]

    def get(self, worker: int, name: str) -> float:
        return float(self.array[self._at(worker, name)])

    def set(self, worker: int, name: str, value: float) -> None:
        self.array[self._at(worker, name)] = value

    def state(self, worker: int) -> str:
        return WORKER_STATES[int(self.get(worker, "state"))]

    def set_state(self, worker: int, state: str) -> None:
        self.set(worker, "state", WORKER_STATES.index(state))

    def beat(self, worker: int) -> None:
        self.set(worker, "heartbeat", time.monotonic())

    # -- per worker and API process -----------------------------------------------------------

    def _link(self, worker: int, slot: int, name: str) -> int:
        return self._link_base + (worker * self.api_slots + slot) * len(_LINK_FIELDS) + _L[name]

    def stamp(self, worker: int, runs: Mapping[int, Collection[int]]) -> None:
        """The worker begins a run answering, for each API slot, its requests ``runs[slot]``: the
        ids themselves, not every id from the first to the last (identical jobs coalesced, batched
        one-shots and predictions skip the requests queued between them)."""
        for slot in range(self.api_slots):
            ids = runs.get(slot)
            first = last = mask = 0
            if ids:
                first, last = min(ids), max(ids)
                mask = sum(1 << (i - first) for i in set(ids)) if last - first < _MASK_SPAN else -1
            self.array[self._link(worker, slot, "run_first")] = 0  # set last: the stamp is whole then
            self.array[self._link(worker, slot, "run_mask")] = mask
            self.array[self._link(worker, slot, "run_last")] = last
            self.array[self._link(worker, slot, "run_first")] = first

    def clear_stamp(self, worker: int) -> None:
        for slot in range(self.api_slots):
            self.array[self._link(worker, slot, "run_first")] = 0

    def running(self, worker: int, slot: int) -> list[int]:
        """The ids of API slot ``slot``'s requests the worker's run in progress answers (empty: none)."""
        first = int(self.array[self._link(worker, slot, "run_first")])
        if first <= 0:
            return []
        last = max(first, int(self.array[self._link(worker, slot, "run_last")]))
        mask = int(self.array[self._link(worker, slot, "run_mask")])
        if mask < 0:
            return list(range(first, last + 1))
        return [first + i for i in range(last - first + 1) if mask >> i & 1]

    def count(self, worker: int, slot: int, name: str, by: int = 1) -> None:
        """An API process counts its ``lost`` or ``resent`` requests of a worker."""
        self.array[self._link(worker, slot, name)] += by

    def outstanding(self, worker: int, slot: int, count: int) -> None:
        """An API process has ``count`` requests to ``worker`` not answered yet."""
        self.array[self._link(worker, slot, "outstanding")] = count

    def waiting(self, worker: int) -> int:
        """Requests of every API process to ``worker`` not answered yet (or the worker's own queue,
        where that is longer: jobs it took back from the store)."""
        sent = sum(int(self.array[self._link(worker, s, "outstanding")]) for s in range(self.api_slots))
        return max(sent, int(self.get(worker, "queue_depth")))

    # -- reading ------------------------------------------------------------------------------

    def numbers(self, worker: int) -> WorkerNumbers:
        values = {name: self.get(worker, name) for name in _WORKER_FIELDS}
        beat = values.pop("heartbeat")
        lost = sum(int(self.array[self._link(worker, s, "lost")]) for s in range(self.api_slots))
        resent = sum(int(self.array[self._link(worker, s, "resent")]) for s in range(self.api_slots))
        return WorkerNumbers(
            index=worker,
            state=WORKER_STATES[int(values.pop("state"))],
            heartbeat_age=(time.monotonic() - beat) if beat else float("inf"),
            lost=lost,
            resent=resent,
            **{name: int(value) for name, value in values.items()},
        )

    def all(self) -> list[WorkerNumbers]:
        return [self.numbers(w) for w in range(self.workers)]
