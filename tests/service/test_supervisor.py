"""Worker failures against a live server: SIGKILL mid-job, a stopped heartbeat; restart and reload.

Documented outcome (service/runtime/pool/handle.py, restarts.py): the job the worker was running
is ``failed`` with ``error.type == "worker_lost"`` (not re-queued); a job handed to it that had not
started runs on the next worker; the worker is restarted, reloads its graphs from the spool, and
``/readyz`` is 503 until it answers again.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpu_core

from .conftest import ServerFactory
from .live import LiveServer


def readiness_after_loss(server: LiveServer, old_pid: int, timeout: float = 60.0) -> tuple[bool, dict]:
    """(whether /readyz said 503 meanwhile, the readiness body once a new worker is ready)."""
    saw_503 = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = server.client.get("/readyz")
        if response.status_code == 503:
            saw_503 = True
            assert response.json()["status"] == "not_ready"
        elif response.json()["workers"][0]["pid"] != old_pid:
            return saw_503, response.json()
        time.sleep(0.005)
    raise AssertionError(f"no new worker within {timeout} s:\n{server.log()}")


def computing(server: LiveServer) -> int:
    """How many requests worker 0 is computing now (its run stamp, see service/runtime/pool/restarts.py)."""
    count = server.client.get("/readyz").json()["workers"][0]["computing"]
    assert isinstance(count, int)
    return count


def running_then_stopped(server: LiveServer, graph_id: str, pid: int) -> str:
    """Submit jobs until one is caught computing on the worker (not only handed to its pipe);
    leave the worker SIGSTOPped in the middle of it."""
    for _ in range(10):
        job_id = server.submit(graph_id).json()["id"]
        status = server.poll(job_id, until=("running", "succeeded", "failed"))["status"]
        deadline = time.monotonic() + 5
        while status == "running" and not computing(server) and time.monotonic() < deadline:
            time.sleep(0.001)
        os.kill(pid, signal.SIGSTOP)
        time.sleep(0.2)  # a reply already in the pipe would be processed by now
        job = server.client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] == "running" and status == "running" and computing(server):
            return job_id
        os.kill(pid, signal.SIGCONT)
    raise AssertionError("never caught a job running")


def test_sigkill_mid_job_fails_it_with_worker_lost_and_the_worker_comes_back(
    server_factory: ServerFactory,
) -> None:
    server = server_factory(
        MST_MAX_EDGES=str(10_000_000),
        MST_MAX_UPLOAD_BYTES=str(200_000_000),
        MST_HEARTBEAT_INTERVAL_S="0.1",
        MST_HEARTBEAT_TIMEOUT_S="1.5",
        MST_DISPATCH_DEPTH="1",  # the job queued behind stays queued (tests/service/test_pipelining.py: > 1)
    )
    rng = np.random.default_rng(5)
    n, m = 500_000, 2_000_000
    src, dst = rng.integers(0, n, m).astype(np.int32), rng.integers(0, n, m).astype(np.int32)
    weight = rng.integers(-1000, 1000, m).astype(np.int32)
    big = server.upload_npz(src, dst, weight, n)
    small = server.upload_npz([0, 1, 2], [1, 2, 0], [5, 6, 7])
    expected = gpu_core.minimum_spanning_forest(src, dst, weight, num_vertices=n, backend="cpu")
    pid = server.worker_pid()

    job_id = running_then_stopped(server, big["id"], pid)
    queued = server.submit(small["id"]).json()["id"]
    os.kill(pid, signal.SIGKILL)

    saw_503, ready = readiness_after_loss(server, pid)
    assert saw_503, "/readyz should answer 503 while no worker is up"
    assert ready["workers"][0]["restarts"] == 1
    lost = server.poll(job_id)
    assert lost["status"] == "failed" and lost["error"]["type"] == "worker_lost", lost
    assert "exited (exit code -9)" in lost["error"]["message"]
    assert lost["result"] is None
    # the job queued behind it was not lost: it runs on the new worker
    assert server.poll(queued)["status"] == "succeeded"

    # the graphs were reloaded from the spool and still answer
    again = server.submit(big["id"], wait=60).json()
    assert again["status"] == "succeeded", again
    assert again["result"]["total_weight"] == expected.total_weight
    assert again["result"]["num_components"] == expected.num_components
    edge_ids, _, _ = server.result_npz(again["id"])
    assert np.array_equal(edge_ids, expected.edge_ids)
    assert server.client.get(f"/v1/graphs/{big['id']}").json()["residency"]["status"] == "resident"
    assert server.client.get(f"/v1/jobs/{job_id}/result").status_code == 409

    # a worker that stops beating (SIGSTOP) is killed and replaced too; the job handed to it had
    # not started (the stopped process never read it): it runs on the next worker
    pid = server.worker_pid()
    os.kill(pid, signal.SIGSTOP)
    stuck = server.submit(small["id"]).json()["id"]
    assert server.poll(stuck, until=("running", "succeeded", "failed"))["status"] == "running"
    _, ready = readiness_after_loss(server, pid, timeout=30)
    assert ready["workers"][0]["restarts"] == 2
    assert "no heartbeat" in ready["workers"][0]["last_error"]
    stuck_job = server.poll(stuck)
    assert stuck_job["status"] == "succeeded" and stuck_job["result"]["total_weight"] == 11, stuck_job
    assert server.submit(small["id"], wait=30).json()["result"]["total_weight"] == 11
    metrics = server.client.get("/metrics").text
    assert 'mst_worker_restarts{worker="0"} 2.0' in metrics
    assert 'mst_worker_requests_lost{worker="0"} 1.0' in metrics  # the job it was computing
    assert 'mst_worker_requests_resent{worker="0"} 1.0' in metrics  # the stuck one (handed, not started)


@pytest.mark.timeout(60)  # before the fix the reader waited forever for the rest of a cut request
def test_requests_larger_than_the_pipe_are_written_whole_without_blocking(tmp_path: Path) -> None:
    """The API's end of a worker's pipe is non-blocking once the event loop watches it (uvloop does
    that). Requests larger than the pipe holds (a one-shot's parsed edges, a long ``exclude``) are
    written in parts as the worker reads, each whole and in order; before, ``Connection.send``
    raised midway and the next request followed the part already written."""
    import asyncio
    import multiprocessing

    from service.runtime.pool.interface import worker_config
    from service.runtime.pool.processes import ProcessHandle
    from service.settings import Settings

    settings = Settings(data_dir=tmp_path, backend="cpu")
    requests = [list(range(i, i + 150_000)) for i in range(6)]  # ~0.75 MB pickled each

    def read_all(conn: Any) -> list[Any]:
        got: list[Any] = []
        while len(got) < len(requests) and conn.poll(10):
            got.append(conn.recv())
        return got

    async def scenario() -> tuple[list[Any], int]:
        handle = ProcessHandle(worker_config(settings, 0, "cpu", None), settings, lambda _: None)
        handle._loop = asyncio.get_running_loop()
        parent, child = multiprocessing.Pipe(duplex=True)
        os.set_blocking(parent.fileno(), False)
        handle._conn, handle.state = parent, "ready"
        for payload in requests:
            handle._send("mst", payload)
        pending = len(getattr(handle, "_unsent", b""))  # the pipe took a part: the rest waits for it
        got = await asyncio.to_thread(read_all, child)
        parent.close()
        child.close()
        return got, pending

    got, pending = asyncio.run(scenario())
    assert pending > 0
    assert [(op, payload) for op, _, payload in got] == [("mst", payload) for payload in requests]
    assert [req_id for _, req_id, _ in got] == sorted(req_id for _, req_id, _ in got)


@pytest.mark.timeout(60)  # before the fix the worker was taken for lost (the reader's recv raised midway)
def test_replies_larger_than_the_pipe_are_read_whole(tmp_path: Path) -> None:
    """A batch of one-shots sends its forests back in one write, larger than the pipe holds: the
    API's non-blocking end gets it in parts and must take each reply once it is all there."""
    import asyncio
    import multiprocessing

    from service.runtime.pool.interface import worker_config
    from service.runtime.pool.processes import ProcessHandle
    from service.runtime.worker import process
    from service.settings import Settings

    settings = Settings(data_dir=tmp_path, backend="cpu")
    forests = [np.arange(i, i + 150_000) for i in range(6)]  # 1.2 MB each

    async def scenario() -> list[Any]:
        loop = asyncio.get_running_loop()
        handle = ProcessHandle(worker_config(settings, 0, "cpu", None), settings, lambda _: None)
        handle._loop = loop
        parent, child = multiprocessing.Pipe(duplex=True)
        os.set_blocking(parent.fileno(), False)
        handle._conn, handle.state = parent, "ready"
        futures = [handle._send("ping") for _ in forests]
        requests = [child.recv() for _ in forests]
        loop.add_reader(parent.fileno(), handle._readable, parent, None, handle.generation, bytearray())
        replies = [(req_id, True, {"edge_ids": f}) for (_, req_id), f in zip(requests, forests, strict=True)]
        writing = asyncio.ensure_future(asyncio.to_thread(process._send_all, child, replies))
        got = await asyncio.wait_for(asyncio.gather(*futures), 30)
        await writing
        loop.remove_reader(parent.fileno())
        parent.close()
        child.close()
        return got

    got = asyncio.run(scenario())
    assert [np.array_equal(g["edge_ids"], f) for g, f in zip(got, forests, strict=True)] == [True] * 6


def test_messages_are_taken_once_whole() -> None:
    from service.runtime.worker.protocol import framed
    from service.runtime.worker.protocol import unframed as _messages

    stream = b"".join(framed(("r", i, "x" * i)) for i in range(50))
    inbox, got = bytearray(), []
    for start in range(0, len(stream), 7):  # in pieces that cut headers and payloads anywhere
        inbox += stream[start : start + 7]
        got += _messages(inbox)
    assert got == [("r", i, "x" * i) for i in range(50)] and not inbox
    inbox = bytearray(b"\x00\x00\x00\x03abc" + framed(("ok",)))  # not a pickle: its error, then the rest
    first, second = _messages(inbox)
    assert isinstance(first, Exception) and second == ("ok",)
