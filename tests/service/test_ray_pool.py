"""The Ray worker pool (``MST_WORKER_POOL=ray``) over HTTP: a live server whose two workers are Ray
actors (CPU) of a local Ray cluster the server starts.

* forests computed by the actors equal the engine's, Kruskal's and SciPy's; new graphs are placed by
  free memory (the first on actor 0, the second on actor 1); the one-shot route works too;
* point sets and weight updates take the same path (EMST equal to the engine's; a partial weight
  update, then forests on the new weights, also after every reload below);
* a graph uploaded with ``?shards=2`` has one shard on each actor and answers the forest of the
  whole graph (and again after the kill, the stuck actor and the restart below);
* an actor SIGKILLed while it runs a job (stopped first, so the job is surely in its hands): the
  job ends ``failed`` with ``worker_lost``; the jobs handed behind it (the handle keeps one request
  in flight, the others wait their turn) run on the new actor that replaces it (one restart); the
  graphs placed on it are loaded again from the spool and answer exactly; the other actor is
  untouched;
* an actor stopped (SIGSTOP) is killed once its heartbeat is older than MST_HEARTBEAT_TIMEOUT_S
  and replaced, its graphs reloaded;
* a restart of the server (SIGTERM, the Ray cluster stops with it, no actor process left) keeps
  every graph, resident again on the new actors;
* on a GPU host (marked ``gpu``): one actor per GPU, every GPU holds a graph, forests exact, an
  actor killed is replaced on its GPU and its graphs answer again;
* without Ray installed, ``MST_WORKER_POOL=ray`` is refused at start-up naming the extra, and the
  default pool never imports Ray.

One server (one Ray cluster start, a few seconds) serves the whole module; each test stands on its
own (it uploads what it needs, judges counters against what it read before, and the restart test
leaves the server running again), so the tests pass in any order or subset: alone, reversed, or
split between the processes of ``-n auto`` (``--dist=worksteal`` moves tests of a module to another
process, whose module fixtures are its own).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

import gpu_core
from service.settings import Settings
from tests.utils.graphs import EdgeGraph, random_graph

from .conftest import SHARED_ENV, ServerFactory
from .live import OCTET, REPO, LiveServer, npz_body
from .oracle import check_forest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="Ray is not installed (pip install 'mst-service[ray]')"
)

RAY_ENV = {
    **SHARED_ENV,
    "MST_WORKER_POOL": "ray",
    "MST_RAY_WORKERS": "2",
    # a cap per actor, so that free memory (and placement) follows what each holds, not the host's
    "MST_WORKER_MEMORY_BYTES": str(256 << 20),
    # a stuck actor is found in seconds (its heartbeat is an actor call answered beside the job);
    # not 3 s: on a loaded 2-core CI machine a new actor went 4-5 s without an answer and was
    # killed twice more (restarts 3 where the test kills one). Part of that was the handle's: a
    # ready actor's heartbeat age counted its whole start (test_a_ready_actors_heartbeat_...)
    "MST_HEARTBEAT_INTERVAL_S": "0.2",
    "MST_HEARTBEAT_TIMEOUT_S": "8",
}
#: uvicorn re-raises SIGTERM once it has shut down gracefully: the process then ends by the signal
CLEAN_EXIT = (0, -signal.SIGTERM)
GRAPHS = {seed: random_graph(seed, 400 + 100 * seed, 3000, dtype=np.int32) for seed in range(3)}


#: what the module's server holds, kept by the tests that add to it (emptied with each new server):
#: graph id -> its graph (its weights now)
uploaded: dict[str, EdgeGraph] = {}
#: point set id -> its points
point_sets: dict[str, np.ndarray] = {}
#: graph id -> its number of shards, for graphs sharded across the actors
sharded: dict[str, int] = {}


def forget_datasets() -> None:
    for held in (uploaded, point_sets, sharded):
        held.clear()


@pytest.fixture(scope="module")
def ray_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The module's server. The datasets recorded above are this server's only: a new server (the
    module run again in the session, or a part of it in another xdist process) starts empty."""
    forget_datasets()
    root = tmp_path_factory.mktemp("ray")
    server = LiveServer(root / "data", dict(RAY_ENV), root / "server.log").start(timeout=120)
    yield server
    server.stop()
    forget_datasets()


def workers(server: LiveServer) -> list[dict[str, Any]]:
    body: list[dict[str, Any]] = server.client.get("/readyz").json()["workers"]
    return body


