"""Faults against live servers (real processes, CPU backend): what a client was told stays true.

* 20 SIGKILLs of the worker in a row, some while an upload is being loaded, some while a job
  runs, some right after a job's answer (while its result file is written): every job ends
  final, none stays ``running``; ``/readyz`` says 503 while no worker is up, then 200; every
  acknowledged graph is listed and answers the same forest as the engine; each kill costs
  exactly one restart (no crash loop, no back-off for workers that were up);
* (a job that kills its worker, and what becomes of the jobs handed behind it: test_restarts.py);
* a result lost to a crash after its job succeeded is computed again when asked for; once
  the graph is deleted, that request is a 410;
* past MST_MAX_RESULT_BYTES the least recently used result files are removed (the newest stays);
  asking for one computes it again, or is a 410 once the graph's weights changed;
* SIGTERM: the running job finishes, queued ones run after the restart, SQLite is intact;
* a full data dir (a 4 MB tmpfs, when this runs as root): 507 ``storage_full``, nothing half
  written in the spool, SQLite intact, earlier graphs and results still there; made
  read-only (a bind mount of the spool's tmp folder): uploads are a 503
  ``storage_unavailable``, reads still answer.
"""

from __future__ import annotations

import io
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpu_core
from tests.utils.scale import KILLS

from .conftest import ServerFactory
from .live import OCTET, LiveServer, npz_body

FAST_HEARTBEAT = {"MST_HEARTBEAT_INTERVAL_S": "0.1", "MST_HEARTBEAT_TIMEOUT_S": "1.5"}
BIG = {"MST_MAX_EDGES": "5000000", "MST_MAX_UPLOAD_BYTES": "100000000"}
FINAL = ("succeeded", "failed", "cancelled")
#: uvicorn re-raises SIGTERM once it has shut down gracefully: the process then ends by the signal
CLEAN_EXIT = (0, -signal.SIGTERM)

Edges = tuple[np.ndarray, np.ndarray, np.ndarray, int]


def random_graph(seed: int, n: int, m: int) -> Edges:
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m).astype(np.int32)
    dst = rng.integers(0, n, m).astype(np.int32)
    return src, dst, rng.integers(-1000, 1000, m).astype(np.int32), n


def forest(graph: Edges) -> gpu_core.SpanningForest:
    src, dst, weight, n = graph
    return gpu_core.minimum_spanning_forest(src, dst, weight, num_vertices=n, backend="cpu")


def new_worker(server: LiveServer, old_pid: int, timeout: float = 60.0) -> bool:
    """Wait until a worker other than ``old_pid`` is ready; whether /readyz said 503 meanwhile."""
    saw_503 = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = server.client.get("/readyz")
        if response.status_code == 503:
            saw_503 = True
        elif response.json()["workers"][0]["pid"] != old_pid:
            return saw_503
        time.sleep(0.005)
    raise AssertionError(f"no new worker within {timeout} s:\n{server.log()}")


def sqlite_ok(data_dir: Path) -> None:
    db = sqlite3.connect(data_dir / "mst.sqlite3")
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        db.close()


def check_result(server: LiveServer, job_id: str, graph: Edges) -> None:
    edge_ids, weights, _ = server.result_npz(job_id)
    expected = forest(graph)
    assert np.array_equal(edge_ids, expected.edge_ids) and np.array_equal(weights, expected.weights)


