"""A worker's death fails one job at most; its graphs come back in the background (issue 22).

Live servers (real ``python -m service``, real worker processes, real SIGKILLs), CPU backend.
Documented behaviour (docs/operations.md "Failures and restarts", service/runtime/links/link.py):

* only the request a worker was running when it died fails (``worker_lost``); every request
  sent to it and not started goes to the next worker, in order, and succeeds;
* requests it was computing as one run (identical jobs coalesced, one-shots batched) are each
  sent again alone; one that is running when a worker dies again fails for good;
* the next worker takes requests as soon as it is up; a job on a graph it has not reloaded yet
  waits for that reload (in its ``queue`` time) while jobs on graphs already back run.

A job "that kills its worker" is made with a test-only hook (``crash_hook/sitecustomize.py``):
its worker SIGKILLs itself when it computes a forest that holds the weight ``KILL_WEIGHT``.
"""

from __future__ import annotations

import io
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import gpu_core
from service.timing import parse_header
from tests.utils.scale import KILLS

from .conftest import ServerFactory
from .live import CRASH_HOOK_ENV, KILL_WEIGHT, OCTET, LiveServer, npz_body

FAST_HEARTBEAT = {"MST_HEARTBEAT_INTERVAL_S": "0.1", "MST_HEARTBEAT_TIMEOUT_S": "1.5"}
BIG = {"MST_MAX_EDGES": "5000000", "MST_MAX_UPLOAD_BYTES": "100000000"}

Edges = tuple[np.ndarray, np.ndarray, np.ndarray, int]


