"""Weight updates become durable in the order the worker applied them, whichever fsync ends first.

The worker applies updates in queue order (versions 1, 2, ...), but each update's body is fsynced
on its own; a large first update's fsync can end after a small second one's. The file in place and
the record must then hold the second (the latest acknowledged) weights, or a restart would bring
back the first. The worker's side is played by a stand-in that answers in version order, as the
real worker does (the end-to-end paths are in test_queries.py); the store is real.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np

from service.runtime.catalog import Catalog
from service.storage.records import GraphRecord
from service.storage.spool import Upload
from service.storage.store import Store


class _InOrderWorker:
    """Jobs.update_weights as the worker answers it: versions in arrival order."""

    def __init__(self) -> None:
        self.version = 0

    async def update_weights(self, graph_id: str, path: Path, fmt: str, partial: bool) -> dict[str, Any]:
        self.version += 1
        return {
            "weights_file": str(path),
            "weights_version": self.version,
            "weight_dtype": "int32",
            "device_bytes": 64,
        }


class _NoHolder:
    def holder(self, graph_id: str) -> None:
        return None


def _upload(store: Store, weights: np.ndarray[Any, Any], synced: asyncio.Future[None]) -> Upload:
    path = store.tmp_path(".npy")
    np.save(path, weights)
    return Upload(path, "npy", path.stat().st_size, "npy", synced)


def test_a_later_update_whose_fsync_ends_first_stays_the_durable_one(tmp_path: Path) -> None:
    store = Store(tmp_path / "data")
    store.add_graph(GraphRecord("g1", time.time(), 4, 3, "int32", "npz", 100, 64))
    catalog = Catalog(store, _NoHolder(), _InOrderWorker())  # type: ignore[arg-type]
    old, first_weights, second_weights = (np.full(3, v, dtype=np.int32) for v in (0, 1, 2))
    np.save(store.weights_path("g1"), old)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        first_synced, second_synced = loop.create_future(), loop.create_future()
        first = asyncio.ensure_future(
            catalog.update_weights("g1", "", _upload(store, first_weights, first_synced), False)
        )
        await asyncio.sleep(0)  # the first reaches the worker first: version 1
        second = asyncio.ensure_future(
            catalog.update_weights("g1", "", _upload(store, second_weights, second_synced), False)
        )
        await asyncio.sleep(0.01)
        second_synced.set_result(None)  # the second update's fsync ends first
        await asyncio.sleep(0.05)
        first_synced.set_result(None)
        records = await asyncio.gather(first, second)
        assert [r.weights_version for r in records] == [1, 2]

    asyncio.run(scenario())
    assert np.array_equal(np.load(store.weights_path("g1")), second_weights)
    record = store.get_graph("g1")
    assert record is not None and record.weights_version == 2
    store.close()
