"""The supervisor: the workers of the service and, with several API processes, those processes too.

``python -m service`` runs it as a process of its own when ``MST_API_WORKERS`` asks for several
API processes (:mod:`.api_processes`), and inside the one API process otherwise (the app's
lifespan starts it). Either way it:

* recovers the store after the previous run (:meth:`Store.recover`) and checkpoints its WAL;
* plans the workers (:mod:`.plan`; worker 0 and the GPU probe may be spawned first of all,
  :meth:`Supervisor.begin`) and places every stored dataset on one of them, before they start;
* makes the board (:mod:`service.runtime.board`) and a private run folder (mode 0700) for the
  workers' sockets and for what it says of them (``workers.json``, :meth:`Supervisor.facts`);
* keeps each worker alive (:mod:`.worker_slot`): heartbeats, restarts, standbys;
* keeps the spool's result files under ``MST_MAX_RESULT_BYTES`` (:mod:`.result_cap`);
* starts CUDA MPS for the workers that share a GPU, before any of them (``MST_MPS``, :mod:`.mps`).

Design: docs/design/architecture.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

from ...settings import Settings
from ...storage.records import Placement
from ...storage.store import Store
from ..board import Board
from ..worker.sources import shard_key
from . import mps
from .plan import Probe, Spawned, first_config, keeps, needs_probe, plan_workers, spawn_worker
from .result_cap import ResultCap
from .worker_slot import WorkerSlot

log = logging.getLogger("service.runtime.supervisor")

#: the most workers a service runs (the board's size)
MAX_WORKERS = 64
#: the file in the run folder that says what the supervisor knows of each worker
FACTS = "workers.json"


class Slot(Protocol):
    """One worker as the supervisor keeps it: a local process (:class:`WorkerSlot`) or a Ray actor."""

    index: int
    restarts: int
    plan_ms: float | None

    async def start(self) -> None: ...

    async def stop(self, timeout: float = 10.0) -> None: ...

    def check(self, now: float) -> None: ...

    def facts(self) -> dict[str, Any]: ...


class Supervisor:
    """The workers of one service (see the module's docstring)."""

    def __init__(self, settings: Settings, api_slots: int = 1) -> None:
        self.settings = settings
        self.api_slots = api_slots
        self.run_dir = Path(tempfile.mkdtemp(prefix="mst-"))  # 0700: only this user reaches the sockets
        self.board = Board.create(MAX_WORKERS, api_slots)
        self.slots: list[Slot] = []
        self.store: Store | None = None
        self._head: Spawned | None = None
        self._probe: Probe | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._cap: ResultCap | None = None
        #: CUDA MPS for the workers sharing a GPU (``MST_MPS``), started before any worker
        self._mps: mps.MpsDaemon | None = None
        self._mps_checked = False

    @property
    def workers(self) -> int:
        return len(self.slots)

    def begin(self) -> None:
        """Spawn worker 0 and the GPU probe now, before the rest of the service is imported and built."""
        if self.settings.worker_pool != "local" or self._head is not None:
            return
        self._start_mps()
        self._head = spawn_worker(first_config(self.settings, self.run_dir, self.api_slots), self.board)
        self._probe = Probe(self.settings.backend) if needs_probe(self.settings) else None

    async def start(self) -> None:
        """Recover the store, plan and place, start every worker (they serve once warm)."""
        settings = self.settings
        store = Store(settings.data_dir, result_dir=settings.results_dir)
        self.store = store
        queued, failed = store.recover("The service stopped while the job was running.")
        if failed:
            log.warning(
                "%d job(s) were running when the service stopped; marked failed (worker_lost)", failed
            )
        if queued:
            log.info("%d queued job(s) run again", len(queued))
        if settings.worker_pool == "ray":
            await self._start_ray(store)
        else:
            self._start_mps()
            await self._start_local(store)
        self._monitor = asyncio.create_task(self._watch(), name="heartbeat-monitor")
        if settings.max_result_bytes:
            self._cap = ResultCap(store.result_dir, settings.max_result_bytes)

    def _start_mps(self) -> None:
        """Start CUDA MPS for the workers once, before the first of them (:mod:`.mps`)."""
        if not self._mps_checked:
            self._mps_checked = True
            self._mps = mps.start(self.settings, self.run_dir)

    async def _start_ray(self, store: Store) -> None:
        from .ray_workers import RaySlot
        from .ray_workers import plan as ray_plan

        started = time.perf_counter()
        planned = await asyncio.to_thread(ray_plan, self.settings, self.run_dir)
        store.replace_placements(place_stored(store, len(planned)))
        for config, options in planned:
            actor = RaySlot(config, options, self.settings, self.board, self.write_facts)
            actor.plan_ms = round((time.perf_counter() - started) * 1e3, 3)
            self.slots.append(actor)
        self.write_facts()
        for slot in self.slots:
            await slot.start()

    async def _start_local(self, store: Store) -> None:
        settings = self.settings
        started = time.perf_counter()
        head, probe = self._head, self._probe
        self._head = self._probe = None
        try:
            configs = await asyncio.to_thread(plan_workers, settings, self.run_dir, self.api_slots, probe)
        except BaseException:
            if head is not None:
                head.process.kill()
            raise
        if len(configs) > MAX_WORKERS:
            raise ValueError(f"{len(configs)} workers planned; at most {MAX_WORKERS} are supported.")
        store.replace_placements(place_stored(store, len(configs)))
        for config in configs:
            worker = WorkerSlot(config, settings, self.board, self.write_facts)
            if head is not None and config.index == 0 and keeps(config, head.config):
                worker.adopt(head)
                head = None
            worker.plan_ms = round((time.perf_counter() - started) * 1e3, 3)
            self.slots.append(worker)
        if head is not None:  # not the plan's worker 0 (another GPU): it goes
            head.process.kill()
        self.write_facts()
        for slot in self.slots:
            await slot.start()

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_interval_s)
            now = time.monotonic()
            for slot in self.slots:
                slot.check(now)

    async def stop(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        if self._cap is not None:
            self._cap.stop()
        await asyncio.gather(*(slot.stop() for slot in self.slots))
        if self.settings.worker_pool == "ray":
            from .ray_workers import shutdown

            await asyncio.to_thread(shutdown)
        if self.store is not None:
            self.store.close()
        if self._mps is not None:  # after the workers: its server ends once no client is left
            await asyncio.to_thread(self._mps.stop)
            self._mps = None
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def write_facts(self) -> None:
        """Say what the supervisor knows of the workers (``workers.json``, replaced whole)."""
        facts = {
            "workers": [slot.facts() for slot in self.slots],
            "restarts": [s.restarts for s in self.slots],
            # the workers reach an MPS daemon (ours, or an operator's) through the environment they inherit
            "mps": self._mps_checked and bool(os.environ.get(mps.PIPE_ENV)),
        }
        path = self.run_dir / FACTS
        part = path.with_suffix(".part")
        part.write_text(json.dumps(facts))
        os.replace(part, path)


def read_facts(run_dir: Path) -> dict[str, Any]:
    """What the supervisor last said of the workers (empty before it has)."""
    try:
        facts: dict[str, Any] = json.loads((run_dir / FACTS).read_text())
    except (OSError, ValueError):
        return {"workers": []}
    return facts


def place_stored(store: Store, workers: int) -> list[Placement]:
    """Every stored dataset placed on one of ``workers`` workers: each on the one holding the fewest
    bytes so far (the largest first), a sharded graph's shards on distinct workers as far as
    there are workers."""
    held = [0] * max(workers, 1)
    placements: list[Placement] = []
    for record in sorted(store.list_graphs(), key=lambda g: -g.device_bytes):
        count = max(record.shards, 1)
        ranked = sorted(range(len(held)), key=lambda w: (held[w], w))
        share = record.device_bytes // count
        for i in range(count):
            worker = ranked[i % len(ranked)]
            key = record.id if record.shards <= 1 else shard_key(record.id, i)
            placements.append(Placement(key, record.id, worker, "loading", share))
            held[worker] += share
    return placements
