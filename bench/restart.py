"""``python -m bench.restart``: how long the service takes to come back, and where the time goes.

    python -m bench.restart [--backend cpu|gpu|auto] [--graphs rmat-16,rmat-22] [--points 1e7]
                            [--dims 3] [--point-task emst] [--standby auto|on|off] [--repeats 5]
                            [--out bench/results/restart/<backend>.json]

Three measurements of a real ``python -m service`` (its own process group, loopback HTTP), each
repeated ``--repeats`` times; medians are printed, every run is kept in the JSON:

1. **start**: the service on an empty data dir (one run first, ``first_start``, not in the
   medians: it fills the kernel caches where they are cold, CUPY_CACHE_DIR and NUMBA_CACHE_DIR
   staying as the environment sets them, and the worker's warm-up manifest where there is none,
   by the full sweep): process start to ``/healthz`` answering (the API is up) and to ``/readyz``
   200 (a worker is warm), with the worker's own split from ``/readyz`` (``startup_ms``:
   ``process`` = spawn to its entry point, the interpreter and what ``spawn`` imports (worker 0
   is spawned as soon as the service has read its settings, before the API is built);
   ``modules`` = the worker's modules and the engine's (gpu_core, NumPy and what they import);
   ``imports`` = CuPy, where the backend is resolved; ``device`` = the CUDA context; ``warm_up_tasks`` = the
   worker's tasks on small datasets; ``warm_up`` = the kernels, by the manifest's parts or the full
   sweep; ``host_passes`` = the wait for Numba's passes, loaded on a thread meanwhile; ``probe``;
   ``release``) and its ``warm_up`` (``mode`` quick or full, ``parts``, ``modules``, ``compiled``,
   ``load_ms``). Then the first job of every task on small datasets uploaded after ready (MST,
   maximum forest, a weight update then MST; EMST, HDBSCAN*, single linkage) next to the same job
   again: a first job that compiled something shows as much slower than its second.
2. **kill**: the datasets (``--graphs``, a ``--points`` set) resident, SIGKILL the worker: kill to
   ``/readyz`` 200 on a new process, the server's own ``last_restart_ms`` (death seen to taking
   requests), and per dataset: kill to resident again (its reload, polled) and kill to its first
   job answered (one job per dataset submitted right after the kill, ``?wait=``; its
   ``Server-Timing: reload`` wait and ``compute_ms``).
3. **full restart**: SIGTERM the service, start it again on the same data dir: start to ``/healthz``
   and to ``/readyz`` 200, and per dataset start to resident and to its first job answered.

Every answer is checked against the first one (edge count, total weight). ``--standby`` sets
``MST_STANDBY_WORKER`` (``auto``: a warm spare process per GPU worker, none on the CPU).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from service.timing import parse_header

from .generators import GraphSpec, load_or_make
from .points import make_points
from .server import REPO_ROOT, free_port, npz_body

OCTET = "application/octet-stream"
#: defaults by backend: the GPU host's issue-22 set-up, and what a 2-core CPU VM does in minutes
DEFAULTS = {
    "gpu": {"graphs": "rmat-16,rmat-22", "points": "1e7"},
    "cpu": {"graphs": "rmat-16,rmat-20", "points": "1e5"},
}


@dataclass
class Dataset:
    name: str
    kind: str  # "graph" or "points"
    body: bytes
    id: str = ""
    #: (num_edges, total_weight) of its first answer: every later answer must equal it
    answer: tuple[Any, ...] | None = None

    @property
    def path(self) -> str:
        return f"/v1/{'graphs' if self.kind == 'graph' else 'points'}/{self.id}"


@dataclass
class Server:
    """One ``python -m service`` process on a data dir."""

    data_dir: Path
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    base: str = ""
    times: dict[str, float] = field(default_factory=dict)

    def start(self, timeout: float = 600.0) -> Server:
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        env = {**os.environ, **self.env, "MST_PORT": str(port), "MST_DATA_DIR": str(self.data_dir)}
        started = time.perf_counter()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "service"], cwd=REPO_ROOT, env=env, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = started + timeout
        with httpx.Client(base_url=self.base, timeout=5.0) as c:
            while "ready_s" not in self.times:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the service exited ({self.proc.returncode}); see {self.log}")
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"the service was not ready within {timeout} s; see {self.log}")
                try:
                    if "healthz_s" not in self.times and c.get("/healthz").status_code == 200:
                        self.times["healthz_s"] = time.perf_counter() - started
                    if c.get("/readyz").status_code == 200:
                        self.times["ready_s"] = time.perf_counter() - started
                except httpx.TransportError:
                    pass
                time.sleep(0.002)
        return self

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def client(self, timeout: float = 900.0) -> httpx.Client:
        return httpx.Client(base_url=self.base, timeout=timeout)


def _worker(c: httpx.Client) -> dict[str, Any]:
    body: dict[str, Any] = c.get("/readyz").json()["workers"][0]
    return body


def _settled(c: httpx.Client, standby: str, timeout: float = 900.0) -> int:
    """Wait until worker 0 has reloaded everything and, where it keeps one, has a warm standby;
    its pid."""
    deadline = time.perf_counter() + timeout
    while True:
        worker = _worker(c)
        expected = standby == "on" or (standby == "auto" and worker.get("backend") == "gpu")
        spare = worker.get("standby")
        if worker["state"] == "ready" and (not expected or (spare is not None and spare["state"] == "warm")):
            return int(worker["pid"])
        if time.perf_counter() > deadline:
            raise RuntimeError(f"worker 0 not settled within {timeout} s: {worker}")
        time.sleep(0.05)


def _device_memory(c: httpx.Client) -> dict[str, Any] | None:
    """Device memory (MiB) of worker 0's process and of its standby, from ``nvidia-smi`` (None where
    there is none): what the standby costs."""
    import shutil

    if shutil.which("nvidia-smi") is None:
        return None
    worker = _worker(c)
    query = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
    done = subprocess.run(query, capture_output=True, text=True, timeout=30, check=False)
    used = {}
    for line in done.stdout.splitlines():
        pid, _, mib = line.partition(",")
        if pid.strip().isdigit() and mib.strip().isdigit():
            used[int(pid)] = int(mib)
    spare = (worker.get("standby") or {}).get("pid")
    return {"worker_mib": used.get(worker["pid"]), "standby_mib": used.get(spare) if spare else None}


def _job(c: httpx.Client, ds: Dataset, point_task: str) -> tuple[dict[str, Any], httpx.Headers]:
    if ds.kind == "graph":
        response = c.post(f"{ds.path}/mst", params={"wait": 900})
    else:
        params = {"min_samples": 1} if point_task == "emst" else {}
        response = c.post(
            f"{ds.path}/jobs", params={"wait": 900}, json={"task": point_task, "params": params}
        )
    job: dict[str, Any] = response.json()
    if job.get("status") != "succeeded":
        raise RuntimeError(
            f"a job on {ds.name} did not succeed: {response.status_code} {response.text[:300]}"
        )
    answer = (job["result"]["num_edges"], job["result"]["total_weight"])
    if ds.answer is None:
        ds.answer = answer
    elif answer != ds.answer:
        raise RuntimeError(f"{ds.name}: answer {answer} after the restart, {ds.answer} before")
    return job, response.headers


def _upload(c: httpx.Client, ds: Dataset) -> None:
    route = "/v1/graphs" if ds.kind == "graph" else "/v1/points"
    response = c.post(route, content=ds.body, headers={"content-type": OCTET})
    if response.status_code != 201:
        raise RuntimeError(f"uploading {ds.name}: {response.status_code} {response.text[:300]}")
    ds.id = response.json()["id"]


def _reload_ms(headers: httpx.Headers) -> float | None:
    return parse_header(headers.get("server-timing", "")).get("reload")


def _come_back(
    server: Server, datasets: list[Dataset], point_task: str, since: float, old_pid: int | None
) -> dict[str, Any]:
    """From ``since`` (a kill, or the process start): each dataset's first job answered (one thread
    each, submitted at once) and its time to resident (polled), and the time to /readyz 200."""
    out: dict[str, Any] = {"datasets": {}}
    answers: dict[str, tuple[float, dict[str, Any], httpx.Headers]] = {}
    errors: list[BaseException] = []

    def ask(ds: Dataset) -> None:
        try:
            with server.client() as c:
                job, headers = _job(c, ds, point_task)
                answers[ds.name] = (time.perf_counter() - since, job, headers)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(ds,)) for ds in datasets]
    for t in threads:
        t.start()
    resident: dict[str, float] = {}
    with server.client(timeout=10) as c:
        while "ready_s" not in out or len(resident) < len(datasets):
            if "ready_s" not in out:
                r = c.get("/readyz")
                if r.status_code == 200 and r.json()["workers"][0]["pid"] != old_pid:
                    out["ready_s"] = time.perf_counter() - since
            else:
                for ds in datasets:
                    if ds.name not in resident and c.get(ds.path).json()["residency"]["status"] == "resident":
                        resident[ds.name] = time.perf_counter() - since
            if errors or time.perf_counter() - since > 1800:
                break
            time.sleep(0.002)
        for t in threads:
            t.join(1800)
        if errors:
            raise errors[0]
        worker = _worker(c)
    out["last_restart_ms"] = worker.get("last_restart_ms")
    out["startup_ms"] = worker.get("startup_ms")
    for ds in datasets:
        answered, job, headers = answers[ds.name]
        out["datasets"][ds.name] = {
            "resident_s": round(resident.get(ds.name, float("nan")), 4),
            "answered_s": round(answered, 4),
            "reload_wait_ms": _reload_ms(headers),
            "compute_ms": job["result"]["compute_ms"],
        }
    return out


def _first_jobs(server: Server) -> dict[str, Any]:
    """The first job of every task after ready, and the same job on a twin dataset (uploaded the
    same, so nothing computed for the first is reused): ``compute_ms`` and wall time of each."""
    rng = np.random.default_rng(5)
    n, m = 20_000, 100_000
    graph = (rng.integers(0, n, m), rng.integers(0, n, m), rng.integers(1, 1000, m).astype(np.float32), n)
    buffer = io.BytesIO()
    np.savez(buffer, points=rng.random((20_000, 3)))
    tasks: dict[str, Any] = {}
    with server.client() as c:
        graphs = [Dataset(f"graph-{i}", "graph", npz_body(graph)) for i in range(2)]  # type: ignore[arg-type]
        points = [Dataset(f"points-{i}", "points", buffer.getvalue()) for i in range(2)]
        for ds in (*graphs, *points):
            _upload(c, ds)

        def twice(name: str, pair: list[Dataset], route: str, body: dict[str, Any]) -> None:
            runs = []
            for ds in pair:
                t0 = time.perf_counter()
                job = c.post(f"{ds.path}/{route}", params={"wait": 600}, json=body).json()
                if job.get("status") != "succeeded":
                    raise RuntimeError(f"{name}: {job}")
                wall_ms = round((time.perf_counter() - t0) * 1e3, 3)
                runs.append({"wall_ms": wall_ms, "compute_ms": round(job["result"]["compute_ms"], 3)})
            tasks[name] = {"first": runs[0], "second": runs[1]}

        twice("mst", graphs, "jobs", {"task": "mst", "params": {}})
        twice("maximum_forest", graphs, "jobs", {"task": "mst", "params": {"objective": "max"}})
        update: list[dict[str, Any]] = []
        for ds in graphs:
            t0 = time.perf_counter()
            patch = c.patch(f"{ds.path}/weights", json={"edge_ids": [0, 1], "weights": [2.0, 3.0]})
            if patch.status_code != 200:
                raise RuntimeError(f"weight update: {patch.status_code} {patch.text[:300]}")
            update.append({"wall_ms": round((time.perf_counter() - t0) * 1e3, 3)})
        tasks["weight_update"] = {"first": update[0], "second": update[1]}
        twice("mst_after_update", graphs, "jobs", {"task": "mst", "params": {}})
        twice("emst", points, "jobs", {"task": "emst", "params": {"min_samples": 1}})
        twice("hdbscan", points, "jobs", {"task": "hdbscan", "params": {"min_cluster_size": 10}})
        twice("single_linkage", points, "jobs", {"task": "single_linkage", "params": {}})
    return tasks


def _median(runs: list[Any]) -> Any:
    """Medians of numbers at the same place in each run's (nested) record."""
    first = runs[0]
    if isinstance(first, dict):
        return {k: _median([r[k] for r in runs if isinstance(r, dict) and k in r]) for k in first}
    numbers = [r for r in runs if isinstance(r, (int, float)) and r == r]
    return round(statistics.median(numbers), 4) if numbers else None


