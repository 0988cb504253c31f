"""Many jobs at once on one worker: its queue, and coalesced identical jobs (issue 12).

Documented behaviour (service/runtime/worker/loop.py, service/runtime/links/link.py):

* every job goes to its dataset's worker at once and waits in that worker's queue; it is
  ``queued`` (and can be cancelled) until the worker begins it, then ``running``;
* if the worker dies, the job it was running ends ``failed`` with ``worker_lost``; the jobs it
  had not started run on the new worker (sent again by their API process, or taken from the store);
* identical jobs waiting in the worker's queue are answered by one computation
  (``MST_COALESCE_JOBS``), each with its own result file (a hard link of the first).

The worker is kept busy with a job held running (``LiveServer.hold``) so that the jobs behind it
pile up.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.utils.graphs import random_graph

from .conftest import ServerFactory
from .live import CRASH_HOOK_ENV, LiveServer
from .test_queries import kruskal, upload
from .test_supervisor import readiness_after_loss


@contextmanager
def busy(server: LiveServer) -> Iterator[str]:
    """A job held running on worker 0 for the block's length; its id."""
    with server.hold() as weight:
        graph_id = server.upload_npz([0, 1], [1, 2], [1, weight])["id"]
        job_id: str = server.submit(graph_id).json()["id"]
        server.wait_held(weight)
        yield job_id


def _edge_ids(server: LiveServer, job_id: str) -> list[int]:
    edge_ids, _, _ = server.result_npz(job_id)
    return [int(i) for i in edge_ids]


def _linked_results(data_dir: Path) -> int:
    """Result files that share their inode with another (written once for coalesced jobs)."""
    return sum(p.stat().st_nlink > 1 for p in data_dir.rglob("j_*.npz"))


def _exact_forests_of_jobs_queued_at_once(server: LiveServer) -> list[dict[str, Any]]:
    graphs = [random_graph(seed, 2_000, 12_000, dtype="int32", num_weights=40) for seed in (1, 2)]
    ids = [upload(server, g) for g in graphs]
    trees = [kruskal(g) for g in graphs]
    order = [0, 0, 0, 1, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0]
    with busy(server) as held:
        jobs = [(which, server.submit(ids[which]).json()["id"]) for which in order]
    assert server.poll(held)["status"] == "succeeded"
    done = []
    for which, job_id in jobs:
        job = server.poll(job_id)
        assert job["status"] == "succeeded", job
        assert job["result"]["num_edges"] == len(trees[which])
        assert _edge_ids(server, job_id) == trees[which], (which, job_id)
        done.append(job)
    return done