def random_graph(seed: int, n: int, m: int, kill: bool = False) -> Edges:
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m).astype(np.int32)
    dst = rng.integers(0, n, m).astype(np.int32)
    weight = rng.integers(-1000, 1000, m).astype(np.int32)
    if kill:
        weight[m // 2] = KILL_WEIGHT
    return src, dst, weight, n


def forest(graph: Edges) -> gpu_core.SpanningForest:
    src, dst, weight, n = graph
    return gpu_core.minimum_spanning_forest(src, dst, weight, num_vertices=n, backend="cpu")


def worker0(server: LiveServer) -> dict[str, Any]:
    body: dict[str, Any] = server.client.get("/readyz").json()["workers"][0]
    return body


def until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not {what} within {timeout} s"
        time.sleep(0.01)


def ready_after(server: LiveServer, old_pid: int, timeout: float = 60.0) -> dict[str, Any]:
    """Worker 0's record once a process other than ``old_pid`` accepts requests."""
    deadline = time.monotonic() + timeout
    while True:
        response = server.client.get("/readyz")
        worker: dict[str, Any] = response.json()["workers"][0]
        if response.status_code == 200 and worker["pid"] not in (None, old_pid):
            return worker
        assert time.monotonic() < deadline, f"no new worker within {timeout} s:\n{server.log()}"
        time.sleep(0.005)


def check_result(server: LiveServer, job_id: str, graph: Edges) -> None:
    edge_ids, weights, _ = server.result_npz(job_id)
    expected = forest(graph)
    assert np.array_equal(edge_ids, expected.edge_ids) and np.array_equal(weights, expected.weights)


def one_shot(client: httpx.Client, graph: Edges) -> httpx.Response:
    return client.post("/v1/mst", content=npz_body(*graph), headers={"content-type": OCTET, "accept": OCTET})


def check_one_shot(response: httpx.Response, graph: Edges) -> None:
    assert response.status_code == 200, response.text
    with np.load(io.BytesIO(response.content), allow_pickle=False) as npz:
        assert np.array_equal(npz["edge_ids"], forest(graph).edge_ids)


def stop_when_idle(server: LiveServer, pid: int) -> None:
    """SIGSTOP worker 0 once it has answered everything sent to it: an upload's COMMIT goes out
    behind its 201, and one still unanswered would count among the requests a test then expects."""
    until(lambda: worker0(server)["requests_waiting"] == 0, "worker 0 idle", timeout=30)
    os.kill(pid, signal.SIGSTOP)


def stopped_with_handed(server: LiveServer, count: int) -> None:
    """Wait until ``count`` requests wait for worker 0 (in its socket: it is SIGSTOPped)."""
    until(lambda: worker0(server)["requests_waiting"] == count, f"{count} requests waiting", timeout=30)


def test_a_job_that_kills_its_worker_fails_after_one_death_and_the_jobs_behind_it_run(
    server_factory: ServerFactory,
) -> None:
    server = server_factory(**CRASH_HOOK_ENV)
    killer, innocent = random_graph(1, 300, 2000, kill=True), random_graph(2, 300, 2000)
    killer_id, innocent_id = server.upload_npz(*killer)["id"], server.upload_npz(*innocent)["id"]
    pid = server.worker_pid()
    stop_when_idle(server, pid)  # everything below goes into its pipe, in this order
    job = server.submit(killer_id).json()["id"]
    behind = [server.submit(innocent_id).json()["id"] for _ in range(3)]
    stopped_with_handed(server, 4)
    os.kill(pid, signal.SIGCONT)

    failed = server.poll(job)
    assert failed["status"] == "failed" and failed["error"]["type"] == "worker_lost", failed
    worker = ready_after(server, pid)
    for job_id in behind:  # handed behind it, never started: sent to the next worker
        assert server.poll(job_id)["status"] == "succeeded"
        check_result(server, job_id, innocent)
    time.sleep(1.0)  # nothing runs it again: no second death
    worker = worker0(server)
    assert (worker["restarts"], worker["requests_lost"], worker["requests_resent"]) == (1, 1, 3), worker
    assert server.client.get(f"/v1/jobs/{job}").json()["status"] == "failed"
    assert server.client.get(f"/v1/graphs/{killer_id}").json()["residency"]["status"] == "resident"


def test_a_killer_in_a_batch_of_one_shots_fails_after_two_deaths_the_others_run(
    server_factory: ServerFactory,
) -> None:
    """The worker computes the one-shots waiting together as one union graph: when it dies, which
    one killed it is unknown. Each is sent again alone; the killer kills the next worker too, and
    fails then; the other members and the job queued behind them succeed."""
    server = server_factory(**CRASH_HOOK_ENV)
    members = [random_graph(10 + k, 50 + 7 * k, 200 + 30 * k) for k in range(3)]
    killer = random_graph(20, 80, 300, kill=True)
    innocent = random_graph(21, 300, 2000)
    innocent_id = server.upload_npz(*innocent)["id"]
    pid = server.worker_pid()
    stop_when_idle(server, pid)
    batch = [members[0], members[1], killer, members[2]]
    answers: list[httpx.Response | None] = [None] * len(batch)

    def post(i: int) -> None:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            answers[i] = one_shot(client, batch[i])

    threads = [threading.Thread(target=post, args=(i,)) for i in range(len(batch))]
    for t in threads:
        t.start()
    stopped_with_handed(server, len(batch))  # all in the pipe, back to back: one batch
    job = server.submit(innocent_id).json()["id"]
    stopped_with_handed(server, len(batch) + 1)
    os.kill(pid, signal.SIGCONT)
    for t in threads:
        t.join(120)

    killed = answers[2]
    assert killed is not None and killed.status_code == 503, killed
    assert killed.json()["code"] == "worker_lost", killed.text
    for graph, response in zip(batch, answers, strict=True):
        if graph is not killer:
            assert response is not None
            check_one_shot(response, graph)
    assert server.poll(job)["status"] == "succeeded"
    check_result(server, job, innocent)
    worker = worker0(server)
    assert (worker["restarts"], worker["requests_lost"]) == (2, 1), worker


def test_identical_killer_jobs_coalesced_fail_one_per_death(server_factory: ServerFactory) -> None:
    """Three identical jobs the worker answers with one computation, on a graph that kills it: each
    runs alone after the first death and fails at its own; the job behind them succeeds."""
    server = server_factory(**CRASH_HOOK_ENV)
    killer, innocent = random_graph(30, 300, 2000, kill=True), random_graph(31, 300, 2000)
    killer_id, innocent_id = server.upload_npz(*killer)["id"], server.upload_npz(*innocent)["id"]
    pid = server.worker_pid()
    stop_when_idle(server, pid)
    jobs = [server.submit(killer_id).json()["id"] for _ in range(3)]
    last = server.submit(innocent_id).json()["id"]
    stopped_with_handed(server, 4)
    os.kill(pid, signal.SIGCONT)
    for job_id in jobs:
        job = server.poll(job_id)
        assert job["status"] == "failed" and job["error"]["type"] == "worker_lost", job
    assert server.poll(last)["status"] == "succeeded"
    check_result(server, last, innocent)
    worker = worker0(server)
    assert (worker["restarts"], worker["requests_lost"]) == (4, 3), worker  # one job per death


@pytest.mark.slow
@pytest.mark.timeout(120 + 15 * KILLS)
def test_many_clients_and_many_sigkills_fail_at_most_one_request_per_kill(
    server_factory: ServerFactory,
) -> None:
    """Eight clients submit jobs (``?wait=``) and one-shots on four graphs while the worker is
    SIGKILLed KILLS times at random moments (tests/utils/scale.py: 9 in CI, more in the QA run): each
    kill fails at most one request (the one it was running); every other job and one-shot succeeds
    with its exact forest."""
    server = server_factory(**FAST_HEARTBEAT, **BIG)
    graphs = [
        random_graph(40, 500, 3_000),
        random_graph(41, 5_000, 30_000),
        random_graph(42, 30_000, 200_000),
        random_graph(43, 100_000, 600_000),
    ]
    ids = [server.upload_npz(*g)["id"] for g in graphs]
    expected = [forest(g) for g in graphs]
    stop = threading.Event()
    jobs: list[tuple[str, int]] = []  # (job id, graph index)
    shots: list[tuple[int, int]] = []  # (status code, graph index)
    errors: list[str] = []

    def client(seed: int) -> None:
        rng = np.random.default_rng(seed)
        with httpx.Client(base_url=server.url, timeout=120) as c:
            while not stop.is_set():
                k = int(rng.integers(0, 3 if seed % 2 else 4))
                if rng.random() < 0.7:
                    response = c.post(f"/v1/graphs/{ids[k]}/mst", params={"wait": 60})
                    if response.status_code not in (200, 202):
                        errors.append(response.text)
                        continue
                    jobs.append((response.json()["id"], k))
                else:
                    response = one_shot(c, graphs[min(k, 2)])
                    shots.append((response.status_code, min(k, 2)))
                    if response.status_code == 200:
                        with np.load(io.BytesIO(response.content), allow_pickle=False) as npz:
                            if not np.array_equal(npz["edge_ids"], expected[min(k, 2)].edge_ids):
                                errors.append(f"one-shot on graph {k}: wrong forest")
                    elif response.json().get("code") != "worker_lost":
                        errors.append(response.text)

    threads = [threading.Thread(target=client, args=(seed,)) for seed in range(8)]
    for t in threads:
        t.start()
    rng = np.random.default_rng(7)
    lost_per_kill = []
    kills = KILLS
    try:
        for _ in range(kills):
            time.sleep(float(rng.uniform(0.05, 0.4)))
            before = worker0(server)
            os.kill(before["pid"], signal.SIGKILL)
            after = ready_after(server, before["pid"])
            lost_per_kill.append(after["requests_lost"] - before["requests_lost"])
    finally:
        stop.set()
        for t in threads:
            t.join(180)
    assert not errors, errors[:5]
    assert all(lost <= 1 for lost in lost_per_kill), lost_per_kill

    failed_jobs = 0
    for job_id, k in jobs:
        job = server.poll(job_id, timeout=120)
        if job["status"] == "failed":
            assert job["error"]["type"] == "worker_lost", job
            failed_jobs += 1
            continue
        assert job["status"] == "succeeded", job
        result = job["result"]
        assert (result["num_edges"], result["num_components"], result["total_weight"]) == (
            expected[k].num_edges,
            expected[k].num_components,
            expected[k].total_weight,
        ), job
        check_result(server, job_id, graphs[k])
    failed_shots = sum(code != 200 for code, _ in shots)
    worker = worker0(server)
    print(
        f"\n{len(jobs)} jobs ({failed_jobs} failed), {len(shots)} one-shots ({failed_shots} failed), "
        f"{kills} kills: {worker['requests_lost']} requests lost, {worker['requests_resent']} re-sent"
    )
    assert worker["restarts"] == kills
    assert failed_jobs + failed_shots <= worker["requests_lost"] <= kills
    assert worker["requests_resent"] > 0  # some kills found requests waiting in the pipe
    assert len(jobs) > 2 * kills and len(shots) > kills  # the clients kept busy throughout


def test_jobs_wait_for_their_graphs_reload_while_graphs_already_back_answer(
    server_factory: ServerFactory,
) -> None:
    """After a kill the new worker takes requests as soon as it is up and reloads its graphs in
    the background, one at a time: those that queued jobs wait for first (smallest first), then the
    others. A job waits for its graph's reload (``Server-Timing: reload``) and does not fail; jobs
    on graphs already back answer while the big graph, which no job waits for, still reloads."""
    server = server_factory(MST_MAX_EDGES="10000000", MST_MAX_UPLOAD_BYTES="200000000")
    medium = random_graph(52, 50_000, 200_000)
    small = random_graph(51, 300, 2000)
    big = random_graph(50, 1_000_000, 4_000_000)
    medium_id = server.upload_npz(*medium)["id"]
    small_id = server.upload_npz(*small)["id"]
    big_id = server.upload_npz(*big)["id"]
    pid = server.worker_pid()
    os.kill(pid, signal.SIGKILL)
    until(lambda: server.client.get("/readyz").status_code == 503, "down")
    answers: dict[str, httpx.Response] = {}

    def submit(graph_id: str) -> None:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            answers[graph_id] = client.post(f"/v1/graphs/{graph_id}/mst", params={"wait": 60})

    threads = [threading.Thread(target=submit, args=(g,)) for g in (medium_id, small_id)]
    for t in threads:  # queued while no worker is up
        t.start()
    for t in threads:
        t.join(120)
    for graph_id, graph in ((medium_id, medium), (small_id, small)):
        answer = answers[graph_id]
        assert answer.json()["status"] == "succeeded", answer.text
        timing = parse_header(answer.headers.get("server-timing", ""))
        assert timing.get("queue", 0) > 0, answer.headers  # its graph's reload came first
        check_result(server, answer.json()["id"], graph)
    worker = worker0(server)
    assert worker["pid"] != pid and worker["reloads_pending"] == 1, worker  # the big graph's
    assert server.client.get(f"/v1/graphs/{big_id}").json()["residency"]["status"] == "loading"
    late = server.submit(big_id, wait=60)  # waits for the big reload, then runs
    assert late.json()["status"] == "succeeded", late.text
    check_result(server, late.json()["id"], big)
    assert worker0(server)["reloads_pending"] == 0 and worker0(server)["state"] == "ready"


def _alive(pid: int) -> bool:
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def test_a_warm_standby_takes_over_at_once_and_another_follows(server_factory: ServerFactory) -> None:
    """``MST_STANDBY_WORKER=on``: a warmed-up spare process waits beside the worker; when the worker
    is SIGKILLed the spare takes its place (it is the new worker), reloads its graphs and answers;
    a new spare starts once the worker is ready again. A spare that dies is replaced without
    touching the worker; none is left behind when the service stops."""
    server = server_factory(MST_STANDBY_WORKER="on")
    graph = random_graph(60, 300, 2000)
    graph_id = server.upload_npz(*graph)["id"]

    def warm_spare(not_pids: tuple[int, ...] = ()) -> int:
        until(
            lambda: (
                (s := worker0(server)["standby"]) is not None
                and s["state"] == "warm"
                and s["pid"] not in not_pids
            ),
            "a warm standby",
        )
        pid: int = worker0(server)["standby"]["pid"]
        return pid

    spare = warm_spare()
    pid = server.worker_pid()
    os.kill(pid, signal.SIGKILL)
    worker = ready_after(server, pid)
    assert worker["pid"] == spare and worker["restarts"] == 1, worker  # the spare took over
    job = server.submit(graph_id, wait=30).json()
    assert job["status"] == "succeeded", job
    check_result(server, job["id"], graph)
    second = warm_spare(not_pids=(pid, spare))

    os.kill(second, signal.SIGKILL)  # the spare dies: the worker goes on, another spare comes
    third = warm_spare(not_pids=(pid, spare, second))
    worker = worker0(server)
    assert (worker["pid"], worker["restarts"]) == (spare, 1), worker
    assert server.submit(graph_id, wait=30).json()["status"] == "succeeded"
    server.stop()
    until(lambda: not _alive(third) and not _alive(spare), "every worker process gone", timeout=15)


def test_sent_jobs_keep_their_order_and_weights_across_a_kill(server_factory: ServerFactory) -> None:
    """A job sent to a worker that dies before running it goes to the next worker ahead of what was
    sent after it: the job submitted before a weight update computes on the old weights, the one
    after it on the new ones."""
    server = server_factory()
    old = random_graph(70, 300, 2000)
    graph_id = server.upload_npz(*old)["id"]
    new_weight = np.random.default_rng(71).integers(-1000, 1000, 2000).astype(np.int32)
    new = (old[0], old[1], new_weight, old[3])
    buffer = io.BytesIO()
    np.save(buffer, new_weight, allow_pickle=False)
    pid = server.worker_pid()
    stop_when_idle(server, pid)
    before = server.submit(graph_id).json()["id"]
    stopped_with_handed(server, 1)
    put: list[httpx.Response] = []
    update = threading.Thread(
        target=lambda: put.append(
            server.client.put(
                f"/v1/graphs/{graph_id}/weights", content=buffer.getvalue(), headers={"content-type": OCTET}
            )
        )
    )
    update.start()  # sent behind the job (the worker is stopped: both wait in its socket)
    stopped_with_handed(server, 2)
    after = server.submit(graph_id).json()["id"]
    stopped_with_handed(server, 3)
    os.kill(pid, signal.SIGKILL)
    update.join(60)
    assert put and put[0].status_code == 200, put
    for job_id, graph in ((before, old), (after, new)):
        assert server.poll(job_id)["status"] == "succeeded"
        check_result(server, job_id, graph)
    assert worker0(server)["requests_resent"] == 3


def test_with_backend_auto_worker_0_starts_while_the_gpu_probe_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``MST_BACKEND=auto`` with CuPy installed probes for GPUs in a child process (seconds on a GPU
    host); worker 0 starts meanwhile, its backend left to itself, and is kept when the plan agrees.
    Here CuPy "is installed" for the supervisor only: the probe and the worker find no GPU and
    both settle on the CPU, so the early worker is kept as worker 0."""
    import asyncio
    import importlib.util

    from service.runtime.supervisor.supervisor import Supervisor
    from service.runtime.supervisor.worker_slot import WorkerSlot
    from service.settings import Settings

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "cupy" else real(name, *a)
    )
    settings = Settings(backend="auto", data_dir=tmp_path, cpu_workers=2)

    async def scenario() -> list[dict[str, Any]]:
        supervisor = Supervisor(settings)
        supervisor.begin()
        assert supervisor._head is not None
        early = supervisor._head.process.pid
        await supervisor.start()
        try:
            until_serving = time.monotonic() + 120
            slots = [s for s in supervisor.slots if isinstance(s, WorkerSlot)]
            while not all(s.current is not None and s.current.serving for s in slots):
                assert time.monotonic() < until_serving
                await asyncio.sleep(0.02)
            current = slots[0].current
            assert current is not None and current.pid == early  # the one started early
            return [s.facts() for s in supervisor.slots]
        finally:
            await supervisor.stop()

    workers = asyncio.run(scenario())
    assert [w["backend"] for w in workers] == ["cpu", "cpu"], workers
    assert all(w["plan_ms"] is not None and w["standby"] is None for w in workers), workers


@pytest.mark.parametrize("victim", ["worker", "service"])
def test_acknowledged_results_survive_a_sigkill_right_after_their_answers(
    server_factory: ServerFactory, victim: str
) -> None:
    """A job answered 200 keeps its result whatever dies right after the answer: the worker writes
    result files behind its replies, on a thread of its own, so a SIGKILL of the worker (or of the
    whole service) at that moment may leave some unwritten; the job's record is committed before
    the answer, and the next request for its result computes the forest again from the stored graph."""
    server = server_factory()
    graphs = [random_graph(40 + i, 4_000, 40_000) for i in range(8)]
    ids = [server.upload_npz(*g)["id"] for g in graphs]
    for graph_id in ids:  # each graph computed once: the jobs below run at full speed
        assert server.submit(graph_id, wait=30).status_code == 200
    pid = server.worker_pid()
    answers: dict[int, httpx.Response] = {}

    def submit(k: int) -> None:
        answers[k] = server.submit(ids[k % len(ids)], wait=30)

    threads = [threading.Thread(target=submit, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    os.kill(pid, signal.SIGKILL)  # at once: the last answers' files are likely being written
    if victim == "service":
        server.stop(signal.SIGKILL)
        server = server_factory(data_dir=server.data_dir)
    else:
        ready_after(server, pid)
    assert len(answers) == 16
    for k, answer in answers.items():
        assert answer.status_code == 200 and answer.json()["status"] == "succeeded", answer.text
        assert server.client.get(f"/v1/jobs/{answer.json()['id']}").json()["status"] == "succeeded"
        check_result(server, answer.json()["id"], graphs[k % len(graphs)])
