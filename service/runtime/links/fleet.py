"""An API process's view of the workers: a link to each, their numbers on the board, what the supervisor says.

Every API process reaches every worker directly (:class:`~.link.WorkerLink`); which worker a new
dataset goes to is decided here (:meth:`Fleet.place`) from the board's numbers, the same in every
process: the most room its own datasets leave a worker (a GPU worker: its share of the device less
what it holds; CPU workers, which share the host's memory: the fewest bytes held), then the most
free memory, then the shortest queue, then the lowest index. Room, not the device's free memory,
comes first: other processes on a GPU move its free memory from one moment to the next, and many
small datasets must spread over every worker of every GPU. A dataset is placed on one worker; the store
records where (:mod:`service.storage.graph_table`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ...errors import ServiceUnavailableError
from ...settings import Settings
from ..board import Board, WorkerNumbers
from ..supervisor.plan import socket_path
from ..supervisor.supervisor import FACTS, read_facts
from .link import WorkerLink


class Fleet:
    """The workers as API process ``slot`` sees them (see the module's docstring)."""

    def __init__(
        self,
        settings: Settings,
        board: Board,
        run_dir: Path,
        slot: int,
        workers: int,
        links: list[WorkerLink] | None = None,
    ) -> None:
        self.settings = settings
        self.board = board
        self.run_dir = run_dir
        self.slot = slot
        #: a link to every worker: over its socket, or given (a Ray actor's, :mod:`.ray_link`)
        self.links = links or [
            WorkerLink(i, socket_path(run_dir, i), board, slot, settings.worker_start_timeout_s)
            for i in range(workers)
        ]
        #: bytes this process is loading onto each worker now (a placement counts them)
        self.reserved = [0] * workers
        self._facts: dict[str, Any] = {}
        self._facts_at = -1

    def open(self) -> None:
        for link in self.links:
            link.open()

    async def close(self) -> None:
        await asyncio.gather(*(link.close() for link in self.links))

    def __len__(self) -> int:
        return len(self.links)

    def link(self, index: int) -> WorkerLink:
        if not 0 <= index < len(self.links):
            raise ServiceUnavailableError(
                f"worker {index} does not exist in this service (its datasets are placed again at the "
                "next start)."
            )
        return self.links[index]

    # -- what is known of the workers ---------------------------------------------------------

    def numbers(self) -> list[WorkerNumbers]:
        return [self.board.numbers(i) for i in range(len(self.links))]

    def facts(self) -> list[dict[str, Any]]:
        """What the supervisor last said of each worker (backend, device, start-up, standby, ...)."""
        try:
            changed = (self.run_dir / FACTS).stat().st_mtime_ns
        except OSError:
            changed = 0
        if changed != self._facts_at:
            self._facts = read_facts(self.run_dir)
            self._facts_at = changed
        workers: list[dict[str, Any]] = self._facts.get("workers", [])
        return workers

    def backend(self, index: int) -> str | None:
        facts = self.facts()
        return str(facts[index]["backend"]) if index < len(facts) else None

    @property
    def ready(self) -> bool:
        """Some worker takes requests and beats."""
        timeout = self.settings.heartbeat_timeout_s
        return any(n.accepting and n.heartbeat_age <= timeout for n in self.numbers())

    def describe(self) -> list[dict[str, Any]]:
        """Each worker as ``/readyz`` shows it."""
        facts = self.facts()
        out = []
        for n in self.numbers():
            fact = facts[n.index] if n.index < len(facts) else {}
            out.append(
                {
                    "index": n.index,
                    "state": n.state,
                    "pid": n.pid or None,
                    "backend": fact.get("backend"),
                    "device": fact.get("device"),
                    # under the service's CUDA MPS (MST_MPS; a GPU worker)
                    "mps": bool(self._facts.get("mps")) and fact.get("backend") == "gpu",
                    "restarts": n.restarts,
                    "heartbeat_age_s": round(n.heartbeat_age, 3) if n.heartbeat_age != float("inf") else None,
                    "resident_graphs": n.datasets,
                    "evicted_graphs": n.evicted,
                    "device_bytes": n.held_bytes,
                    "free_bytes": n.free_bytes,
                    "total_bytes": n.total_bytes,
                    "queue_depth": n.queue_depth,
                    "requests_waiting": self.board.waiting(n.index),
                    "computing": n.computing,
                    "last_error": fact.get("last_error"),
                    "reloads_pending": n.reloads_pending,
                    "requests_resent": n.resent,
                    "requests_lost": n.lost,
                    "startup_ms": fact.get("startup_ms"),
                    "warm_up": fact.get("warm_up"),
                    "plan_ms": fact.get("plan_ms"),
                    "last_restart_ms": fact.get("last_restart_ms"),
                    "standby": fact.get("standby"),
                }
            )
        return out

    # -- placement ----------------------------------------------------------------------------

    def _room(self, n: WorkerNumbers) -> tuple[int, int, int, int]:
        reserved = self.reserved[n.index]
        if self.backend(n.index) == "cpu":
            return -(n.held_bytes + reserved), 0, -n.queue_depth, -n.index
        return n.total_bytes - n.held_bytes - reserved, n.free_bytes - reserved, -n.queue_depth, -n.index

    def place(self) -> int:
        """The worker for a new dataset (see the module's docstring): among those that take requests
        (or all, while none does)."""
        numbers = [n for n in self.numbers() if n.state != "stopped"]
        if not numbers:
            raise ServiceUnavailableError("no worker is running; the service is shutting down.")
        candidates = [n for n in numbers if n.accepting] or numbers
        return max(candidates, key=self._room).index

    def place_shards(self, count: int) -> list[int]:
        """Workers for the ``count`` shards of a new graph: distinct ones, the most room first."""
        ranked = sorted((n for n in self.numbers() if n.state != "stopped"), key=self._room, reverse=True)
        if not ranked:
            raise ServiceUnavailableError("no worker is running; the service is shutting down.")
        return [ranked[i % len(ranked)].index for i in range(count)]

    def queued(self) -> int:
        """Requests waiting on every worker now (the board: sent by any API process and not answered
        yet), for MST_MAX_QUEUED_JOBS."""
        return sum(self.board.waiting(i) for i in range(len(self.links)))

    def total_bytes(self) -> list[int]:
        return [n.total_bytes for n in self.numbers()]
