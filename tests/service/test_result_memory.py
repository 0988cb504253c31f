"""Results in memory (service/runtime/pool/result_memory.py, service/runtime/worker/arena.py).

Documented behaviour: a job's forest is written by the worker at a place in the memory it shares
with the API process, and a request for the result is answered from there, the same bytes as
its file (which is still written behind the reply); places are taken in a ring, oldest first
out, never while pinned (the worker may write or read it; a response is sending from it), and
a view handed out pins its place until every slice of it is released.
"""

from __future__ import annotations

import gc
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from service.runtime.pool.result_memory import ResultMemory, forest_bytes
from service.runtime.worker.arena import ResultArena
from service.storage import npzio
from tests.utils.graphs import random_graph

from .conftest import ServerFactory
from .test_queries import kruskal, upload


def memory(size: int = 4096) -> ResultMemory:
    arena = ResultArena.create(size)
    assert arena is not None
    return ResultMemory(arena)


def fill(mem: ResultMemory, job_id: str, capacity: int, byte: int) -> tuple[int, int] | None:
    place = mem.reserve(job_id, capacity)
    if place is not None:
        mem.arena.place(place)[:] = bytes([byte]) * capacity
        mem.filled(job_id, capacity)
    return place


def test_places_go_round_the_ring_oldest_out_first() -> None:
    mem = memory(4096)
    assert fill(mem, "a", 1000, 1) == (0, 1000)
    assert fill(mem, "b", 1000, 2) == (1000, 1000)
    assert fill(mem, "c", 1000, 3) == (2000, 1000)
    assert fill(mem, "d", 1000, 4) == (3000, 1000)
    for job in "abcd":
        mem.written(job)
    # no room at the end (96 bytes): the ring wraps and takes the oldest place, a's
    assert fill(mem, "e", 1000, 5) == (0, 1000)
    assert not mem.holds("a") and mem.holds("b")
    view = mem.view("b")
    assert view is not None and bytes(view) == bytes([2]) * 1000
    del view
    gc.collect()
    assert fill(mem, "f", 1000, 6) == (1000, 1000)  # b is unpinned again: it goes next
    assert not mem.holds("b") and mem.holds("c") and mem.holds("e")


def test_a_pinned_place_is_never_taken() -> None:
    mem = memory(4096)
    fill(mem, "a", 1000, 1)  # still the worker's: its file is not written yet
    for job in "bcd":
        fill(mem, job, 1000, 2)
        mem.written(job)
    assert mem.reserve("e", 1000) is None  # only a's place could be taken, and it is pinned
    mem.written("a")
    view = mem.view("a")  # a response sends from it
    assert view is not None
    assert mem.reserve("e", 1000) is None
    piece = view[10:20]  # the event loop may keep a slice after the response's own view is gone
    del view
    gc.collect()
    assert mem.reserve("e", 1000) is None
    assert bytes(piece) == bytes([1]) * 10
    del piece
    gc.collect()
    assert mem.reserve("e", 1000) == (0, 1000)
    assert not mem.holds("a")