def all_ready(server: LiveServer, timeout: float = 60.0) -> list[dict[str, Any]]:
    """/readyz says 200 once one worker is up: wait for every one."""
    deadline = time.monotonic() + timeout
    while True:
        pool = workers(server)
        if all(w["state"] == "ready" for w in pool):
            return pool
        assert time.monotonic() < deadline, f"not every actor is ready after {timeout} s: {pool}"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def gone(pids: list[int], timeout: float = 15.0) -> bool:
    """Whether every one of ``pids`` ends within ``timeout`` s (Ray's raylet stops its workers
    just after the server's exit)."""
    deadline = time.monotonic() + timeout
    while any(alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def upload(server: LiveServer, graph: EdgeGraph) -> dict[str, Any]:
    record = server.upload_npz(graph.src, graph.dst, graph.weight, graph.num_vertices)
    uploaded[record["id"]] = graph
    return record


def a_graph(server: LiveServer) -> tuple[str, EdgeGraph]:
    """A graph the server holds, not sharded (its weights can change): the first uploaded, or one
    uploaded now (where this test runs first, alone, or after the sharded graph's test only)."""
    for graph_id, graph in uploaded.items():
        if graph_id not in sharded:
            return graph_id, graph
    record = upload(server, GRAPHS[0])
    return record["id"], uploaded[record["id"]]


def a_point_set(server: LiveServer) -> str:
    """A point set the server holds: the first stored, or one stored now."""
    if not point_sets:
        points = np.random.default_rng(4).normal(0.0, 10.0, (300, 3))
        response = server.client.post("/v1/points", json={"points": points.tolist()})
        assert response.status_code == 201, response.text
        point_sets[response.json()["id"]] = points
    return next(iter(point_sets))


def check_job(server: LiveServer, graph_id: str, graphs: dict[str, EdgeGraph] | None = None) -> None:
    """A job on ``graph_id`` succeeds with its exact forest; ``graphs``: where the graph is known
    (the module server's ``uploaded`` by default)."""
    job = server.submit(graph_id, wait=60).json()
    assert job["status"] == "succeeded", job
    edge_ids, weights, _ = server.result_npz(job["id"])
    result = job["result"]
    graph = (uploaded if graphs is None else graphs)[graph_id]
    check_forest(edge_ids, weights, result["total_weight"], result["num_components"], graph)


def least_held(server: LiveServer) -> int:
    """The actor a new graph goes to: CPU workers rank by the fewest bytes held, then the shortest
    queue, the lowest index (``service.runtime.supervisor.room``); on fresh actors, 0 then 1."""
    pool = all_ready(server)
    return int(min(pool, key=lambda w: (w["device_bytes"], w["queue_depth"], w["index"]))["index"])


def test_two_actors_place_by_free_memory_and_compute_exact_forests(ray_server: LiveServer) -> None:
    pool = all_ready(ray_server)
    assert len(pool) == 2, pool
    assert {w["backend"] for w in pool} == {"cpu"}
    assert all(w["device"] == f"cpu on {socket.gethostname()}" for w in pool), pool
    pids = [w["pid"] for w in pool]
    assert len(set(pids)) == 2 and ray_server.proc is not None and ray_server.proc.pid not in pids
    for pid in pids:  # Ray's worker processes, not children of the API
        assert b"MSTWorker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    # other tests may have placed graphs already (this test need not be its module's first)
    expected, first = least_held(ray_server), upload(ray_server, GRAPHS[0])
    assert first["residency"]["worker"] == expected, first
    expected, second = least_held(ray_server), upload(ray_server, GRAPHS[1])
    assert second["residency"]["worker"] == expected, second
    assert first["residency"]["status"] == second["residency"]["status"] == "resident"
    for graph_id in uploaded:
        check_job(ray_server, graph_id)
    graph = GRAPHS[2]  # the one-shot route: not stored, computed on an actor
    body = {"src": graph.src.tolist(), "dst": graph.dst.tolist(), "weight": graph.weight.tolist()}
    response = ray_server.client.post("/v1/mst", json={**body, "num_vertices": graph.num_vertices})
    assert response.status_code == 200, response.text
    got = response.json()
    check_forest(got["edge_ids"], got["weights"], got["total_weight"], got["num_components"], graph)


def check_emst(server: LiveServer, points_id: str) -> None:
    response = server.client.post(f"/v1/points/{points_id}/jobs", json={"task": "emst"}, params={"wait": 60})
    assert response.status_code == 200 and response.json()["status"] == "succeeded", response.text
    result = server.client.get(f"/v1/jobs/{response.json()['id']}/result").json()
    tree = gpu_core.euclidean_mst(point_sets[points_id], backend="cpu")
    assert (result["src"], result["dst"]) == (tree.src.tolist(), tree.dst.tolist())
    assert result["weights"] == tree.weights.tolist()


def resident_count() -> int:
    """What the actors hold together: every graph and point set, a sharded graph once per shard."""
    return len(uploaded) + len(point_sets) + sum(k - 1 for k in sharded.values())


def test_point_sets_and_new_weights_go_through_the_actors(ray_server: LiveServer) -> None:
    points = np.random.default_rng(4).normal(0.0, 10.0, (300, 3))
    response = ray_server.client.post("/v1/points", json={"points": points.tolist()})
    assert response.status_code == 201, response.text
    point_sets[response.json()["id"]] = points
    check_emst(ray_server, response.json()["id"])
    graph_id, graph = a_graph(ray_server)  # new weights for some edges of an unsharded graph
    rng = np.random.default_rng(5)
    edge_ids = np.unique(rng.integers(0, graph.num_edges, 200))
    values = rng.integers(-50, 50, edge_ids.size).astype(graph.weight.dtype)
    response = ray_server.client.patch(
        f"/v1/graphs/{graph_id}/weights", json={"edge_ids": edge_ids.tolist(), "weights": values.tolist()}
    )
    assert response.status_code == 200, response.text
    weight = graph.weight.copy()
    weight[edge_ids] = values
    uploaded[graph_id] = graph.with_weight(weight)
    check_job(ray_server, graph_id)  # the new weights, here and after every reload below
    assert sum(w["resident_graphs"] for w in workers(ray_server)) == resident_count()


def test_a_graph_sharded_across_the_actors_answers_the_same_forest(ray_server: LiveServer) -> None:
    graph = random_graph(9, 2_000, 20_000, dtype=np.int32)
    response = ray_server.client.post(
        "/v1/graphs",
        params={"shards": 2},
        content=npz_body(graph.src, graph.dst, graph.weight, graph.num_vertices),
        headers={"content-type": OCTET},
    )
    assert response.status_code == 201, response.text
    record = response.json()
    assert record["shards"] == 2 and {p["worker"] for p in record["shard_residency"]} == {0, 1}, record
    uploaded[record["id"]] = graph
    sharded[record["id"]] = 2
    check_job(ray_server, record["id"])  # the union of the shard forests, merged: the whole forest
    assert sum(w["resident_graphs"] for w in workers(ray_server)) == resident_count()


def test_an_actor_killed_mid_job_fails_it_worker_lost_and_reloads_its_graphs(ray_server: LiveServer) -> None:
    third = upload(ray_server, GRAPHS[2])
    victim = third["residency"]["worker"]
    # a job answered: the upload's COMMIT, an actor call sent behind the 201, has been answered
    # too (one call in flight), so the job below is the one in flight when the actor stops
    check_job(ray_server, third["id"])
    before = all_ready(ray_server)  # both actors' pids known (this test may be its module's first)
    pid, other = before[victim]["pid"], before[1 - victim]
    assert pid is not None and other["pid"] is not None, before
    # counters against their values before: an actor may have been replaced by an earlier test
    restarts, lost, resent = (before[victim][k] for k in ("restarts", "requests_lost", "requests_resent"))
    os.kill(pid, signal.SIGSTOP)  # the job is sent to the actor (its one call in flight), never answered
    try:
        job_id = ray_server.submit(third["id"]).json()["id"]
        behind = [ray_server.submit(third["id"]).json()["id"] for _ in range(2)]  # waiting for their turn
        time.sleep(0.5)
        for waiting in (job_id, *behind):
            assert ray_server.client.get(f"/v1/jobs/{waiting}").json()["status"] in ("queued", "running")
    finally:
        os.kill(pid, signal.SIGKILL)
    job = ray_server.poll(job_id)
    assert job["status"] == "failed" and job["error"]["type"] == "worker_lost", job
    assert "was lost" in job["error"]["message"], job
    for queued in behind:  # never started: they run on the new actor
        assert ray_server.poll(queued)["status"] == "succeeded"

    now = wait_replaced(ray_server, victim, pid)
    assert now["restarts"] == restarts + 1 and "Ray actor died" in now["last_error"], now
    assert (now["requests_lost"], now["requests_resent"]) == (lost + 1, resent + 2), now
    assert gone([pid])
    untouched = workers(ray_server)[1 - victim]
    assert (untouched["pid"], untouched["restarts"]) == (other["pid"], other["restarts"]), untouched
    for graph_id in uploaded:  # the victim's graphs are back on it; every graph answers exactly
        residency = ray_server.client.get(f"/v1/graphs/{graph_id}").json()["residency"]
        assert residency["status"] == "resident", residency
        check_job(ray_server, graph_id)
    for points_id in point_sets:
        check_emst(ray_server, points_id)
    assert sum(w["resident_graphs"] for w in workers(ray_server)) == resident_count()


def wait_replaced(server: LiveServer, index: int, pid: int, timeout: float = 60.0) -> dict[str, Any]:
    """Worker ``index``'s record once an actor other than ``pid`` is ready in its place."""
    deadline = time.monotonic() + timeout
    while True:
        now = workers(server)[index]
        if now["state"] == "ready" and now["pid"] not in (None, pid):
            return now
        assert time.monotonic() < deadline, f"no new actor within {timeout} s:\n{server.log()}"
        time.sleep(0.05)


def test_a_stuck_actor_is_killed_for_its_heartbeat_and_replaced(ray_server: LiveServer) -> None:
    before = all_ready(ray_server)  # a pid for actor 0, also where this test is its module's first
    pid, restarts = before[0]["pid"], before[0]["restarts"]
    os.kill(pid, signal.SIGSTOP)  # alive to Ray, silent to the API
    try:
        now = wait_replaced(ray_server, 0, pid)
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    assert now["restarts"] == restarts + 1 and "no heartbeat" in now["last_error"], now
    assert gone([pid])
    for graph_id in uploaded:
        check_job(ray_server, graph_id)
    for points_id in point_sets:
        check_emst(ray_server, points_id)


@pytest.mark.slow
def test_a_restart_keeps_every_graph_and_leaves_no_actor_behind(ray_server: LiveServer) -> None:
    a_graph(ray_server)  # something to keep, also where this test runs first
    a_point_set(ray_server)
    pids = [w["pid"] for w in all_ready(ray_server)]
    assert ray_server.stop() in CLEAN_EXIT, ray_server.log()
    assert gone(pids), "an actor process outlived the server"
    # the module's server itself starts again (same data, new port, client and actors): the tests
    # that run after this one use it, as the module fixture's teardown stops it
    again = ray_server.start(timeout=120)
    listed = {g["id"] for g in again.client.get("/v1/graphs").json()["graphs"]}
    assert listed == set(uploaded)
    all_ready(again)
    for graph_id in uploaded:
        check_job(again, graph_id)
    for points_id in point_sets:
        check_emst(again, points_id)
    assert sum(w["resident_graphs"] for w in workers(again)) == resident_count()


class _Method:
    """An actor method's ``.remote()``: what ``answer`` returns (an awaitable), as Ray's would be."""

    def __init__(self, answer: Callable[[], Awaitable[Any]]) -> None:
        self._answer = answer

    def remote(self, *args: Any) -> Awaitable[Any]:
        return self._answer()


def test_a_ready_actors_heartbeat_counts_from_its_start_s_answer(tmp_path: Path) -> None:
    """A Ray worker's start is judged by MST_WORKER_START_TIMEOUT_S only, however long it takes (its
    imports on a loaded host); once it has answered, its heartbeat's age counts from that answer.
    Counted from the spawn, a start longer than MST_HEARTBEAT_TIMEOUT_S and a first heartbeat
    slower than the check's next look would have the ready actor killed for "no heartbeat". A
    stand-in actor whose start answers after 3 s and whose heartbeat never does makes that window
    wide."""
    import asyncio

    from service.runtime.board import Board
    from service.runtime.supervisor.plan import worker_config
    from service.runtime.supervisor.ray_workers import RaySlot

    settings = Settings(data_dir=tmp_path, backend="cpu", heartbeat_interval_s=0.2, heartbeat_timeout_s=2.0)
    info = {"pid": 1, "free_bytes": 1 << 30, "total_bytes": 1 << 30, "device": "cpu", "startup_ms": {}}

    async def scenario() -> tuple[float, str]:
        loop = asyncio.get_running_loop()
        board = Board.create(1, 1)
        slot = RaySlot(
            worker_config(settings, tmp_path, 1, 0, "cpu", None), {}, settings, board, lambda: None
        )
        actor = type("Actor", (), {})()
        actor.start = _Method(lambda: asyncio.sleep(3.0, result=info))  # a slow start
        actor.beat = _Method(loop.create_future)  # a first heartbeat that has not come back yet
        actor.reload_next = _Method(lambda: asyncio.sleep(0, result=False))
        slot.actor, slot.generation, slot.started_at = actor, 1, time.monotonic()
        await slot._start(actor, 1)
        slot.check(time.monotonic())  # the check's look right after the start's answer
        age, state = time.monotonic() - board.get(0, "heartbeat"), board.state(0)
        for task in list(slot._tasks):
            task.cancel()
        return age, state

    age, state = asyncio.run(scenario())
    assert state == "ready", state  # the start's answer made it ready, and the check left it so
    assert age < settings.heartbeat_timeout_s, age  # not judged stuck for the start's 3 s


def test_without_ray_the_ray_pool_is_refused_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "ray" else real(n, *a))
    with pytest.raises(ValidationError, match=r"pip install 'mst-service\[ray\]'"):
        Settings(worker_pool="ray")
    assert Settings().worker_pool == "local"


