"""The worker process on its own: the pipe protocol, spool files in and out, errors that pickle."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpu_core import errors as core
from service.errors import PayloadTooLargeError, WorkerInternalError
from service.runtime.worker import process
from service.runtime.worker import protocol as worker

from .live import npz_body

CTX = multiprocessing.get_context("spawn")


class Worker:
    def __init__(self, tmp: Path, max_edges: int = 1000) -> None:
        self.conn, child = CTX.Pipe()
        self.heartbeat = CTX.RawValue("d", 0.0)
        config = worker.WorkerConfig(0, "cpu", None, str(tmp), max_edges, 0.05)
        self.proc = CTX.Process(target=process.main, args=(child, self.heartbeat, config), daemon=True)
        self.proc.start()
        child.close()
        self.ids = iter(range(1, 10**6))

    def call(self, op: str, *args: Any) -> tuple[bool, Any]:
        req_id = next(self.ids)
        self.conn.send((op, req_id, *args))
        assert self.conn.poll(60), "the worker did not answer"
        got_id, ok, payload = self.conn.recv()
        assert got_id == req_id
        self.last_id = req_id
        return ok, payload

    def note(self) -> BaseException | None:
        """The STORED note that follows the last request's reply: its error, or None."""
        assert self.conn.poll(60), "no STORED note came"
        head, req_id, error = self.conn.recv()
        assert (head, req_id) == (worker.STORED, self.last_id)
        return error


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    tmp = tmp_path_factory.mktemp("worker")
    wk = Worker(tmp)
    assert wk.conn.poll(60)
    head, info = wk.conn.recv()
    assert head == "ready", info
    assert info["backend"] == "cpu" and info["pid"] == wk.proc.pid and info["total_bytes"] > 0
    wk.tmp = tmp  # type: ignore[attr-defined]
    yield wk
    ok, _ = wk.call(worker.STOP)
    assert ok
    wk.proc.join(10)
    assert wk.proc.exitcode == 0


def write(tmp: Path, name: str, body: bytes) -> str:
    path = tmp / name
    path.write_bytes(body)
    return str(path)


def test_heartbeat_moves(w: Worker) -> None:
    first = w.heartbeat.value
    time.sleep(0.2)
    assert w.heartbeat.value > first and time.monotonic() - w.heartbeat.value < 1


def test_load_compute_drop(w: Worker) -> None:
    tmp: Path = w.tmp  # type: ignore[attr-defined]
    path = write(
        tmp, "g.npz", npz_body([0, 1, 2, 3], [1, 2, 0, 3], np.array([2, 1, 3, 9], dtype=np.int32), 6)
    )
    ok, summary = w.call(worker.LOAD, "g_1", path, "npz", None, None)
    assert ok, summary
    assert (summary["num_vertices"], summary["num_edges"], summary["weight_dtype"]) == (6, 4, "int32")
    result = str(tmp / "r.npz")
    ok, forest = w.call(worker.MST, "g_1", result)
    assert ok and (forest["num_edges"], forest["total_weight"], forest["num_components"]) == (2, 3, 4)
    assert w.note() is None  # the file is written after the reply, then announced
    with np.load(result) as npz:
        assert npz["edge_ids"].tolist() == [0, 1] and npz["weights"].dtype == np.int32
    assert not [p for p in tmp.iterdir() if p.suffix == ".part"]
    ok, _ = w.call(worker.DROP, "g_1")
    ok, err = w.call(worker.MST, "g_1", result)
    assert not ok and isinstance(err, WorkerInternalError) and "not resident" in str(err)
    ok, _ = w.call(worker.PING)
    assert ok  # no note followed the failed request: the next message was this reply


def test_a_result_that_cannot_be_written_is_reported_in_its_note(w: Worker) -> None:
    tmp: Path = w.tmp  # type: ignore[attr-defined]
    path = write(tmp, "g5.npz", npz_body([0, 1], [1, 2], np.array([2, 1], dtype=np.int32), 3))
    assert w.call(worker.LOAD, "g_5", path, "npz", None, None)[0]
    ok, forest = w.call(worker.MST, "g_5", str(tmp / "no-such-folder" / "r.npz"))
    assert ok and forest["num_edges"] == 2  # the summary does not wait for the file
    error = w.note()
    assert isinstance(error, WorkerInternalError) and "FileNotFoundError" in str(error)
    assert "no-such-folder" not in str(error)  # a path on the server: in its log, not the answer
    assert not [p for p in tmp.iterdir() if p.suffix == ".part"]  # nothing half-written left
    assert w.call(worker.PING)[0]


