"""The whole service across restarts (graceful and crash), and the API process never importing CuPy."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from tests.utils.graphs import random_graph

from .conftest import ServerFactory
from .live import CRASH_HOOK_ENV, OCTET, REPO, LiveServer
from .oracle import check_forest


def wait_resident(server: LiveServer, graph_id: str, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        graph = server.client.get(f"/v1/graphs/{graph_id}").json()
        if graph["residency"]["status"] == "resident":
            return graph
        assert graph["residency"]["status"] == "loading", graph
        assert time.monotonic() < deadline, graph
        time.sleep(0.02)


def test_restart_keeps_graphs_and_jobs(server_factory: ServerFactory, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = server_factory(data, **CRASH_HOOK_ENV)
    g_int = random_graph(21, 200, 900, dtype="int64", num_weights=None, components=2)
    g_f32 = random_graph(22, 150, 700, dtype="float32", num_weights=25, isolated=4)
    a = server.client.post(
        "/v1/graphs",
        json={
            "src": g_int.src.tolist(),
            "dst": g_int.dst.tolist(),
            "weight": g_int.weight.tolist(),
            "num_vertices": g_int.num_vertices,
        },
    )
    assert a.status_code == 201
    a_id = a.json()["id"]
    b_id = server.upload_npz(g_f32.src, g_f32.dst, g_f32.weight, g_f32.num_vertices)["id"]
    c = server.client.post(
        "/v1/graphs",
        params={"format": "edgelist"},
        content=b"0 1 4\n1 2 2\n2 0 3\n",
        headers={"content-type": OCTET},
    )
    c_id = c.json()["id"]
    hold = server.hold_weight()
    h_id = server.upload_npz([0, 1], [1, 2], [1, hold])["id"]
    done = server.submit(a_id, wait=30).json()
    before_json = server.client.get(f"/v1/jobs/{done['id']}/result").json()
    graphs_before = server.client.get("/v1/graphs").json()["graphs"]

    # crash the service while one job runs (held) and one is queued behind it
    with server.hold(hold):
        running = server.submit(h_id).json()["id"]
        server.wait_held(hold)
        queued = server.submit(c_id).json()["id"]
        assert server.stop(signal.SIGKILL) == -signal.SIGKILL
        # the old worker, released when this block ends, finds its supervisor gone and exits
        server = server_factory(data, **CRASH_HOOK_ENV)
    listed = server.client.get("/v1/graphs").json()["graphs"]
    assert [g["id"] for g in listed] == [g["id"] for g in graphs_before]
    for graph in listed:
        resident = wait_resident(server, graph["id"])
        old = next(g for g in graphs_before if g["id"] == graph["id"])
        assert {k: v for k, v in resident.items() if k != "residency"} == {
            k: v for k, v in old.items() if k != "residency"
        }
    assert server.client.get(f"/v1/jobs/{done['id']}").json() == done
    assert server.client.get(f"/v1/jobs/{done['id']}/result").json() == before_json
    lost = server.poll(running)
    assert lost["status"] == "failed" and lost["error"]["type"] == "worker_lost"
    requeued = server.poll(queued)
    assert requeued["status"] == "succeeded" and requeued["result"]["total_weight"] == 5

    # graceful restart: everything again, and the reloaded graphs compute the same forests
    assert server.stop() in (0, -signal.SIGTERM)  # uvicorn re-raises SIGTERM after a clean shutdown
    assert "Traceback" not in server.log()
    server = server_factory(data)
    assert server.client.get(f"/v1/jobs/{requeued['id']}").json() == requeued
    for graph_id, g in ((a_id, g_int), (b_id, g_f32)):
        wait_resident(server, graph_id)
        job = server.submit(graph_id, wait=30).json()
        edge_ids, weights, headers = server.result_npz(job["id"])
        check_forest(
            edge_ids, weights, json.loads(headers["x-mst-total-weight"]), job["result"]["num_components"], g
        )
    again = server.submit(a_id, wait=30).json()
    assert server.client.get(f"/v1/jobs/{again['id']}/result").json()["edge_ids"] == before_json["edge_ids"]
    assert not list((data / "spool" / "tmp").iterdir())


POISON = """\
import os
with open(os.environ["CUPY_IMPORT_LOG"], "a") as log:
    log.write(f"{os.getpid()}\\n")
