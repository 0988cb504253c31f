"""The worker process on its own: its socket protocol, spool files in and out, errors that pickle,
and its queue: requests of several connections in their senders' order, a dataset's own order
kept, loads, identical jobs coalesced, forests started ahead."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from gpu_core import errors as core
from service.errors import GraphNotFoundError, PayloadTooLargeError, WorkerInternalError
from service.runtime.board import Board
from service.runtime.supervisor.plan import spawn_worker, worker_config
from service.runtime.worker import process
from service.runtime.worker import protocol as worker
from service.runtime.worker.loop import WorkerLoop
from service.runtime.worker.server import Incoming
from service.settings import Settings
from service.storage.store import Store

from .live import npz_body


class Client:
    """One connection to a worker's socket, as an API process holds it."""

    def __init__(self, path: str, slot: int = 0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.sock.sendall(worker.framed((worker.HELLO, slot)))
        self.inbox = bytearray()
        self.ids = iter(range(1, 10**6))
        self.waiting: list[Any] = []
        self.last_id = 0
        assert self.next_message() == (worker.WELCOME,)

    def send(self, op: str, *args: Any, stamp: float | None = None) -> int:
        req_id = next(self.ids)
        self.sock.sendall(worker.framed((op, req_id, time.monotonic() if stamp is None else stamp, 0, *args)))
        self.last_id = req_id
        return req_id

    def next_message(self, timeout: float = 60.0) -> Any:
        self.sock.settimeout(timeout)
        while not self.waiting:
            chunk = self.sock.recv(1 << 20)
            assert chunk, "the worker closed the connection"
            self.inbox += chunk
            self.waiting.extend(worker.unframed(self.inbox))
        return self.waiting.pop(0)

    def call(self, op: str, *args: Any) -> tuple[bool, Any]:
        req_id = self.send(op, *args)
        got_id, ok, payload = self.next_message()
        assert got_id == req_id
        return ok, payload

    def note(self) -> BaseException | None:
        """The STORED note that follows the last request's reply: its error, or None."""
        head, req_id, error = self.next_message()
        assert (head, req_id) == (worker.STORED, self.last_id)
        return error


class Worker:
    """A worker process spawned as the supervisor spawns it, serving its socket."""

    def __init__(self, tmp: Path, backend: str = "cpu", serve: bool = True, **settings: Any) -> None:
        self.tmp = tmp
        run = tmp / "run"
        run.mkdir(exist_ok=True)
        Store(tmp / "data").close()  # the database the worker opens
        self.settings = Settings(data_dir=tmp / "data", max_edges=1000, heartbeat_interval_s=0.05, **settings)
        self.config = worker_config(self.settings, run, 2, 0, backend, None)
        self.board = Board.create(1, 2)
        self.spawned = spawn_worker(self.config, self.board)
        self.proc = self.spawned.process
        assert self.spawned.conn.poll(60), "the worker did not start"
        self.head, self.info = self.spawned.conn.recv()
        if serve and self.head == "ready":
            self.spawned.conn.send(("serve",))
            assert self.spawned.conn.poll(60) and self.spawned.conn.recv()[0] == "serving"
            self.client = Client(self.config.socket_path)

    def stop(self) -> None:
        self.spawned.conn.send(("stop",))
        self.proc.join(10)


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    wk = Worker(tmp_path_factory.mktemp("worker"))
    assert wk.head == "ready", wk.info
    assert wk.info["backend"] == "cpu" and wk.info["pid"] == wk.proc.pid and wk.info["total_bytes"] > 0
    yield wk
    wk.client.sock.close()
    wk.stop()
    assert wk.proc.exitcode == 0


def write(tmp: Path, name: str, body: bytes) -> str:
    path = tmp / name
    path.write_bytes(body)
    return str(path)


def test_heartbeat_moves_once_it_serves(w: Worker) -> None:
    first = w.board.get(0, "heartbeat")
    time.sleep(0.2)
    assert w.board.get(0, "heartbeat") > first and time.monotonic() - w.board.get(0, "heartbeat") < 1
    assert w.board.state(0) == "ready"


def test_load_compute_drop(w: Worker) -> None:
    c, tmp = w.client, w.tmp
    path = write(
        tmp, "g.npz", npz_body([0, 1, 2, 3], [1, 2, 0, 3], np.array([2, 1, 3, 9], dtype=np.int32), 6)
    )
    ok, summary = c.call(worker.LOAD, "g_1", path, "npz", None, None)
    assert ok, summary
    assert (summary["num_vertices"], summary["num_edges"], summary["weight_dtype"]) == (6, 4, "int32")
    result = str(tmp / "r.npz")
    ok, forest = c.call(worker.MST, "g_1", result, "mst", {}, None)
    assert ok and (forest["num_edges"], forest["total_weight"], forest["num_components"]) == (2, 3, 4)
    assert c.note() is None  # the file is written after the reply, then announced
    with np.load(result) as npz:
        assert npz["edge_ids"].tolist() == [0, 1] and npz["weights"].dtype == np.int32
    assert not [p for p in tmp.iterdir() if p.suffix == ".part"]
    ok, _ = c.call(worker.ABANDON, "g_1")  # never committed: dropped
    ok, err = c.call(worker.MST, "g_1", result, "mst", {}, None)
    assert not ok and isinstance(err, GraphNotFoundError)
    ok, _ = c.call(worker.PING)
    assert ok  # no note followed the failed request: the next message was this reply


def test_a_result_that_cannot_be_written_is_reported_in_its_note(w: Worker) -> None:
    c, tmp = w.client, w.tmp
    path = write(tmp, "g5.npz", npz_body([0, 1], [1, 2], np.array([2, 1], dtype=np.int32), 3))
    assert c.call(worker.LOAD, "g_5", path, "npz", None, None)[0]
    ok, forest = c.call(worker.MST, "g_5", str(tmp / "no-such-folder" / "r.npz"), "mst", {}, None)
    assert ok and forest["num_edges"] == 2  # the summary does not wait for the file
    error = c.note()
    assert isinstance(error, WorkerInternalError) and "FileNotFoundError" in str(error)
    assert "no-such-folder" not in str(error)  # a path on the server: in its log, not the answer
    assert not [p for p in tmp.iterdir() if p.suffix == ".part"]  # nothing half-written left
    assert c.call(worker.PING)[0]


def test_text_upload_gets_a_canonical_npz(w: Worker) -> None:
    c, tmp = w.client, w.tmp
    path = write(tmp, "g.mtx", b"%%MatrixMarket matrix coordinate real general\n3 3 2\n1 2 0.5\n2 3 1.5\n")
    canonical = str(tmp / "canonical.npz")
    ok, summary = c.call(worker.LOAD, "g_2", path, "mtx", None, canonical)
    assert ok and summary["weight_dtype"] == "float64"
    with np.load(canonical) as npz:
        assert npz["src"].tolist() == [0, 1] and npz["weight"].tolist() == [0.5, 1.5]
        assert int(npz["num_vertices"]) == 3


def test_errors_come_back_typed(w: Worker) -> None:
    c, tmp = w.client, w.tmp
    bad = write(tmp, "bad.npz", npz_body([0, 7], [1, 0], [1.0, 1.0], 3))
    ok, err = c.call(worker.LOAD, "g_3", bad, "npz", None, None)
    assert not ok and isinstance(err, core.VertexIdError) and (err.field, err.index) == ("src", 1)
    big = write(tmp, "big.npz", npz_body(np.zeros(1001, np.int64), np.ones(1001, np.int64), np.ones(1001)))
    ok, err = c.call(worker.LOAD, "g_4", big, "npz", None, None)
    assert not ok and isinstance(err, PayloadTooLargeError) and "1001" in str(err)
    ok, err = c.call(worker.ONESHOT, str(tmp / "missing.npz"), "npz", None, str(tmp / "o.npz"))
    assert not ok and isinstance(err, WorkerInternalError) and "FileNotFoundError" in str(err)
    ok, pong = c.call(worker.PING)
    assert ok and pong["probe_ms"] >= 0  # still serving after errors


def test_requests_of_two_connections_are_taken_in_their_senders_order(w: Worker) -> None:
    """A request written after another is never taken before it, whichever connection carried it:
    a graph's new weights sent by one API process after a job was queued through another do not
    reach that job (the queue's own order: ``test_the_queue_keeps_stamp_order...``)."""
    from service.storage.records import GraphRecord

    first, second = w.client, Client(w.config.socket_path, slot=1)
    path = write(w.tmp, "g6.npz", npz_body([0, 1, 2], [1, 2, 0], np.array([5, 1, 3], dtype=np.int64), 3))
    assert first.call(worker.LOAD, "g_6", path, "npz", None, None)[0]
    store = Store(w.tmp / "data", checkpoint=False)
    store.commit_graph(GraphRecord("g_6", time.time(), 3, 3, "int64", "npz", 1, 1), [("g_6", 0, 1)])
    store.close()
    first.call(worker.COMMIT, "g_6")
    weights = w.tmp / "w6.npy"
    np.save(weights, np.array([1, 9, 1], dtype=np.int64))
    # the job is written before the update (through another connection): it computes on the old weights
    first.send(worker.MST, "g_6", str(w.tmp / "r6a.npz"), "mst", {}, None)
    second.send(worker.WEIGHTS, "g_6", str(weights), "npy", False)
    job, update = first.next_message(), second.next_message()
    assert job[1] and job[2]["total_weight"] == 4  # the old weights: 1 + 3
    assert update[1] and update[2]["weights_version"] == 1 and update[2]["record"].weights_version == 1
    assert first.note() is None
    ok, after = first.call(worker.MST, "g_6", str(w.tmp / "r6b.npz"), "mst", {}, None)
    assert ok and after["total_weight"] == 2  # the new ones: 1 + 1
    second.sock.close()


def test_worker_exits_when_the_supervisor_goes_away(tmp_path: Path) -> None:
    wk = Worker(tmp_path, serve=False)
    assert wk.head == "ready"
    wk.spawned.conn.close()
    wk.proc.join(10)
    assert wk.proc.exitcode == 0


def test_start_failure_is_reported(tmp_path: Path) -> None:
    wk = Worker(tmp_path, backend="gpu-please", serve=False)
    assert wk.head == "failed" and "backend" in str(wk.info)
    wk.proc.join(10)


@pytest.mark.parametrize(
    ("busy", "idle_for", "spin_s", "writing", "expected"),
    [
        (True, None, 0.0, False, 0.0),  # work to do: read without waiting
        (False, None, 0.5, False, 0.0),  # just idle: poll while spinning
        (False, 0.1, 0.5, False, 0.0),
        (False, 0.7, 0.5, False, None),  # spun long enough: asleep until something comes
        (False, None, 0.0, False, None),
        (False, None, 0.5, True, None),  # a file being written: its word wakes the loop
    ],
)
def test_the_loop_polls_while_it_spins_then_sleeps(
    busy: bool, idle_for: float | None, spin_s: float, writing: bool, expected: float | None
) -> None:
    idle_since = None if idle_for is None else time.monotonic() - idle_for
    assert process._wait(busy, idle_since, spin_s, writing) == expected


# -- the queue, on its own (no process, no device) ---------------------------------------------


class _Holdings:
    def __init__(self, resident: set[str]) -> None:
        self.resident_keys = resident
        self.store = None
        self.status: dict[str, str] = {}
        self.versions: dict[str, int] = {}
        self.provisional: dict[str, object] = {}
        self.sizes: dict[str, int] = {}

    def resident(self, key: str) -> bool:
        return key in self.resident_keys

    def pending(self) -> list[str]:
        return []


def _loop(resident: set[str], coalesce: bool = True, launch_ahead: int = 8) -> WorkerLoop:
    config = SimpleNamespace(index=0, coalesce=coalesce, launch_ahead=launch_ahead, oneshot_batch_edges=0)
    fake_worker: Any = SimpleNamespace(config=config, backend="cpu")
    return WorkerLoop(fake_worker, _Holdings(resident), Board.create(1, 1), None, None)  # type: ignore[arg-type]


def _request(seq: int, op: str, *args: Any, stamp: float | None = None) -> Incoming:
    return Incoming(None, op, seq, float(seq) if stamp is None else stamp, list(args), seq)


def test_the_queue_keeps_stamp_order_and_a_datasets_order_and_lets_others_pass_a_load() -> None:
    loop = _loop(resident={"a", "b"})
    for request in (
        _request(3, worker.MST, "a", "r3", "mst", {}),
        _request(1, worker.MST, "z", "r1", "mst", {}),  # z is not resident: a load first
        _request(2, worker.MST, "z", "r2", "mst", {}),
        _request(4, worker.WEIGHTS, "b", "w", "npy", False),
    ):
        loop.add(request)
    assert [r.req_id for r in loop.queue] == [1, 2, 3, 4]  # stamp order, whatever the arrival

    def next_id() -> int:
        request = loop.next_request()
        assert request is not None
        return request.req_id

    assert next_id() == 3  # z's requests wait for its load; a's goes ahead
    loop._take(loop.queue[2])
    assert next_id() == 4
    loop._take(loop.queue[2])
    assert next_id() == 1  # nothing else to run: z's first request, its load now


def test_a_request_waiting_for_a_load_is_passed_at_most_max_overtaken_times() -> None:
    from service.runtime.worker.loop import MAX_OVERTAKEN

    loop = _loop(resident={"a"})
    loop.add(_request(0, worker.MST, "z", "r", "mst", {}))
    for i in range(1, MAX_OVERTAKEN + 5):
        loop.add(_request(i, worker.MST, "a", f"r{i}", "mst", {"k": i}))
    taken = []
    for _ in range(MAX_OVERTAKEN + 1):
        request = loop.next_request()
        assert request is not None
        taken.append(request.req_id)
        loop._take(request)
    assert taken[-1] == 0 and 0 not in taken[:-1]


def test_identical_jobs_behind_one_are_taken_together_until_another_request_of_their_dataset() -> None:
    loop = _loop(resident={"a", "b"})
    requests = [
        _request(1, worker.MST, "a", "r1", "mst", {}),
        _request(2, worker.MST, "b", "r2", "mst", {}),  # another dataset: not in between
        _request(3, worker.MST, "a", "r3", "mst", {}),
        _request(4, worker.MST, "a", "r4", "mst", {"objective": "max"}),  # a different job of a
        _request(5, worker.MST, "a", "r5", "mst", {}),
    ]
    for request in requests:
        loop.add(request)
    assert [r.req_id for r in loop._identical(requests[0])] == [1, 3]
    assert [r.req_id for r in _loop({"a", "b"}, coalesce=False)._identical(requests[0])] == [1]


def test_a_job_sent_again_joins_its_queued_twin() -> None:
    loop = _loop(resident={"a"})
    spec = worker.JobSpec("j_1", "a", 0.0, "mst", "{}", "", True)
    loop.add(_request(1, worker.MST, "a", "r", "mst", {}, spec))
    again = _request(2, worker.MST, "a", "r", "mst", {}, spec)
    again.conn = SimpleNamespace(closed=False, slot=0)  # type: ignore[assignment]
    loop.add(again)
    assert len(loop.queue) == 1 and loop.queue[0].also == [(again.conn, 2)]


def test_a_run_of_identical_jobs_is_stamped_without_the_requests_queued_between_them() -> None:
    """A worker that dies while computing jobs 1 and 3 together was not running job 2 (another
    dataset's, queued between them): the API process must not send it again suspect, or lose it
    if it was suspect already."""
    loop = _loop(resident={"a", "b"})
    conn = SimpleNamespace(closed=False, slot=0)
    requests = [
        _request(1, worker.MST, "a", "r1", "mst", {}),
        _request(2, worker.MST, "b", "r2", "mst", {}),
        _request(3, worker.MST, "a", "r3", "mst", {}),
    ]
    for request in requests:
        request.conn = conn  # type: ignore[assignment]
        loop.add(request)
    group = loop._identical(requests[0])
    loop._stamp(group)
    assert loop.board.running(0, 0) == [1, 3]
    loop._unstamp()
    assert loop.board.running(0, 0) == []