def test_text_upload_gets_a_canonical_npz(w: Worker) -> None:
    tmp: Path = w.tmp  # type: ignore[attr-defined]
    path = write(tmp, "g.mtx", b"%%MatrixMarket matrix coordinate real general\n3 3 2\n1 2 0.5\n2 3 1.5\n")
    canonical = str(tmp / "canonical.npz")
    ok, summary = w.call(worker.LOAD, "g_2", path, "mtx", None, canonical)
    assert ok and summary["weight_dtype"] == "float64"
    with np.load(canonical) as npz:
        assert (
            npz["src"].tolist() == [0, 1]
            and npz["weight"].tolist() == [0.5, 1.5]
            and int(npz["num_vertices"]) == 3
        )


def test_errors_come_back_typed(w: Worker) -> None:
    tmp: Path = w.tmp  # type: ignore[attr-defined]
    bad = write(tmp, "bad.npz", npz_body([0, 7], [1, 0], [1.0, 1.0], 3))
    ok, err = w.call(worker.LOAD, "g_3", bad, "npz", None, None)
    assert not ok and isinstance(err, core.VertexIdError) and (err.field, err.index) == ("src", 1)
    big = write(tmp, "big.npz", npz_body(np.zeros(1001, np.int64), np.ones(1001, np.int64), np.ones(1001)))
    ok, err = w.call(worker.LOAD, "g_4", big, "npz", None, None)
    assert not ok and isinstance(err, PayloadTooLargeError) and "1001" in str(err)
    ok, err = w.call(worker.ONESHOT, str(tmp / "missing.npz"), "npz", None, str(tmp / "o.npz"))
    assert not ok and isinstance(err, WorkerInternalError) and "FileNotFoundError" in str(err)
    ok, pong = w.call(worker.PING)
    assert ok and pong["probe_ms"] >= 0  # still serving after errors


def test_worker_exits_when_the_api_goes_away(tmp_path: Path) -> None:
    wk = Worker(tmp_path)
    assert wk.conn.poll(60) and wk.conn.recv()[0] == "ready"
    wk.conn.close()
    wk.proc.join(10)
    assert wk.proc.exitcode == 0


def test_start_failure_is_reported(tmp_path: Path) -> None:
    conn: Connection
    conn, child = CTX.Pipe()
    config = worker.WorkerConfig(0, "gpu-please", None, str(tmp_path), 10, 0.05)
    proc = CTX.Process(target=process.main, args=(child, CTX.RawValue("d", 0.0), config), daemon=True)
    proc.start()
    child.close()
    assert conn.poll(60)
    head, err = conn.recv()
    assert head == "failed" and "backend" in str(err)
    proc.join(10)
    conn.close()


@pytest.mark.parametrize("spin_s", [0.0, 0.5])
def test_the_next_request_is_taken_whether_it_comes_while_polling_or_asleep(spin_s: float) -> None:
    import threading

    ours, theirs = CTX.Pipe()
    for delay in (0.01, 0.7):  # within the polling window, then after it (asleep in recv)
        timer = threading.Timer(delay, theirs.send, args=(("ping", delay),))
        started = time.monotonic()  # before the timer starts: a loaded machine may run it first
        timer.start()
        assert process._next_request(ours, spin_s) == ("ping", delay)
        assert time.monotonic() - started >= delay * 0.9
        timer.join()
    theirs.close()
    with pytest.raises(EOFError):
        process._next_request(ours, spin_s)  # the other end is gone: the serve loop returns


