"""A real service in a subprocess (``python -m service``) on a free port, for the tests."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import numpy as np

from service.client import npz_bytes

REPO = Path(__file__).resolve().parents[2]
OCTET = "application/octet-stream"
T = TypeVar("T")


def settled(read: Callable[[], T], timeout: float = 5.0) -> T:
    """``read()`` once two reads 50 ms apart agree: the result files of jobs that just finished
    land in the spool just after their answers (``spool/tmp`` holds them meanwhile)."""
    seen, deadline = read(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.05)
        again = read()
        if again == seen:
            break
        seen = again
    return seen


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


npz_body = npz_bytes  # the bundled client's npz upload body

#: the settings of a server whose workers SIGKILL themselves when they compute a forest with the
#: weight ``crash_hook.sitecustomize.KILL_WEIGHT`` (test-only fault injection, see that file)
CRASH_HOOK_ENV = {
    "PYTHONPATH": os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parent / "crash_hook"), os.environ.get("PYTHONPATH")) if p
    )
}
#: the weight that makes such a worker kill itself
KILL_WEIGHT = -987_654_321
#: the weights that hold a job running while their gate file exists (``LiveServer.hold``)
HOLD_WEIGHT = -555_000_000
_holds = iter(range(HOLD_WEIGHT, HOLD_WEIGHT + 100_000, 7))


@dataclass
class LiveServer:
    """One ``python -m service`` process; ``client`` is an httpx client bound to it."""

    data_dir: Path
    env: dict[str, str]
    log_path: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    client: httpx.Client = field(init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def hold_dir(self) -> Path:
        return self.log_path.with_name(self.log_path.stem + "-holds")

    def start(self, timeout: float = 60.0, wait: bool = True) -> LiveServer:
        """Start the server; with ``wait``, return once ``/readyz`` answers 200."""
        self.port = free_port()
        self.hold_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            **self.env,
            "MST_PORT": str(self.port),
            "MST_DATA_DIR": str(self.data_dir),
            "MST_TEST_HOLD_DIR": str(self.hold_dir),
        }
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "service"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        self.client = httpx.Client(base_url=self.url, timeout=60.0)
        if wait:
            self.wait_ready(timeout)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                response = self.client.get("/readyz")
                if response.status_code == 200:
                    body: dict[str, Any] = response.json()
                    return body
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"the server was not ready within {timeout} s:\n{self.log()}")

    def worker_pid(self, graph_id: str | None = None) -> int:
        """The pid of the worker holding ``graph_id`` (a graph or point set), or of worker 0."""
        index = 0
        if graph_id is not None:
            kind = "points" if graph_id.startswith("p_") else "graphs"
            index = self.client.get(f"/v1/{kind}/{graph_id}").json()["residency"]["worker"]
        pid = self.client.get("/readyz").json()["workers"][index]["pid"]
        assert isinstance(pid, int)
        return pid

    @staticmethod
    def hold_weight() -> int:
        """A weight no other hold of the test run uses (for a graph uploaded before its hold)."""
        return next(_holds)

    @contextmanager
    def hold(self, weight: int | None = None) -> Iterator[int]:
        """A weight that holds a job *running* on the worker computing a forest with it (a server
        with ``CRASH_HOOK_ENV``) until the block ends; ``weight``: one from :meth:`hold_weight`."""
        weight = next(_holds) if weight is None else weight
        gate = self.hold_dir / str(weight)
        # a job that computed with this weight before the hold left its marker: wait_held must
        # wait for one that runs during the hold
        (self.hold_dir / f"{weight}.running").unlink(missing_ok=True)
        gate.touch()
        try:
            yield weight
        finally:
            gate.unlink(missing_ok=True)

    @contextmanager
    def sent_while_stopped(
        self,
        pid: int,
        sends: Sequence[Callable[[], httpx.Response]],
        then: int = signal.SIGCONT,
        settle_s: float = 30.0,
        join_s: float = 120.0,
    ) -> Iterator[list[httpx.Response | None]]:
        """Worker ``pid`` stopped (SIGSTOP), each of ``sends`` called on a thread of its own, so that
        their requests wait in the worker's pipes together; once the board counts them all waiting
        for it (``requests_waiting``: every API process's, at most ``settle_s``: a fixed pause lost
        the race on a loaded 2-core host) the block runs (the caller's checks while the worker is
        stopped), then the worker gets ``then`` (SIGCONT, or SIGKILL: its replacement answers
        them). The list yielded holds each answer once the block has ended (None: none came within
        ``join_s``)."""
        answers: list[httpx.Response | None] = [None] * len(sends)

        def call(i: int) -> None:
            answers[i] = sends[i]()

        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(sends))]
        os.kill(pid, signal.SIGSTOP)
        try:
            for t in threads:
                t.start()
            deadline = time.monotonic() + settle_s
            while self._waiting_for(pid) < len(sends) and time.monotonic() < deadline:
                time.sleep(0.02)
            yield answers
        finally:
            os.kill(pid, then)
            for t in threads:
                if t.ident is not None:  # started
                    t.join(join_s)

    def _waiting_for(self, pid: int) -> int:
        """The requests every API process has handed to worker ``pid`` and not had answered."""
        workers = self.client.get("/readyz").json()["workers"]
        return sum(int(w["requests_waiting"]) for w in workers if w["pid"] == pid)

    def wait_held(self, weight: int, timeout: float = 30.0) -> None:
        """Wait until a job holding ``weight`` is running on its worker."""
        running = self.hold_dir / f"{weight}.running"
        deadline = time.monotonic() + timeout
        while not running.exists():
            assert time.monotonic() < deadline, f"no job holding {weight} ran within {timeout} s"
            time.sleep(0.01)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Stop the server (SIGTERM: graceful; SIGKILL: a crash) and return its exit code."""
        self.client.close()
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        return int(self.proc.returncode)

    # -- helpers of the REST API --------------------------------------------------------------

    def upload_npz(self, src: Any, dst: Any, weight: Any, num_vertices: int | None = None) -> dict[str, Any]:
        response = self.client.post(
            "/v1/graphs", content=npz_body(src, dst, weight, num_vertices), headers={"content-type": OCTET}
        )
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        return body

    def submit(self, graph_id: str, wait: float = 0.0) -> httpx.Response:
        params = {"wait": wait} if wait else None
        return self.client.post(f"/v1/graphs/{graph_id}/mst", params=params)

    def poll(
        self,
        job_id: str,
        timeout: float = 60.0,
        until: tuple[str, ...] = ("succeeded", "failed", "cancelled"),
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            job: dict[str, Any] = self.client.get(f"/v1/jobs/{job_id}").json()
            if job["status"] in until:
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} still {job['status']} after {timeout} s")
            time.sleep(0.01)

    def result_npz(self, job_id: str) -> tuple[np.ndarray, np.ndarray, httpx.Headers]:
        response = self.client.get(f"/v1/jobs/{job_id}/result", headers={"accept": OCTET})
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == OCTET
        with np.load(io.BytesIO(response.content), allow_pickle=False) as npz:
            return npz["edge_ids"], npz["weights"], response.headers