@pytest.mark.slow
@pytest.mark.timeout(120 + 15 * KILLS)
def test_sigkills_in_a_row_lose_nothing_acknowledged(server_factory: ServerFactory) -> None:
    """KILLS SIGKILLs in a row (tests/utils/scale.py: 9 in CI), each scenario in turn: while an upload
    is parsed, while a job runs, right after a job's answer. Nothing acknowledged is lost."""
    server = server_factory(**FAST_HEARTBEAT, **BIG)
    acknowledged: dict[str, Edges] = {}
    jobs: dict[str, str] = {}  # job id -> graph id
    big = random_graph(0, 100_000, 600_000)
    acknowledged[server.upload_npz(*big)["id"]] = big
    big_id = next(iter(acknowledged))
    small = random_graph(1, 50, 200)
    acknowledged[server.upload_npz(*small)["id"]] = small
    small_id = list(acknowledged)[1]
    saw_503 = 0
    rng = np.random.default_rng(3)
    for kill in range(KILLS):
        pid = server.worker_pid()
        scenario = kill % 3
        if scenario == 0:  # while an upload is parsed and built
            graph = random_graph(100 + kill, 50_000, 300_000)
            with ThreadPoolExecutor(1) as pool:
                upload = pool.submit(
                    server.client.post,
                    "/v1/graphs",
                    content=npz_body(*graph),
                    headers={"content-type": OCTET},
                )
                time.sleep(float(rng.uniform(0.0, 0.25)))
                os.kill(pid, signal.SIGKILL)
                response = upload.result(timeout=60)
            assert response.status_code in (201, 503), response.text
            if response.status_code == 201:
                acknowledged[response.json()["id"]] = graph
            else:
                assert response.json()["code"] == "worker_lost"
        elif scenario == 1:  # while a job runs
            job_id = server.submit(big_id).json()["id"]
            jobs[job_id] = big_id
            server.poll(job_id, until=("running", *FINAL))
            os.kill(pid, signal.SIGKILL)
        else:  # right after a job's answer: while its result file is written behind it
            answer = server.submit(small_id, wait=30).json()
            os.kill(pid, signal.SIGKILL)
            jobs[answer["id"]] = small_id
            assert answer["status"] == "succeeded", answer
        saw_503 += new_worker(server, pid)

    ready = server.wait_ready()
    assert ready["workers"][0]["restarts"] == KILLS, ready  # one restart per kill: no crash loop
    assert saw_503 > 0, "/readyz never said 503 while the worker was down"
    for job_id, graph_id in jobs.items():
        job = server.poll(job_id, timeout=60)
        assert job["status"] in FINAL
        if job["status"] == "succeeded":  # its result, lost or not, answers the graph's forest
            check_result(server, job_id, acknowledged[graph_id])
        else:
            assert job["error"]["type"] == "worker_lost", job
    listed = {g["id"] for g in server.client.get("/v1/graphs").json()["graphs"]}
    assert listed == set(acknowledged)
    for graph_id, graph in acknowledged.items():
        job = server.submit(graph_id, wait=60).json()
        assert job["status"] == "succeeded", job
        check_result(server, job["id"], graph)
    assert server.stop() in CLEAN_EXIT, server.log()
    sqlite_ok(server.data_dir)


def test_a_result_lost_to_a_crash_is_computed_again_and_410_once_its_graph_is_gone(
    server_factory: ServerFactory,
) -> None:
    server = server_factory()
    graph = random_graph(11, 300, 2000)
    graph_id = server.upload_npz(*graph)["id"]
    job = server.submit(graph_id, wait=30).json()
    assert job["status"] == "succeeded"
    check_result(server, job["id"], graph)
    server.stop(signal.SIGKILL)  # a crash; then the file is lost too (a power cut before it was flushed)
    result = server.data_dir / "spool" / "results" / f"{job['id']}.npz"
    result.unlink()

    server = server_factory(server.data_dir)
    after = server.client.get(f"/v1/jobs/{job['id']}").json()
    assert after["status"] == "succeeded" and after["result"] == job["result"], after
    check_result(server, job["id"], graph)  # computed again from the stored graph
    assert result.exists()
    body = server.client.get(f"/v1/jobs/{job['id']}/result").json()  # JSON too, from the new file
    assert body["edge_ids"] == forest(graph).edge_ids.tolist()

    assert server.client.delete(f"/v1/graphs/{graph_id}").status_code == 204
    check_result(server, job["id"], graph)  # the file is there: the graph is not needed
    result.unlink()
    gone = server.client.get(f"/v1/jobs/{job['id']}/result")
    assert gone.status_code == 410 and gone.json()["code"] == "result_gone", gone.text
    assert server.client.get(f"/v1/jobs/{job['id']}").json()["status"] == "succeeded"


