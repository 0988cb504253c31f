"""What a worker holds of the datasets placed on it: loads, evictions, reloads, weights versions.

The store says which datasets are placed on which worker (:mod:`service.storage.graph_table`);
the worker alone decides what of them is in its memory now, and says so in the store
(``placements.status``): ``loading`` (placed, not loaded yet: at start-up every placed dataset
is reloaded in the background, between requests), ``resident``, ``evicted`` (dropped to make room
for others; the spool keeps it, and its next request loads it back first) or ``failed`` (its
reload failed; the error is kept).

A load that finds no room (the worker's admission answers 507) evicts idle datasets, least
recently used first, until the shortfall is freed, then tries again; with nothing left to evict
the 507 stands. Idle: no request queued for it, not the one being loaded, not a new upload whose
record is not committed yet (``provisional``: dropped if its API process goes before it commits).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from ...errors import InsufficientMemoryError, dataset_not_found
from ...storage.store import Store
from .ops import drop, load
from .sources import source_of
from .state import Worker

log = logging.getLogger("service.worker")

T = TypeVar("T")


class Holdings:
    """The datasets placed on one worker and what it holds of them (see the module's docstring)."""

    def __init__(self, worker: Worker, store: Store) -> None:
        self.worker = worker
        self.store = store
        self.index = worker.config.index
        #: every dataset placed here (committed), by key: loading, resident, evicted or failed
        self.status: dict[str, str] = {}
        self.errors: dict[str, str] = {}
        #: the weights version each resident graph holds (what its jobs record)
        self.versions: dict[str, int] = {}
        #: time.monotonic() of each dataset's last use: eviction takes the oldest first
        self.last_used: dict[str, float] = {}
        #: new uploads loaded and not yet committed, with the connection that loaded them
        self.provisional: dict[str, object] = {}
        #: something was loaded or dropped since the loop last said what is held (the board)
        self.changed = False
        #: each placed dataset's bytes as last known (loads of the smallest come first)
        self.sizes: dict[str, int] = {}

    # -- what is here -------------------------------------------------------------------------

    def resident(self, key: str) -> bool:
        return key in self.worker.graphs or key in self.worker.points

    def adopt_placements(self) -> None:
        """At start-up: every dataset the store places here is to be reloaded."""
        for placement in self.store.placed_on(self.index):
            self.status[placement.key] = "loading"
            self.sizes[placement.key] = placement.device_bytes
            self.store.set_residency(placement.key, "loading")

    def pending(self) -> list[str]:
        """The placed datasets not loaded yet, smallest first."""
        return [key for key, status in self.status.items() if status == "loading"]

    def held_bytes(self) -> int:
        return sum(g.nbytes for g in self.worker.graphs.values()) + sum(
            p.nbytes for p in self.worker.points.values()
        )

    def touch(self, key: str) -> None:
        self.last_used[key] = time.monotonic()

    def placed_here(self, key: str) -> bool:
        """Whether ``key`` is placed on this worker (asks the store about one it has not heard of:
        a dataset committed by an API process whose COMMIT has not arrived)."""
        if key in self.status or key in self.provisional:
            return True
        placement = self.store.placement(key)
        if placement is None or placement.worker != self.index:
            return False
        self.status[key] = "loading"
        return True

    # -- loads --------------------------------------------------------------------------------

    def ensure(self, key: str, busy: Collection[str] = ()) -> None:
        """Make a placed dataset resident (loaded from the spool, evicting idle ones for room);
        404 when it is not placed here (deleted)."""
        if self.resident(key):
            self.touch(key)
            return
        if not self.placed_here(key):
            raise dataset_not_found(key.partition(".s")[0])
        source = source_of(self.store, key)
        if source is None:
            self.forget(key)
            raise dataset_not_found(key.partition(".s")[0])
        started = time.perf_counter()
        summary = self.with_room(
            lambda: load(
                self.worker, key, source.path, source.fmt, source.num_vertices, None, source.weights_path
            ),
            keep={key, *busy},
        )
        self.versions[key] = source.weights_version
        self._now_resident(key, int(summary["device_bytes"]))
        log.info("worker %d loaded %s in %.0f ms", self.index, key, (time.perf_counter() - started) * 1e3)

    def load_new(
        self, key: str, args: list[Any], owner: object, busy: Collection[str] = ()
    ) -> dict[str, Any]:
        """A new upload (LOAD's arguments), loaded with room made for it; provisional until its
        record is committed (:meth:`commit`)."""
        summary = self.with_room(lambda: load(self.worker, key, *args), keep={key, *busy})
        self.changed = True
        self.provisional[key] = owner
        self.versions[key] = 0
        self.touch(key)
        return summary

    def commit(self, key: str) -> None:
        """A new upload's record is committed: the dataset is placed here for good."""
        if self.provisional.pop(key, None) is not None and self.resident(key):
            self.status[key] = "resident"

    def closed(self, owner: object) -> None:
        """A connection closed: drop the uploads it loaded and never committed."""
        for key in [k for k, o in self.provisional.items() if o is owner]:
            del self.provisional[key]
            if key not in self.status:
                drop(self.worker, key)
                self.changed = True

    def forget(self, key: str) -> None:
        """Drop a dataset (deleted, or a new upload refused)."""
        drop(self.worker, key)
        self.changed = True
        for table in (self.status, self.errors, self.versions, self.last_used, self.provisional):
            table.pop(key, None)

    def with_room(self, work: Callable[[], T], keep: Collection[str]) -> T:
        """``work()``; while it finds no room (507), evict idle datasets and try again."""
        while True:
            try:
                return work()
            except InsufficientMemoryError as exc:
                shortfall = (exc.needed_bytes or 0) - (exc.available_bytes or 0)
                if self.evict(max(shortfall, 1), keep) == 0:
                    raise

    def evict(self, needed: int, keep: Collection[str]) -> int:
        """Drop idle resident datasets, least recently used first, until ``needed`` bytes are
        freed (or none is left); the bytes freed."""
        idle = sorted(
            (
                key
                for key in [*self.worker.graphs, *self.worker.points]
                if key not in keep and key not in self.provisional and key in self.status
            ),
            key=lambda k: self.last_used.get(k, 0.0),
        )
        freed = 0
        for key in idle:
            if freed >= needed:
                break
            held = self.worker.graphs.get(key) or self.worker.points.get(key)
            freed += 0 if held is None else int(held.nbytes)
            drop(self.worker, key)
            self.changed = True
            self.status[key] = "evicted"
            self.store.set_residency(key, "evicted")
            log.info(
                "worker %d: evicted %s (idle %.1f s)",
                self.index,
                key,
                time.monotonic() - self.last_used.get(key, 0),
            )
        return freed

    def reload_next(self, busy: Collection[str]) -> bool:
        """Reload the smallest placed dataset not loaded yet (in the background, between requests);
        False when none is left."""
        pending = self.pending()
        if not pending:
            return False
        key = pending[0]
        try:
            self.ensure(key, busy)
        except InsufficientMemoryError:
            self.status[key] = "evicted"  # no room now: its next request loads it
            self.store.set_residency(key, "evicted")
        except Exception as exc:
            if key in self.status:
                self.status[key] = "failed"
                self.errors[key] = str(exc)
                self.store.set_residency(key, "failed", error=str(exc))
            log.error("worker %d could not reload %s: %s", self.index, key, exc)
        return True

    def sized(self, key: str, device_bytes: int) -> None:
        """A resident dataset's bytes changed (new weights, a model fitted beside a point set)."""
        self.store.set_residency(key, "resident", device_bytes)

    def _now_resident(self, key: str, device_bytes: int) -> None:
        self.changed = True
        self.sizes[key] = device_bytes
        self.status[key] = "resident"
        self.errors.pop(key, None)
        self.touch(key)
        self.store.set_residency(key, "resident", device_bytes)