def test_released_and_oversized_places() -> None:
    mem = memory(4096)
    assert mem.reserve("big", 4096 // 4 + 1) is None  # over a quarter of the arena: by file
    assert mem.reserve("zero", 0) is None
    place = mem.reserve("a", 1000)
    assert place is not None and not mem.holds("a")  # nothing is served before the reply says so
    mem.release("a")  # the reply came without the archive (or the job failed)
    assert mem.view("a") is None
    assert mem.reserve("b", 1000) == (0, 1000)  # the ring is empty again: from the start
    mem.written("b")  # its file written, but the reply never said the archive was there
    assert not mem.holds("b") and mem.reserve("c", 1000) == (0, 1000)


def test_the_archive_written_in_place_is_the_file_archive() -> None:
    rng = np.random.default_rng(3)
    arrays = {"edge_ids": np.sort(rng.permutation(10_000)[:777]).astype(np.int64), "weights": rng.random(777)}
    file = io.BytesIO()
    npzio.write_npz(file, arrays)
    target = memoryview(bytearray(forest_bytes(777, 8)))
    size = npzio.write_npz_into(target, arrays)
    assert size == len(file.getvalue()) and bytes(target[:size]) == file.getvalue()
    with np.load(io.BytesIO(bytes(target[:size]))) as npz:
        assert np.array_equal(npz["edge_ids"], arrays["edge_ids"]) and np.array_equal(
            npz["weights"], arrays["weights"]
        )
    assert zipfile.ZipFile(io.BytesIO(bytes(target[:size]))).testzip() is None  # CRCs right
    assert npzio.write_npz_into(memoryview(bytearray(size - 1)), arrays) is None  # too small: by file


def _result(server, job_id: str, **headers: str):
    response = server.client.get(
        f"/v1/jobs/{job_id}/result", headers={"accept": "application/octet-stream", **headers}
    )
    assert response.status_code in (200, 206), response.text
    return response


@pytest.mark.parametrize("dtype", ["int32", "float64"])
def test_results_come_from_memory_with_the_bytes_of_their_file(
    server_factory: ServerFactory, dtype: str
) -> None:
    server = server_factory()
    graph = random_graph(7, 3000, 12_000, dtype=dtype, components=3)
    graph_id = upload(server, graph)
    expected = kruskal(graph)
    steps = []
    for _ in range(4):
        job = server.submit(graph_id, wait=30).json()
        assert job["status"] == "succeeded"
        response = _result(server, job["id"])
        steps.append("memory" in response.headers["server-timing"])
        with np.load(io.BytesIO(response.content)) as npz:
            assert npz["edge_ids"].tolist() == expected
            assert npz["weights"].dtype == np.dtype(dtype)
        # the file, read by a range request, holds the same archive
        ranged = _result(server, job["id"], range="bytes=0-")
        assert ranged.content == response.content
    # the first job of a graph goes by file (its forest's size is not known yet); then memory
    assert steps == [False, True, True, True]


def test_without_result_memory_every_result_is_a_file(server_factory: ServerFactory) -> None:
    server = server_factory(MST_RESULT_MEMORY_BYTES="0")
    graph = random_graph(2, 500, 2000)
    graph_id = upload(server, graph)
    for _ in range(3):
        job = server.submit(graph_id, wait=30).json()
        response = _result(server, job["id"])
        assert "memory" not in response.headers["server-timing"]
        with np.load(io.BytesIO(response.content)) as npz:
            assert npz["edge_ids"].tolist() == kruskal(graph)


def test_results_outlive_their_places_and_the_worker(server_factory: ServerFactory, tmp_path: Path) -> None:
    """A small arena: later jobs take the places of earlier ones, whose results then come from
    their files; a worker killed and started again writes into the same memory."""
    import os
    import signal

    graph = random_graph(11, 2000, 8000)
    room = forest_bytes(graph.num_vertices, 8)
    server = server_factory(MST_RESULT_MEMORY_BYTES=str(4 * room + 100))  # a quarter each: 4 places
    graph_id = upload(server, graph)
    expected = kruskal(graph)
    jobs, served = [], []
    for _ in range(10):  # each result asked for as its job finishes
        jobs.append(server.submit(graph_id, wait=30).json()["id"])
        served.append(_result(server, jobs[-1]))
    assert [("memory" in r.headers["server-timing"]) for r in served] == [False] + [True] * 9
    again = [_result(server, job) for job in jobs]  # the oldest places were taken since
    from_memory = ["memory" in r.headers["server-timing"] for r in again]
    assert not any(from_memory[:5]) and all(from_memory[-3:])
    for response in again:
        with np.load(io.BytesIO(response.content)) as npz:
            assert npz["edge_ids"].tolist() == expected
    os.kill(server.worker_pid(), signal.SIGKILL)
    after = server.submit(graph_id, wait=30).json()
    assert after["status"] == "succeeded"
    response = _result(server, after["id"])
    with np.load(io.BytesIO(response.content)) as npz:
        assert npz["edge_ids"].tolist() == expected
    assert _result(server, jobs[-1]).content == again[-1].content