def test_a_one_request_job_whose_result_cannot_be_stored_names_the_job_and_keeps_it(
    server_factory: ServerFactory,
) -> None:
    """A job submitted with ``?wait=`` and a binary Accept succeeds, but its result file can be
    neither written nor computed again (no folder for results): the 503 names the job in
    ``Location`` (its id was given out nowhere else), the job is stored, succeeded, and its
    result is computed again once results can be written."""
    import shutil

    server = server_factory()
    graph = random_graph(11, 300, 2000)
    graph_id = server.upload_npz(*graph)["id"]
    results = server.data_dir / "spool" / "results"
    shutil.rmtree(results)
    results.write_bytes(b"")  # a file where the folder of result files was
    r = server.client.post(f"/v1/graphs/{graph_id}/mst", params={"wait": 30}, headers={"accept": OCTET})
    assert r.status_code == 503 and r.json()["code"] == "service_unavailable", r.text
    location = r.headers["location"]
    job_id = location.removeprefix("/v1/jobs/")
    assert location == f"/v1/jobs/{job_id}" and job_id in r.json()["detail"]
    # the worker's error is named, its paths on the server are not: they are in the service's log
    assert "NotADirectoryError" in r.text and str(server.data_dir) not in r.text, r.text
    assert f"{results}/.{job_id}.npz." in server.log()  # the part file written beside the result
    job = server.client.get(location).json()
    assert job["status"] == "succeeded" and job["result"]["num_components"] >= 1, job
    results.unlink()
    results.mkdir()
    check_result(server, job_id, graph)  # computed again, now that it can be stored