def _datasets(args: argparse.Namespace, backend: str) -> list[Dataset]:
    defaults = DEFAULTS["gpu" if backend != "cpu" else "cpu"]
    out = []
    for name in (args.graphs or defaults["graphs"]).split(","):
        scale = int(name.split("-")[1])
        spec = GraphSpec(name, "rmat", (("scale", scale), ("edge_factor", 8)))
        edges, _ = load_or_make(spec)
        out.append(Dataset(name, "graph", npz_body(edges)))
    count = int(float(args.points or defaults["points"]))
    if count:
        buffer = io.BytesIO()
        np.savez(buffer, points=make_points("uniform", count, args.dims))
        out.append(Dataset(f"points-{count:.0e}x{args.dims}", "points", buffer.getvalue()))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.restart", description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto", help="MST_BACKEND of the service (default auto)")
    p.add_argument("--graphs", help="RMAT graphs, rmat-<scale>, comma-separated (gpu: rmat-16,rmat-22)")
    p.add_argument("--points", help="points of the point set, 0 for none (gpu: 1e7; cpu: 1e5)")
    p.add_argument("--dims", type=int, default=3, help="dimensions of the point set (default 3)")
    p.add_argument("--point-task", default="emst", choices=("emst", "hdbscan", "single_linkage"))
    p.add_argument("--standby", default="auto", choices=("auto", "on", "off"), help="MST_STANDBY_WORKER")
    p.add_argument("--repeats", type=int, default=5, help="runs of each measurement (default 5)")
    p.add_argument("--skip", default="", help="measurements to skip: start,kill,full (comma-separated)")
    p.add_argument("--out", type=Path, help="the JSON record (default bench/results/restart/<backend>.json)")
    args = p.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    env = {
        "MST_BACKEND": args.backend,
        "MST_HOST": "127.0.0.1",
        "MST_LOG_LEVEL": "info",
        "MST_STANDBY_WORKER": args.standby,
        "MST_MAX_UPLOAD_BYTES": str(16 << 30),
        "MST_MAX_JSON_BYTES": str(1 << 20),
        "MST_MAX_WAIT_S": "900",
    }
    record: dict[str, Any] = {"argv": sys.argv[1:], "host": platform.node(), "cpus": os.cpu_count(),
                              "python": platform.python_version(), "standby": args.standby}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="mst-bench-restart-") as tmp:
        root = Path(tmp)
        log = root / "server.log"

        def fresh(i: int) -> Server:
            return Server(root / f"data-{i}", env, log)

        # 1. start on an empty data dir (the first run fills the kernel caches and is not counted)
        if "start" not in skip:
            runs = []
            for i in range(args.repeats + 1):
                server = fresh(i).start()
                try:
                    with server.client() as c:
                        worker = _worker(c)
                    run: dict[str, Any] = {k: round(v, 4) for k, v in server.times.items()}
                    for key in ("plan_ms", "startup_ms", "warm_up", "device"):
                        run[key] = worker.get(key)
                    if i == args.repeats:
                        run["first_jobs"] = _first_jobs(server)
                finally:
                    server.stop()
                if i:
                    runs.append(run)
                else:
                    record["first_start"] = run
                print(f"start {i}{' (fills the caches, not counted)' if not i else ''}: {run}", flush=True)
            timed = [{k: v for k, v in r.items() if k not in ("first_jobs", "warm_up")} for r in runs]
            record["start"] = {"runs": runs, "median": _median(timed)}
            record["warm_up_modes"] = [(r.get("warm_up") or {}).get("mode") for r in runs]
            record["first_jobs"] = runs[-1]["first_jobs"]
            record["device"] = runs[-1]["device"]

        backend = args.backend
        datasets = _datasets(args, backend)
        server = fresh(99).start()
        try:
            with server.client() as c:
                record["device"] = _worker(c).get("device")
                for ds in datasets:
                    t0 = time.perf_counter()
                    _upload(c, ds)
                    _job(c, ds, args.point_task)
                    print(f"uploaded {ds.name} ({len(ds.body) / 1e6:.0f} MB) and computed it in "
                          f"{time.perf_counter() - t0:.1f} s", flush=True)  # fmt: skip
            record["datasets"] = [{"name": d.name, "kind": d.kind, "bytes": len(d.body)} for d in datasets]

            # 2. SIGKILL of the worker, datasets resident
            if "kill" not in skip:
                runs = []
                for i in range(args.repeats):
                    with server.client() as c:
                        pid = _settled(c, args.standby)
                        memory = _device_memory(c)
                    since = time.perf_counter()
                    os.kill(pid, signal.SIGKILL)
                    run = _come_back(server, datasets, args.point_task, since, pid)
                    if memory is not None:
                        run["device_memory_before"] = memory
                    runs.append(run)
                    print(f"kill {i}: {run}", flush=True)
                record["kill"] = {"runs": runs, "median": _median(runs)}

            # 3. a full restart with the datasets stored
            if "full" not in skip:
                runs = []
                for i in range(args.repeats):
                    server.stop()
                    server = Server(server.data_dir, env, log)
                    since = time.perf_counter()
                    server.start()
                    run = {**{k: round(v, 4) for k, v in server.times.items()},
                           **_come_back(server, datasets, args.point_task, since, None)}  # fmt: skip
                    runs.append(run)
                    print(f"full restart {i}: {run}", flush=True)
                record["full_restart"] = {"runs": runs, "median": _median(runs)}
        finally:
            server.stop()
        record["log_tail"] = log.read_text(errors="replace")[-4000:]

    out = args.out or REPO_ROOT / "bench" / "results" / "restart" / f"{backend}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    _print_summary(record)
    print(f"\nwritten: {out}")
    return 0