raise ImportError("cupy is poisoned by the test: this process must not import it")
"""


def test_the_api_process_never_imports_cupy(server_factory: ServerFactory, tmp_path: Path) -> None:
    """A stand-in ``cupy`` records every process that imports it; the API process must not be one."""
    (tmp_path / "stub" / "cupy").mkdir(parents=True)
    (tmp_path / "stub" / "cupy" / "__init__.py").write_text(POISON)
    log = tmp_path / "cupy-imports.log"
    log.touch()
    path = os.pathsep.join([str(tmp_path / "stub"), str(REPO), os.environ.get("PYTHONPATH", "")])
    # auto: the service must probe for GPUs, which it may only do in a child process
    server = server_factory(MST_BACKEND="auto", PYTHONPATH=path, CUPY_IMPORT_LOG=str(log))
    g = server.upload_npz([0, 1, 2], [1, 2, 0], [1.0, 2.0, 3.0])
    assert server.submit(g["id"], wait=30).json()["status"] == "succeeded"
    assert server.client.post("/v1/mst", json={"src": [0], "dst": [1], "weight": [1]}).status_code == 200
    assert server.client.get("/metrics").status_code == 200
    importers = {int(line) for line in log.read_text().split()}
    assert server.proc is not None
    assert importers, "the stand-in was never imported: the test would prove nothing"
    assert server.proc.pid not in importers
    assert server.client.get("/readyz").json()["workers"][0]["backend"] == "cpu"


def test_importing_the_service_modules_imports_no_cupy(tmp_path: Path) -> None:
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text("raise ImportError('poisoned')\n")
    code = (
        "import sys, service.app, service.client, service.openapi_export, service.__main__\n"
        "service.app.create_app().openapi()\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'cupy'], 'cupy was imported'\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_route_is_the_apps_own() -> None:
    """The routers' routes sit in the app's own list, in the routers' order: no included router
    whose routes FastAPI would match a second time on every request."""
    from service.api import graphs, health, jobs, mst, point_models, points
    from service.app import create_app

    app = create_app()
    assert not [route for route in app.routes if hasattr(route, "original_router")]
    routers = (graphs.router, points.router, point_models.router, jobs.router, mst.router, health.router)
    routes = [route for router in routers for route in router.routes]
    assert app.routes[-len(routes) :] == routes  # after FastAPI's own (/openapi.json, /docs, ...)


def test_bad_settings_exit_with_a_message(tmp_path: Path) -> None:
    env = {**os.environ, "MST_PORT": "99999", "MST_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "service"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "port" in done.stderr.lower()


def test_bad_settings_never_echo_an_api_key(tmp_path: Path) -> None:
    secret = "a-secret-key-0123456789"
    env = {**os.environ, "MST_API_KEYS": f"{secret},short", "MST_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "service"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "MST_API_KEYS: Value error, key 2 of MST_API_KEYS" in done.stderr
    assert secret not in done.stderr and "short" not in done.stderr.replace("at least", "")


def test_retired_settings_still_start_with_one_warning_each(server_factory: ServerFactory) -> None:
    """A deployment that still sets MST_FAST_LANE or MST_API_PROCESSES (both removed) starts and
    serves as one without them, and its log says once for each that it is gone and why."""
    server = server_factory(MST_FAST_LANE="false", MST_API_PROCESSES="4")
    graph = server.upload_npz([0, 1, 2], [1, 2, 0], [3, 1, 2])
    assert server.submit(graph["id"], wait=30).json()["status"] == "succeeded"
    log = server.log()
    for name in ("MST_FAST_LANE", "MST_API_PROCESSES"):
        warnings = [line for line in log.splitlines() if f"WARNING service: {name} is set" in line]
        assert len(warnings) == 1, log
        assert "no longer exists" in warnings[0] and "docs/performance.md" in warnings[0]
    assert len(server.client.get("/readyz").json()["workers"]) == 1


def test_no_warning_without_retired_settings(live: LiveServer) -> None:
    assert "no longer exists" not in live.log()


def test_results_survive_as_npz_files(live: LiveServer) -> None:
    graph = live.upload_npz([0, 1], [1, 2], np.array([2.5, 1.5], dtype=np.float64))
    job = live.submit(graph["id"], wait=30).json()
    # the file is written just behind the answer; once the result is served, it is there
    assert live.client.get(f"/v1/jobs/{job['id']}/result").status_code == 200
    path = live.data_dir / "spool" / "results" / f"{job['id']}.npz"
    with np.load(path) as npz:
        assert npz["edge_ids"].tolist() == [0, 1] and npz["weights"].dtype == np.float64
