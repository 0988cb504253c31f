"""Weight updates become durable in the order their graph's worker applied them.

The graph's worker is the one place its weights change: it applies updates in its queue's order
and, before each answer, renames the complete new weights over the previous ones and records the
new version (service/runtime/worker/weights.py). So whichever API processes sent them, the file in
place and the record hold the last update applied, and a restart brings back exactly those
weights. The worker is real (a process spawned as the supervisor spawns one), the store too.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from service.runtime.worker import protocol as worker
from service.storage.records import GraphRecord
from service.storage.store import Store

from .live import npz_body
from .test_worker import Client, Worker


def test_updates_from_two_connections_are_durable_in_the_order_applied(tmp_path: Path) -> None:
    wk = Worker(tmp_path)
    try:
        first, second = wk.client, Client(wk.config.socket_path, slot=1)
        graph = tmp_path / "g.npz"
        graph.write_bytes(npz_body([0, 1, 2], [1, 2, 0], np.array([5, 1, 3], dtype=np.int32), 3))
        assert first.call(worker.LOAD, "g_1", str(graph), "npz", None, None)[0]
        store = Store(tmp_path / "data", checkpoint=False)
        store.commit_graph(GraphRecord("g_1", time.time(), 3, 3, "int32", "npz", 1, 1), [("g_1", 0, 1)])
        first.call(worker.COMMIT, "g_1")
        bodies = []
        for i, values in enumerate(([1, 1, 1], [7, 8, 9])):
            path = tmp_path / f"w{i}.npy"
            np.save(path, np.array(values, dtype=np.int32))
            bodies.append(str(path))
        first.send(worker.WEIGHTS, "g_1", bodies[0], "npy", False)
        second.send(worker.WEIGHTS, "g_1", bodies[1], "npy", False)
        a, b = first.next_message(), second.next_message()
        assert a[1] and b[1], (a, b)
        assert (a[2]["weights_version"], b[2]["weights_version"]) == (1, 2)
        assert np.array_equal(np.load(store.weights_path("g_1")), [7, 8, 9])
        record = store.get_graph("g_1")
        assert record is not None and record.weights_version == 2
        ok, forest = first.call(worker.MST, "g_1", str(tmp_path / "r.npz"), "mst", {}, None)
        assert ok and forest["total_weight"] == 15  # the second update's: 7 + 8
        store.close()
        second.sock.close()
        first.sock.close()
    finally:
        wk.stop()