def _print_summary(record: dict[str, Any]) -> None:
    print(f"\n## Restart times ({record.get('device')}, standby {record['standby']}; medians)\n")
    if "first_start" in record:
        first = record["first_start"]
        print(f"- first start (fills the caches): ready {first['ready_s']:.2f} s, "
              f"warm-up {first.get('warm_up')}")  # fmt: skip
    if "start" in record:
        m = record["start"]["median"]
        split = ", ".join(f"{k} {v:.0f}" for k, v in (m.get("startup_ms") or {}).items() if v is not None)
        print(f"- start (empty data dir): API up {m['healthz_s']:.2f} s, ready {m['ready_s']:.2f} s; "
              f"planning the workers (GPU probe) {m['plan_ms']} ms; worker (ms): {split}; "
              f"warm-up modes {record.get('warm_up_modes')}")  # fmt: skip
        for task, runs in record["first_jobs"].items():
            second = runs.get("second")
            print(f"  - first {task}: {runs['first']}" + (f", second: {second}" if second else ""))
    for key, title in (("kill", "SIGKILL of the worker"), ("full_restart", "full restart")):
        if key not in record:
            continue
        m = record[key]["median"]
        head = f"- {title}: ready {m['ready_s']:.2f} s"
        if key == "kill":
            head += f" (death seen to taking requests: {m['last_restart_ms']} ms)"
            if m.get("device_memory_before"):
                head += f"; device memory (MiB) {m['device_memory_before']}"
        else:
            head += f" (API up {m['healthz_s']:.2f} s)"
        print(head)
        for name, d in m["datasets"].items():
            print(
                f"  - {name}: resident {d['resident_s']:.2f} s, first job answered {d['answered_s']:.2f} s "
                f"(waited {d['reload_wait_ms']} ms for its reload, computed {d['compute_ms']:.0f} ms)"
            )


if __name__ == "__main__":
    raise SystemExit(main())