def test_jobs_queued_at_once_give_exact_forests_and_share_computations(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    server = server_factory(tmp_path / "coalesced", **CRASH_HOOK_ENV)
    done = _exact_forests_of_jobs_queued_at_once(server)
    # the runs of identical jobs behind one another were each answered by one computation
    assert any(job["result"]["coalesced"] for job in done)
    assert _linked_results(tmp_path / "coalesced") >= 2


def test_without_coalescing_every_job_computes_and_the_forests_are_the_same(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    server = server_factory(tmp_path / "plain", MST_COALESCE_JOBS="false", **CRASH_HOOK_ENV)
    done = _exact_forests_of_jobs_queued_at_once(server)
    assert not any(job["result"]["coalesced"] for job in done)
    assert _linked_results(tmp_path / "plain") == 0


def test_a_queued_job_is_cancelled_a_running_one_is_not(server_factory: ServerFactory) -> None:
    server = server_factory(**CRASH_HOOK_ENV)
    graph = random_graph(3, 1_000, 6_000, dtype="int64", num_weights=30)
    small = upload(server, graph)
    with busy(server) as running:
        queued, last = (server.submit(small).json()["id"] for _ in range(2))
        assert server.client.get(f"/v1/jobs/{running}").json()["status"] == "running"
        refused = server.client.delete(f"/v1/jobs/{running}")
        assert refused.status_code == 409, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        cancelled = server.client.delete(f"/v1/jobs/{queued}")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled", cancelled.text
    tree = kruskal(graph)
    for job_id in (running, last):
        assert server.poll(job_id)["status"] == "succeeded"
    assert _edge_ids(server, last) == tree
    assert server.poll(queued)["status"] == "cancelled"  # its worker never began it
    assert server.client.get(f"/v1/jobs/{queued}/result").status_code == 409


def test_worker_killed_with_jobs_in_its_queue(server_factory: ServerFactory) -> None:
    server = server_factory(MST_HEARTBEAT_INTERVAL_S="0.1", MST_HEARTBEAT_TIMEOUT_S="1.5", **CRASH_HOOK_ENV)
    graph = random_graph(4, 1_500, 9_000, dtype="float64", num_weights=30)
    small = upload(server, graph)
    pid = server.worker_pid()
    with busy(server) as running:
        jobs = [server.submit(small).json()["id"] for _ in range(4)]
        assert [server.client.get(f"/v1/jobs/{j}").json()["status"] for j in jobs] == ["queued"] * 4
        os.kill(pid, signal.SIGKILL)
        readiness_after_loss(server, pid)
    lost = server.poll(running)  # the one it was running
    assert lost["status"] == "failed" and lost["error"]["type"] == "worker_lost", lost
    tree = kruskal(graph)
    for job_id in jobs:  # queued on it, not started: they run on the new worker
        assert server.poll(job_id)["status"] == "succeeded"
        assert _edge_ids(server, job_id) == tree
    worker = server.client.get("/readyz").json()["workers"][0]
    assert worker["requests_lost"] == 1 and worker["requests_resent"] >= 4, worker


@pytest.mark.gpu
def test_gpu_jobs_on_many_graphs_started_ahead_give_exact_forests(server_factory: ServerFactory) -> None:
    """Clients at once on distinct graphs: the GPU worker starts the forests of the jobs queued
    behind the one it answers (``MST_LAUNCH_AHEAD``) and the device computes them side by side;
    every job still gets exactly its graph's forest, minimum or maximum, and a weight update
    queued between jobs is seen by the jobs after it, not by those before."""
    import threading

    import httpx

    from tests.utils.graphs import DTYPES

    from .test_queries import npy_body

    server = server_factory(MST_BACKEND="gpu", MST_COALESCE_JOBS="false", MST_LAUNCH_AHEAD="8")
    graphs = [
        random_graph(seed, 1_500 + 211 * seed, 9_000 + 700 * seed, dtype=DTYPES[seed % len(DTYPES)],
                     num_weights=30, components=1 + seed % 3)
        for seed in range(8)
    ]  # fmt: skip
    ids = [upload(server, g) for g in graphs]
    expected = {(k, o): kruskal(g, objective=o) for k, g in enumerate(graphs) for o in ("min", "max")}
    failures: list[Any] = []

    def client(seed: int) -> None:
        rng = np.random.default_rng(seed)
        with httpx.Client(base_url=server.url, timeout=120) as http:
            for _ in range(12):
                k, objective = int(rng.integers(len(graphs))), ("min", "max")[int(rng.integers(2))]
                job = http.post(
                    f"/v1/graphs/{ids[k]}/mst", params={"wait": 60, "objective": objective}
                ).json()
                got = http.get(f"/v1/jobs/{job['id']}/result").json()
                if job.get("status") != "succeeded" or got["edge_ids"] != expected[(k, objective)]:
                    failures.append((k, objective, job))

    threads = [threading.Thread(target=client, args=(seed,)) for seed in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not failures, failures[:3]

    new = np.ascontiguousarray(np.asarray(graphs[0].weight)[::-1])
    before = [server.submit(graph_id).json()["id"] for graph_id in ids * 2]
    response = server.client.put(
        f"/v1/graphs/{ids[0]}/weights",
        content=npy_body(new),
        headers={"content-type": "application/octet-stream"},
    )
    assert response.status_code == 200, response.text
    after = [server.submit(graph_id).json()["id"] for graph_id in ids * 2]
    new_tree = kruskal(graphs[0], new)
    assert new_tree != expected[(0, "min")]
    for jobs, first_tree in ((before, expected[(0, "min")]), (after, new_tree)):
        for i, job_id in enumerate(jobs):
            assert server.poll(job_id)["status"] == "succeeded"
            k = i % len(ids)
            assert _edge_ids(server, job_id) == (first_tree if k == 0 else expected[(k, "min")]), (k, job_id)