def visible_gpus() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


@pytest.mark.gpu
def test_gpu_actors_one_per_gpu_exact_and_one_killed_is_replaced(server_factory: ServerFactory) -> None:
    server = server_factory(
        MST_WORKER_POOL="ray",
        MST_BACKEND="gpu",
        MST_MAX_UPLOAD_BYTES=str(64 << 20),
        MST_WORKER_MEMORY_BYTES=str(4 << 30),  # the same free memory on every GPU: placement in order
    )
    pool = all_ready(server, timeout=300)
    gpus = visible_gpus()
    assert len(pool) == gpus >= 1 and {w["backend"] for w in pool} == {"gpu"}, pool
    assert len({w["device"] for w in pool}) == gpus, pool  # each names its CUDA_VISIBLE_DEVICES
    graphs: dict[str, EdgeGraph] = {}  # this server's own: not the module server's ``uploaded``
    for seed in range(gpus + 1):
        graph = random_graph(100 + seed, 5_000, 40_000, dtype=np.float32)
        record = server.upload_npz(graph.src, graph.dst, graph.weight, graph.num_vertices)
        assert record["residency"]["backend"] == "gpu", record
        graphs[record["id"]] = graph
    placed = {server.client.get(f"/v1/graphs/{g}").json()["residency"]["worker"] for g in graphs}
    assert placed == set(range(gpus)), placed  # most free memory first: every GPU holds one
    for graph_id in graphs:
        check_job(server, graph_id, graphs)
    pid = pool[0]["pid"]
    os.kill(pid, signal.SIGKILL)
    now = wait_replaced(server, 0, pid, timeout=300)
    assert now["restarts"] == 1 and now["backend"] == "gpu", now
    for graph_id in graphs:
        residency = server.client.get(f"/v1/graphs/{graph_id}").json()["residency"]
        assert residency["status"] == "resident", residency
        check_job(server, graph_id, graphs)


def test_settings_of_one_pool_are_refused_with_the_other() -> None:
    with pytest.raises(ValidationError, match="unset MST_GPUS"):
        Settings(worker_pool="ray", gpus=[0])
    with pytest.raises(ValidationError, match="the Ray pool has none"):
        Settings(worker_pool="ray", standby_worker="on")
    with pytest.raises(ValidationError, match="unset MST_CPU_WORKERS"):
        Settings(worker_pool="ray", cpu_workers=2)
    with pytest.raises(ValidationError, match="MST_RAY_ADDRESS and MST_RAY_WORKERS set, but MST_WORKER_POOL"):
        Settings(ray_address="auto", ray_workers=2)
    assert Settings(worker_pool="ray", ray_address="auto", ray_workers=0).ray_workers == 0


def test_the_default_pool_never_imports_ray() -> None:
    code = "import sys, service.app, service.runtime.supervisor; print(json.dumps('ray' in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", f"import json; {code}"], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) is False