def test_while_the_writer_thread_writes_the_loop_waits_then_polls_instead_of_sleeping() -> None:
    """Every job's result file is written behind its reply: meanwhile the loop waits in the kernel
    for the next request or the writer thread's word that it is done (no poll loop taking turns
    with the writer for the interpreter's lock), and once the file is written it polls for
    ``spin_s``. Asleep in its read instead, the next request's write to the pipe had to wake it."""
    import threading

    ours, theirs = CTX.Pipe()
    polls = 0

    class Counted:  # our end of the pipe, its polls counted
        def fileno(self) -> int:
            return ours.fileno()

        def poll(self, timeout: float = 0.0) -> bool:
            nonlocal polls
            polls += 1
            return ours.poll(timeout)

    with process.writing(theirs) as writer:
        for delay, while_writing in ((0.05, True), (0.2, False)):
            polls = 0
            writer.behind(lambda: time.sleep(0.1))  # a result file that takes 0.1 s to write
            timer = threading.Timer(delay, theirs.send, args=(("ping", delay),))
            timer.start()
            request = process._next_request(Counted(), 0.5, writer)  # type: ignore[arg-type]
            timer.join()
            assert request == ("ping", delay)
            if while_writing:
                assert polls == 0, polls  # it came while the loop waited in the kernel
                while writer.busy():
                    time.sleep(0.01)
            else:
                assert polls > 100, polls  # the loop spun once the file was written
    ours.close()
    theirs.close()


def test_forests_start_ahead_for_the_mst_jobs_right_behind_on_other_graphs() -> None:
    """Before a GPU worker computes a job's forest it starts those of the ``MST_LAUNCH_AHEAD`` MST
    jobs queued right behind it (in its backlog and its pipe), each graph once, plain forests of
    resident graphs only; anything else in between ends the look ahead."""
    from collections import deque
    from types import SimpleNamespace

    launched: list[tuple[str, str]] = []

    class Graph:
        def __init__(self, name: str) -> None:
            self.name = name

        def launch_forest(self, *, objective: str = "min") -> bool:
            if objective not in ("min", "max"):
                raise ValueError(f"objective must be min or max, not {objective!r}")
            launched.append((self.name, objective))
            return True

    resident = SimpleNamespace(graphs={name: Graph(name) for name in "abcdefgh"})
    ours, theirs = CTX.Pipe()
    mst = worker.MST
    backlog: deque[Any] = deque(
        [
            (mst, 2, "b", "r2", "mst", {"objective": "max"}),
            (mst, 3, "a", "r3", "mst", {}),  # the first job's graph: started already
            (mst, 4, "c", "r4", "components", {}),  # another task
            (mst, 5, "d", "r5", "mst", {"exclude": [1]}),  # a what-if
            (mst, 6, "zz", "r6", "mst", {}),  # not resident (a reload comes first)
            (mst, 7, "e", "r7", "mst", {"objective": "median"}),  # its own turn words the error
        ]
    )
    theirs.send((mst, 8, "f", "r8", "mst", {}))  # waiting in the pipe: read into the backlog
    theirs.send((mst, 9, "g", "r9"))
    theirs.send((mst, 10, "h", "r10"))  # the ninth behind: past MST_LAUNCH_AHEAD
    time.sleep(0.2)
    first = ["a", "r1", "mst", {}]
    fake: Any = SimpleNamespace(**vars(resident), config=SimpleNamespace(launch_ahead=8))  # a worker's parts
    process._launch_ahead(fake, ours, backlog, first)
    assert launched == [("a", "min"), ("b", "max"), ("f", "min"), ("g", "min")]
    assert [request[1] for request in backlog] == list(range(2, 11))  # all still to be answered, in order

    launched.clear()
    fake.config.launch_ahead = 1  # the window counts the jobs behind, started or passed over
    process._launch_ahead(
        fake, ours, deque([(mst, 2, "c", "r2", "dendrogram", {}), (mst, 3, "b", "r3")]), first
    )
    assert launched == [("a", "min")]

    launched.clear()
    in_between = deque([(mst, 2, "b", "r2"), (worker.WEIGHTS, 3, "c", "w3"), (mst, 4, "d", "r4")])
    fake.config.launch_ahead = 8
    process._launch_ahead(fake, ours, in_between, first)
    assert launched == [("a", "min"), ("b", "min")]  # d waits: its turn comes after the update
    ours.close()
    theirs.close()