def _until(check: Any, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_results_past_the_cap_are_removed_oldest_first_and_computed_again(
    server_factory: ServerFactory,
) -> None:
    """MST_MAX_RESULT_BYTES: the files of the least recently used results go; their jobs stay
    succeeded, and asking for one computes it again (the same arrays), or 410 once the graph's
    weights changed. The newest result always stays."""
    graphs = [random_graph(20 + k, 300, 2000) for k in range(3)]
    server = server_factory(MST_MAX_RESULT_BYTES="1")  # any second result is over the cap
    results = server.data_dir / "spool" / "results"
    ids = [server.upload_npz(*g)["id"] for g in graphs]
    jobs = [server.submit(graph_id, wait=30).json()["id"] for graph_id in ids]
    files = [results / f"{job_id}.npz" for job_id in jobs]
    # the newest file is written behind its job's answer; on a busy disk (CI builds the image beside
    # the tests) its write-out can hold the writer thread for seconds, and the older files go when
    # it is stored
    assert _until(lambda: files[2].exists(), timeout_s=60), sorted(results.iterdir())
    assert _until(lambda: not files[0].exists() and not files[1].exists()), sorted(results.iterdir())
    assert files[2].exists()  # the newest stays
    check_result(server, jobs[0], graphs[0])  # computed again from the stored graph
    assert files[0].exists() and _until(lambda: not files[2].exists())  # now the newest: the other goes
    new = np.random.default_rng(5).integers(-9, 9, 2000).astype(np.int32)
    buffer = io.BytesIO()
    np.save(buffer, new, allow_pickle=False)
    put = server.client.put(
        f"/v1/graphs/{ids[1]}/weights", content=buffer.getvalue(), headers={"content-type": OCTET}
    )
    assert put.status_code == 200, put.text
    gone = server.client.get(f"/v1/jobs/{jobs[1]}/result")
    assert gone.status_code == 410 and gone.json()["code"] == "result_gone", gone.text
    for job_id in jobs:
        assert server.client.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded"
    check_result(server, jobs[2], graphs[2])


def test_sigterm_finishes_the_running_job_and_keeps_the_queued_ones(server_factory: ServerFactory) -> None:
    server = server_factory(**BIG)
    big = random_graph(5, 200_000, 1_500_000)
    graph_id = server.upload_npz(*big)["id"]
    first = server.submit(graph_id).json()["id"]
    server.poll(first, until=("running", *FINAL))
    queued = [server.submit(graph_id).json()["id"] for _ in range(3)]
    assert server.stop(signal.SIGTERM) in CLEAN_EXIT, server.log()
    sqlite_ok(server.data_dir)
    assert not list((server.data_dir / "spool" / "tmp").iterdir())

    server = server_factory(server.data_dir, **BIG)
    done = server.poll(first)
    assert done["status"] == "succeeded", done  # it finished before the service stopped
    check_result(server, first, big)
    for job_id in queued:  # queued jobs were kept and run after the restart
        assert server.poll(job_id, timeout=60)["status"] == "succeeded"


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB tmpfs (needs root; skips otherwise)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_data_dir_is_507_and_leaves_nothing_half_written(
    server_factory: ServerFactory, tiny_fs: Path
) -> None:
    server = server_factory(tiny_fs / "data")
    stored: dict[str, Edges] = {}
    codes: list[int] = []
    for seed in range(40):
        graph = random_graph(seed, 5_000, 40_000)  # about 480 kB as npz
        response = server.client.post("/v1/graphs", content=npz_body(*graph), headers={"content-type": OCTET})
        codes.append(response.status_code)
        if response.status_code == 201:
            stored[response.json()["id"]] = graph
        else:
            assert response.status_code == 507, response.text
            problem: dict[str, Any] = response.json()
            assert problem["code"] == "storage_full" and "full" in problem["detail"]
            if codes.count(507) >= 3:
                break
    assert 507 in codes and stored, codes
    assert not list((server.data_dir / "spool" / "tmp").iterdir()), "a partial spool file was left"
    listed = {g["id"] for g in server.client.get("/v1/graphs").json()["graphs"]}
    assert listed == set(stored)
    first = next(iter(stored))
    job = server.submit(first, wait=30).json()  # stored graphs still answer (the result may not fit)
    assert job["status"] == "succeeded"
    # not a byte left, so that SQLite cannot grow its WAL: deletions still answer (the data dir's
    # reserve is given up for the first, whose files make room for the next)
    _fill(tiny_fs)
    for graph_id in list(stored)[1:]:  # room again: uploads work
        deleted = server.client.delete(f"/v1/graphs/{graph_id}")
        assert deleted.status_code == 204, deleted.text
    assert (
        server.client.post(
            "/v1/graphs", content=npz_body(*random_graph(99, 5_000, 40_000)), headers={"content-type": OCTET}
        ).status_code
        == 201
    )
    check_result(server, job["id"], stored[first])

    # the spool turns read-only (a read-only bind mount of its tmp folder, where uploads land):
    # uploads are a 503 that says so, reads still answer
    spool_tmp = server.data_dir / "spool" / "tmp"
    subprocess.run(["mount", "--bind", str(spool_tmp), str(spool_tmp)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(spool_tmp)], check=True)
        refused = server.client.post(
            "/v1/graphs", content=npz_body(*random_graph(98, 500, 2000)), headers={"content-type": OCTET}
        )
        assert refused.status_code == 503, refused.text
        assert (
            refused.json()["code"] == "storage_unavailable"
            and "cannot be written" in refused.json()["detail"]
        )
        assert server.client.get(f"/v1/graphs/{first}").status_code == 200
        check_result(server, job["id"], stored[first])
    finally:
        subprocess.run(["umount", str(spool_tmp)], check=True)
    assert (
        server.client.post(
            "/v1/graphs", content=npz_body(*random_graph(97, 500, 2000)), headers={"content-type": OCTET}
        ).status_code
        == 201
    )
    server.stop()
    sqlite_ok(server.data_dir)


def _fill(mount: Path) -> None:
    """Take every byte left on the tmpfs ``mount`` (a file named filler)."""
    with open(mount / "filler", "wb", buffering=0) as filler, pytest.raises(OSError, match="No space left"):
        while True:
            filler.write(bytes(4096))
    assert os.statvfs(mount).f_bavail == 0


def test_deleting_a_graph_with_queued_jobs_on_a_full_disk_cancels_them(
    server_factory: ServerFactory, tiny_fs: Path
) -> None:
    """The graph's queued jobs are cancelled, as records written, when it is deleted: on a full
    disk too (the reserve makes room for them as for the deletion; they were a 507 before it, the
    graph left in place). Its worker is stopped (SIGSTOP) so that the jobs wait in the queue."""
    server = server_factory(tiny_fs / "data")
    graph, other = random_graph(21, 500, 3_000), random_graph(22, 500, 3_000)
    graph_id, other_id = server.upload_npz(*graph)["id"], server.upload_npz(*other)["id"]
    pid = server.worker_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        jobs = [server.submit(graph_id).json()["id"] for _ in range(4)]  # one handed, three queued
        _fill(tiny_fs)
        deleted = server.client.delete(f"/v1/graphs/{graph_id}")
        assert deleted.status_code == 204, deleted.text
        for job_id in jobs[1:]:
            job = server.client.get(f"/v1/jobs/{job_id}").json()
            assert job["status"] == "cancelled" and job["error"]["type"] == "graph_deleted", job
    finally:
        os.kill(pid, signal.SIGCONT)
    (tiny_fs / "filler").unlink()
    assert server.client.get(f"/v1/graphs/{graph_id}").status_code == 404
    job = server.submit(other_id, wait=30).json()
    assert job["status"] == "succeeded", job
    check_result(server, job["id"], other)
