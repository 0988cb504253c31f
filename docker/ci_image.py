#!/usr/bin/env python3
"""Build the image from ./Dockerfile without a Docker engine, run it, and tour its API over HTTP.

CI's image check (``.ci/run``), also run by hand, as root, from the repository's root:

    .venv/bin/python docker/ci_image.py           # the CPU image (GPU_EXTRA=scipy): ~2 min
    .venv/bin/python docker/ci_image.py --gpu     # and the default GPU variant (GPU_EXTRA=gpu)

1. Tools: buildah and mmdebstrap, from Debian's packages (apt-get installs them when missing).
2. The base: the NVIDIA base image (nvidia/cuda:13.0.2-runtime-ubuntu24.04) cannot be pulled here,
   so a minimal Debian bookworm root filesystem (``mmdebstrap --variant=minbase``, from
   ``$MST_CI_DEBIAN_MIRROR`` or deb.debian.org) is committed as a local image and passed as the
   build-arg ``CUDA_IMAGE``; the Dockerfile itself is used unchanged.
3. The build: ``buildah bud --isolation chroot`` into a store under a temporary folder (overlay, or
   vfs where the kernel mounts no overlay there), in the docker format (the OCI format has no
   HEALTHCHECK), with the host's pip settings that reach the package index (index URLs, CA bundle;
   no local wheel folders) mounted read-only.
4. The container, as ``docker run`` would start it: the image's ENTRYPOINT and CMD as its USER, via
   ``buildah run --isolation chroot`` on the host's network. Publishing the port is replaced by
   ``MST_HOST=127.0.0.1 MST_PORT=<a free port>``; a folder owned by the image's user is the volume.
   Ready when the image's own HEALTHCHECK command, read from the built image, passes in it.
5. The README's API tour (a graph and its MST, a one-shot MST, a point set and its HDBSCAN*), a
   check that every process of the container is the unprivileged USER, then ``docker stop``: SIGTERM
   to the container's main process, which must shut down gracefully and promptly, leaving no
   process behind. A second container on the same volume must serve the same graph, point set and
   results, byte for byte, and a new job must find the same forest. Last, the entrypoint must refuse
   a volume its user cannot write.
   Before all that, ``numba``, ``pyarrow``, ``gpu_core`` and ``service`` must import in the image, and
   its ``gpu_core`` must hold every ``.cu`` kernel of the repository.
6. ``--gpu``: the default variant (CuPy for CUDA 13) is built too; ``cupy`` must import in it as well,
   and it must serve the tour (on the CPU: no GPU here).

Logs (the build's, each container's) are kept under the work folder and printed when a check
fails; the folder, its images and containers are removed at the end unless ``--keep``.

One script past 500 lines on purpose: CI runs it as one step, its checks in order (base, build,
serve, tour, restart, the GPU variant), each needing the ones before it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
HOST_MOUNT_NS = os.readlink("/proc/self/ns/mnt")
BASE_IMAGE = "localhost/mst-ci-base:bookworm"
DEBIAN_MIRROR = os.environ.get("MST_CI_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# In the build, pip reads /etc/pip.conf; its CA bundle lies in a folder mounted beside it.
BUILD_CONF_DIR = "/run/mst-ci-build"
# docker stop's default: SIGKILL follows SIGTERM after 10 s; the service must be out before that.
STOP_TIMEOUT_S = 10.0
README_GRAPH = {"src": [0, 1, 2, 0], "dst": [1, 2, 3, 3], "weight": [1.0, 2.0, 1.0, 5.0]}
README_EDGELIST = b"0 1 4\n1 2 1\n2 0 2\n3 4 7\n"
README_POINTS = [[0, 0], [0, 1], [5, 5], [5, 6], [9, 0]]
# scikit-learn's HDBSCAN(min_cluster_size=2) on README_POINTS: two pairs, and the far point is noise.
HDBSCAN_LABELS = [0, 0, 1, 1, -1]
HDBSCAN_PROBABILITIES = [1.0, 1.0, 1.0, 1.0, 0.0]

# Run in the image: import the modules named as arguments, print the .cu kernels of gpu_core's
# package data on one line, then the modules' versions.
IMPORTS_CHECK = """
import importlib, importlib.resources, sys
modules = [importlib.import_module(name) for name in sys.argv[1:]]
kernels = (importlib.resources.files("gpu_core") / "kernels").iterdir()
print(" ".join(sorted(k.name for k in kernels if k.name.endswith(".cu"))))
print(", ".join(f"{m.__name__} {getattr(m, '__version__', '')}".strip() for m in modules))
"""


class CheckFailed(Exception):
    """A check of the image failed; the message says which and what was seen."""


def log(message: str) -> None:
    print(f"[ci_image {time.strftime('%H:%M:%S')}] {message}", flush=True)


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


@dataclasses.dataclass
class Timings:
    """Seconds per stage, printed at the end."""

    stages: dict[str, float] = dataclasses.field(default_factory=dict)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        log(f"--- {name}")
        try:
            yield
        finally:
            self.stages[name] = time.monotonic() - start
            log(f"--- {name}: {self.stages[name]:.1f} s")


class Buildah:
    """buildah on a private store (overlay or vfs) under the work folder."""

    def __init__(self, work: Path, driver: str, logs: Path) -> None:
        self.globals = [
            "buildah",
            "--root", str(work / "storage"),
            "--runroot", str(work / "runroot"),
            "--storage-driver", driver,
        ]  # fmt: skip
        self.logs = logs

    def cmd(self, *args: str) -> list[str]:
        return [*self.globals, *args]

    def out(self, *args: str) -> str:
        """Run a buildah command and return its stdout; its stderr goes to ours."""
        done = subprocess.run(self.cmd(*args), stdout=subprocess.PIPE, text=True, check=False)
        if done.returncode != 0:
            raise CheckFailed(f"buildah {' '.join(args)} exited {done.returncode}")
        return done.stdout.strip()

    def logged(self, log_name: str, *args: str) -> None:
        """Run a long buildah command (a build) with its output in logs/<log_name>."""
        path = self.logs / log_name
        with path.open("wb") as out:
            rc = subprocess.run(self.cmd(*args), stdout=out, stderr=subprocess.STDOUT, check=False).returncode
        if rc != 0:
            print_tail(path, 80)
            raise CheckFailed(f"buildah {args[0]} exited {rc}; its log: {path}")

    def image_size(self, image: str) -> str:
        for entry in json.loads(self.out("images", "--json")):
            if image in entry["names"]:
                return str(entry["size"])
        raise CheckFailed(f"{image} is not in the store")


def print_tail(path: Path, lines: int) -> None:
    text = path.read_text(errors="replace").splitlines()
    print(f"===== {path} (last {min(lines, len(text))} of {len(text)} lines)")
    print("\n".join(text[-lines:]), flush=True)


def ensure_tools() -> None:
    """buildah and mmdebstrap on PATH: installed from Debian's packages when missing."""
    missing = [tool for tool in ("buildah", "mmdebstrap") if shutil.which(tool) is None]
    if not missing:
        return
    if shutil.which("apt-get") is None:
        raise CheckFailed(f"{' and '.join(missing)} missing, and no apt-get to install them")
    log(f"installing {' '.join(missing)} (apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for args in (["update", "-q"], ["install", "-y", "-q", "--no-install-recommends", *missing]):
        rc = subprocess.run(["apt-get", *args], env=env, stdout=subprocess.DEVNULL, check=False).returncode
        expect(rc == 0, f"apt-get {args[0]} exited {rc}")


def storage_driver(work: Path) -> str:
    """overlay where the kernel mounts an overlay in the work folder, else vfs.

    overlay shares the image's files with its containers; vfs copies them for each one (about
    10 s per container of the CPU image here) but works on any file system, in a container too.
    """
    probe = work / "overlay-probe"
    dirs = {name: probe / name for name in ("lower", "upper", "work", "merged")}
    for path in dirs.values():
        path.mkdir(parents=True)
    options = f"lowerdir={dirs['lower']},upperdir={dirs['upper']},workdir={dirs['work']}"
    mounted = subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", options, str(dirs["merged"])],
        stderr=subprocess.DEVNULL,
        check=False,
    )
    if mounted.returncode == 0:
        subprocess.run(["umount", str(dirs["merged"])], check=False)
    shutil.rmtree(probe, ignore_errors=True)
    return "overlay" if mounted.returncode == 0 else "vfs"


def make_base(b: Buildah) -> None:
    """A minimal Debian root filesystem as the local image BASE_IMAGE (the stand-in for CUDA's)."""
    ctr = b.out("from", "--name", "mst-ci-base", "scratch")
    root = b.out("mount", ctr)
    with (b.logs / "mmdebstrap.log").open("wb") as out:
        rc = subprocess.run(
            ["mmdebstrap", "--variant=minbase", "bookworm", root, DEBIAN_MIRROR],
            stdout=out, stderr=subprocess.STDOUT, check=False,
        ).returncode  # fmt: skip
    if rc != 0:
        print_tail(b.logs / "mmdebstrap.log", 60)
        raise CheckFailed(f"mmdebstrap exited {rc}")
    b.out("umount", ctr)
    b.out("commit", "--quiet", "--rm", "--format", "docker", ctr, BASE_IMAGE)


def host_pip_config() -> tuple[dict[str, str], Path | None]:
    """The host's pip settings that matter for reaching the index, and its CA bundle if it sets one.

    From pip's configuration files and PIP_* variables (these win); URLs other than http(s) and
    local wheel folders (find-links) are left out: they do not exist in the build.
    """
    settings: dict[str, str] = {}
    done = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], stdout=subprocess.PIPE, text=True, check=False
    )
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        section, _, name = key.partition(".")
        if section in ("global", "install") and value:
            settings[name] = value.strip("'\"")
    for name, value in os.environ.items():
        if name.startswith("PIP_") and value:
            settings[name[4:].lower().replace("_", "-")] = value
    if "default-timeout" in settings:
        settings.setdefault("timeout", settings["default-timeout"])
    kept: dict[str, str] = {}
    for name in ("index-url", "extra-index-url"):
        urls = [u for u in settings.get(name, "").split() if u.startswith(("http://", "https://"))]
        if urls:
            kept[name] = " ".join(urls)
    for name in ("trusted-host", "timeout", "retries", "proxy"):
        if name in settings:
            kept[name] = settings[name]
    cert = settings.get("cert")
    return kept, Path(cert) if cert and Path(cert).is_file() else None


def build_volumes(work: Path) -> list[str]:
    """``-v`` arguments that give the build the host's pip settings (read-only)."""
    kept, cert = host_pip_config()
    conf_dir = work / "build-conf"
    conf_dir.mkdir()
    if cert is not None:
        shutil.copyfile(cert, conf_dir / "ca.crt")
        kept["cert"] = f"{BUILD_CONF_DIR}/ca.crt"
    if not kept:
        return []
    log("pip settings for the build: " + ", ".join(f"{k}={v}" for k, v in sorted(kept.items())))
    (conf_dir / "pip.conf").write_text("[global]\n" + "".join(f"{k} = {v}\n" for k, v in kept.items()))
    # The mount point leaves an empty /etc/pip.conf in the image (pip reads it as no settings).
    return ["-v", f"{conf_dir}/pip.conf:/etc/pip.conf:ro", "-v", f"{conf_dir}:{BUILD_CONF_DIR}:ro"]


def build(b: Buildah, tag: str, gpu_extra: str, volumes: Sequence[str]) -> None:
    b.logged(
        f"build-{gpu_extra}.log",
        "bud", "--isolation", "chroot", "--format", "docker", "--layers=false", "--pull=never",
        "--build-arg", f"CUDA_IMAGE={BASE_IMAGE}", "--build-arg", f"GPU_EXTRA={gpu_extra}",
        *volumes, "-f", str(REPO / "Dockerfile"), "-t", tag, str(REPO),
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class ImageConfig:
    """What of the built image's config a container run uses."""

    entrypoint: list[str]
    cmd: list[str]
    uid: int
    gid: int
    health_test: list[str]
    health_timeout_s: float
    health_start_period_s: float
    volumes: list[str]

    @classmethod
    def read(cls, b: Buildah, image: str) -> ImageConfig:
        config = json.loads(b.out("inspect", "--type", "image", image))["Docker"]["config"]
        user = str(config.get("User") or "")
        uid, _, gid = user.partition(":")
        expect(uid.isdigit() and gid.isdigit(), f"the image's USER is {user!r}, not a numeric uid:gid")
        expect(
            int(uid) != 0 and int(gid) != 0, f"the image's USER is {user!r}: root, not an unprivileged user"
        )
        health = config.get("Healthcheck") or {}
        test: list[str] = health.get("Test") or []
        if test[:1] == ["CMD"]:
            test = test[1:]
        elif test[:1] == ["CMD-SHELL"]:
            test = ["/bin/sh", "-c", test[1]]
        else:
            raise CheckFailed(f"the image has no HEALTHCHECK command (its Healthcheck: {health!r})")
        return cls(
            entrypoint=list(config.get("Entrypoint") or []),
            cmd=list(config.get("Cmd") or []),
            uid=int(uid),
            gid=int(gid),
            health_test=test,
            health_timeout_s=health.get("Timeout", 30 * 10**9) / 1e9,
            health_start_period_s=health.get("StartPeriod", 0) / 1e9,
            volumes=sorted(config.get("Volumes") or {}),
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def process_table() -> dict[int, int]:
    """pid -> parent pid of every process."""
    table: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                table[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    return table


def descendants(pid: int) -> list[int]:
    table = process_table()
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        children = sorted(p for p, pp in table.items() if pp == parent)
        found += children
        todo += children
    return found


def status_fields(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").rstrip("\0").split("\0")


BUILDAH_LAST_WORDS = re.compile(r"subprocess exited (on \w+|with status \d+)|Error: exit status \d+")


def shutdown_ending(name: str, text: str, main_pid: int, buildah_rc: int) -> str:
    """How the main process ended, read from the container's log and ``buildah run``'s exit code;
    a CheckFailed unless it shut down gracefully (uvicorn's 'Finished server process') and then
    ended by the SIGTERM (uvicorn re-raises it after its shutdown, as Docker reports exit 143) or
    with status 0.

    After that line only buildah may speak: ``buildah-chroot-exec`` reports how the main process
    ended ("subprocess exited on terminated") and exits 1, which its parent reports ("subprocess
    exited with status 1"). buildah relays the innermost report through a pipe and now and then
    loses it (seen in CI); a lone "status 1" after a silent, graceful shutdown is that case.
    """
    finished = f"Finished server process [{main_pid}]"
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if finished in line), None)
    expect(at is not None, f"{name}: no graceful shutdown in its log (uvicorn's '{finished}')")
    assert at is not None
    after = [line.strip() for line in lines[at + 1 :] if line.strip()]
    spoke = [line for line in after if not BUILDAH_LAST_WORDS.fullmatch(line)]
    expect(not spoke, f"{name}: printed after its shutdown: {spoke[:5]}")
    if "subprocess exited on terminated" in after:
        return "SIGTERM"
    if buildah_rc == 0 or "subprocess exited with status 0" in after:
        return "status 0"
    statuses = [line for line in after if line.startswith("subprocess exited")]
    expect(
        statuses == ["subprocess exited with status 1"],
        f"{name}: the main process did not end by SIGTERM or exit 0 (buildah: {after})",
    )
    return "SIGTERM, buildah's report of it lost"


class Container:
    """One container of the image: ``buildah from``, and its ENTRYPOINT + CMD under ``buildah run``.

    There is no PID namespace: the container's processes are host processes in a mount namespace of
    their own (chrooted to the container's root filesystem), which outlives buildah while any of them
    runs. Its main process (PID 1 under Docker; the entrypoint execs the service) is the child of
    buildah's ``buildah-chroot-exec``. Unlike Docker, nothing kills the rest when it exits: processes
    left over are a failure of the check.
    """

    def __init__(self, b: Buildah, image: str, config: ImageConfig, name: str, data: Path) -> None:
        self.b, self.config, self.name, self.data = b, config, name, data
        self.port = free_port()
        self.log_path = b.logs / f"{name}.log"
        self.env = ["-e", "MST_HOST=127.0.0.1", "-e", f"MST_PORT={self.port}"]
        self.id = b.out("from", "--quiet", "--pull=never", "--name", name, image)
        # buildah run mounts a folder of its own at each VOLUME of the container's config, over a
        # -v bind to the same path: take /data out of this container's config, as Docker does when
        # a named volume is mounted there.
        b.out("config", "--volume", "/data-", self.id)
        self.proc: subprocess.Popen[bytes] | None = None
        self.main_pid = 0
        self.mount_ns = ""

    def run_args(self, *, volume: Path | None = None) -> list[str]:
        args = ["run", "--isolation", "chroot", "--user", f"{self.config.uid}:{self.config.gid}", *self.env]
        return [*args, "-v", f"{volume or self.data}:/data", self.id, "--"]

    def start(self) -> None:
        argv = self.b.cmd(*self.run_args(), *self.config.entrypoint, *self.config.cmd)
        command = " ".join(self.config.entrypoint + self.config.cmd)
        log(f"{self.name}: starting {command} on 127.0.0.1:{self.port}")
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while self.main_pid == 0:
            expect(
                self.proc.poll() is None and time.monotonic() < deadline,
                f"{self.name}: its main process did not appear (buildah exit {self.proc.poll()})",
            )
            time.sleep(0.1)
            with contextlib.suppress(OSError):
                self.main_pid = self.find_main_process()
        mount_ns = os.readlink(f"/proc/{self.main_pid}/ns/mnt")
        # processes() and kill() go by it: never the host's own namespace
        expect(mount_ns != HOST_MOUNT_NS, f"{self.name}: runs in the host's mount namespace")
        self.mount_ns = mount_ns

    def find_main_process(self) -> int:
        """The child of ``buildah-chroot-exec`` under this container's ``buildah run``; 0 before it starts."""
        assert self.proc is not None
        table = process_table()
        for pid in descendants(self.proc.pid):
            if cmdline(pid)[:1] == ["buildah-chroot-exec"]:
                return next((child for child, parent in table.items() if parent == pid), 0)
        return 0

    def healthcheck(self) -> tuple[int, str]:
        """Run the image's HEALTHCHECK command in the container, as the image's user."""
        argv = self.b.cmd(*self.run_args(), *self.config.health_test)
        try:
            done = subprocess.run(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=self.config.health_timeout_s + 5,
            )
        except subprocess.TimeoutExpired:
            return -1, f"timed out after {self.config.health_timeout_s} s"
        return done.returncode, done.stdout.decode(errors="replace").strip()

    def wait_healthy(self, limit_s: float) -> float:
        assert self.proc is not None
        start = time.monotonic()
        deadline = start + min(limit_s, self.config.health_start_period_s or limit_s)
        rc, said = -1, ""
        while time.monotonic() < deadline:
            expect(
                self.proc.poll() is None,
                f"{self.name}: exited (buildah {self.proc.returncode}) before healthy",
            )
            rc, said = self.healthcheck()
            if rc == 0:
                took = time.monotonic() - start
                log(f"{self.name}: healthy after {took:.1f} s: {said.splitlines()[-1]}")
                return took
            time.sleep(0.5)
        raise CheckFailed(
            f"{self.name}: HEALTHCHECK did not pass in {limit_s:.0f} s (last: exit {rc}: {said})"
        )

    def check_unprivileged(self) -> None:
        """Every process of the container runs as the image's uid:gid, with no capabilities."""
        assert self.proc is not None
        pids = [self.main_pid, *descendants(self.main_pid)]
        for pid in pids:
            fields = status_fields(pid)
            uids, gids = set(fields["Uid"].split()), set(fields["Gid"].split())
            expect(
                uids == {str(self.config.uid)}, f"{self.name}: pid {pid} {cmdline(pid)[:3]} has uids {uids}"
            )
            expect(gids == {str(self.config.gid)}, f"{self.name}: pid {pid} has gids {gids}")
            expect(
                int(fields["CapEff"], 16) == 0, f"{self.name}: pid {pid} has capabilities {fields['CapEff']}"
            )
        user = f"{self.config.uid}:{self.config.gid}"
        log(f"{self.name}: {len(pids)} processes, all uid:gid {user}, no capabilities")

    def processes(self) -> list[int]:
        """The container's processes: those in its mount namespace, orphans of a dead main process too."""
        found = []
        for pid in process_table():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/ns/mnt") == self.mount_ns:
                    found.append(pid)
        return found

    def stop(self) -> float:
        """``docker stop``: SIGTERM to the main process; it must exit gracefully in STOP_TIMEOUT_S."""
        assert self.proc is not None
        start = time.monotonic()
        os.kill(self.main_pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            raise CheckFailed(f"{self.name}: still running {STOP_TIMEOUT_S:.0f} s after SIGTERM") from None
        took = time.monotonic() - start
        left = self.processes()
        if left:
            self.kill()
            raise CheckFailed(f"{self.name}: processes {left} outlived the main process")
        text = self.log_path.read_text(errors="replace")
        ending = shutdown_ending(self.name, text, self.main_pid, self.proc.returncode)
        log(f"{self.name}: stopped by SIGTERM in {took:.1f} s, gracefully ({ending}), no process left")
        return took

    def kill(self) -> None:
        """Cleanup after a failure: SIGKILL to every process of the container and to buildah."""
        if self.mount_ns:
            for pid in self.processes():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@dataclasses.dataclass
class TourState:
    """What the first container stored, to be found again by the second."""

    graph_id: str = ""
    points_id: str = ""
    mst_job: str = ""
    hdbscan_job: str = ""
    mst_json: dict[str, Any] = dataclasses.field(default_factory=dict)
    mst_npz: bytes = b""
    hdbscan_json: dict[str, Any] = dataclasses.field(default_factory=dict)


def ok_json(response: httpx.Response, status: int) -> Any:
    expect(
        response.status_code == status,
        f"{response.request.method} {response.request.url.path} answered {response.status_code}, "
        f"not {status}: {response.text[:400]}",
    )
    return response.json()


def npz_arrays(body: bytes) -> set[str]:
    with zipfile.ZipFile(io.BytesIO(body)) as npz:
        return set(npz.namelist())


def tour_first(client: httpx.Client, state: TourState) -> None:
    """The README's API tour: a graph and its MST, a one-shot MST, a point set and its HDBSCAN*."""
    expect(client.get("/healthz").status_code == 200, "/healthz is not 200")
    response = client.post("/v1/graphs", json=README_GRAPH)
    graph = ok_json(response, 201)
    expect(response.headers.get("location") == f"/v1/graphs/{graph['id']}", "no Location for the graph")
    state.graph_id = graph["id"]
    job = ok_json(client.post(f"/v1/graphs/{state.graph_id}/mst", params={"wait": 30}), 200)
    expect(job["status"] == "succeeded", f"the MST job is {job['status']}: {job.get('error')}")
    expect(
        job["result"]["num_edges"] == 3 and job["result"]["total_weight"] == 4.0,
        f"MST summary {job['result']}",
    )
    state.mst_job = job["id"]
    state.mst_json = ok_json(client.get(f"/v1/jobs/{state.mst_job}/result"), 200)
    expect(state.mst_json["edge_ids"] == [0, 1, 2], f"MST edge ids {state.mst_json['edge_ids']}")
    expect(state.mst_json["weights"] == [1.0, 2.0, 1.0], f"MST weights {state.mst_json['weights']}")
    npz = client.get(f"/v1/jobs/{state.mst_job}/result", headers={"Accept": "application/octet-stream"})
    expect(npz.status_code == 200, f"the MST result as .npz answered {npz.status_code}")
    state.mst_npz = npz.content
    expect({"edge_ids.npy", "weights.npy"} <= npz_arrays(state.mst_npz), "the .npz lacks edge_ids or weights")
    log(f"graph {state.graph_id}: MST edge ids [0, 1, 2], total weight 4.0; job {state.mst_job}")

    oneshot = client.post(
        "/v1/mst",
        params={"format": "edgelist"},
        headers={"Content-Type": "application/octet-stream"},
        content=README_EDGELIST,
    )
    forest = ok_json(oneshot, 200)
    expect(forest["edge_ids"] == [1, 2, 3] and forest["num_components"] == 2, f"one-shot MST {forest}")
    log("one-shot MST of the edge list: edge ids [1, 2, 3], 2 components")

    response = client.post("/v1/points", json={"points": README_POINTS})
    points = ok_json(response, 201)
    state.points_id = points["id"]
    job = ok_json(
        client.post(
            f"/v1/points/{state.points_id}/jobs",
            params={"wait": 30},
            json={"task": "hdbscan", "params": {"min_cluster_size": 2}},
        ),
        200,
    )
    expect(job["status"] == "succeeded", f"the HDBSCAN* job is {job['status']}: {job.get('error')}")
    state.hdbscan_job = job["id"]
    state.hdbscan_json = ok_json(client.get(f"/v1/jobs/{state.hdbscan_job}/result"), 200)
    expect(state.hdbscan_json["labels"] == HDBSCAN_LABELS, f"HDBSCAN* labels {state.hdbscan_json['labels']}")
    expect(
        state.hdbscan_json["probabilities"] == HDBSCAN_PROBABILITIES,
        f"HDBSCAN* probabilities {state.hdbscan_json['probabilities']}",
    )
    log(f"point set {state.points_id}: HDBSCAN* labels {HDBSCAN_LABELS}; job {state.hdbscan_job}")


def tour_again(client: httpx.Client, state: TourState) -> None:
    """After a restart on the same volume: the same datasets and results, and the same new forest."""
    graph = ok_json(client.get(f"/v1/graphs/{state.graph_id}"), 200)
    expect(graph["num_edges"] == 4, f"the graph came back as {graph}")
    ok_json(client.get(f"/v1/points/{state.points_id}"), 200)
    old = ok_json(client.get(f"/v1/jobs/{state.mst_job}"), 200)
    expect(old["status"] == "succeeded", f"the earlier MST job is now {old['status']}")
    expect(
        ok_json(client.get(f"/v1/jobs/{state.mst_job}/result"), 200) == state.mst_json,
        "the MST result changed",
    )
    npz = client.get(f"/v1/jobs/{state.mst_job}/result", headers={"Accept": "application/octet-stream"})
    expect(npz.status_code == 200 and npz.content == state.mst_npz, "the MST result's .npz bytes changed")
    hdbscan = ok_json(client.get(f"/v1/jobs/{state.hdbscan_job}/result"), 200)
    expect(hdbscan == state.hdbscan_json, "the HDBSCAN* result changed")
    job = ok_json(client.post(f"/v1/graphs/{state.graph_id}/mst", params={"wait": 30}), 200)
    expect(job["status"] == "succeeded", f"the new MST job is {job['status']}: {job.get('error')}")
    again = ok_json(client.get(f"/v1/jobs/{job['id']}/result"), 200)
    expect(
        (again["edge_ids"], again["weights"]) == (state.mst_json["edge_ids"], state.mst_json["weights"]),
        f"the new job's forest {again} differs from the first {state.mst_json}",
    )
    log("second container: graph, point set, both results (JSON, .npz bytes) as before; new MST job the same")


def data_owners(data: Path) -> set[int]:
    return {p.stat().st_uid for p in data.rglob("*")} | {data.stat().st_uid}


class Run:
    """One run of the checks: the work folder, the store, the containers to clean up."""

    def __init__(self, work: Path, driver: str) -> None:
        self.work = work
        self.logs = work / "logs"
        self.logs.mkdir(parents=True)
        self.b = Buildah(work, driver, self.logs)
        self.containers: list[Container] = []
        self.timings = Timings()

    def container(self, image: str, config: ImageConfig, name: str, data: Path) -> Container:
        container = Container(self.b, image, config, name, data)
        self.containers.append(container)
        return container

    def volume(self, name: str, config: ImageConfig) -> Path:
        """A folder for /data. A Docker named volume takes the owner of the image's /data: its user."""
        data = self.work / name
        data.mkdir()
        os.chown(data, config.uid, config.gid)
        return data

    def serve(self, image: str, variant: str, restart: bool) -> None:
        """Start, tour, stop; with ``restart``, a second container on the same volume."""
        config = ImageConfig.read(self.b, image)
        expect(config.volumes == ["/data"], f"the image's volumes are {config.volumes}")
        data = self.volume(f"data-{variant}", config)
        state = TourState()
        for n in (1, 2) if restart else (1,):
            with self.timings.stage(f"{variant}: container {n}: create, start, healthy"):
                ctr = self.container(image, config, f"mst-ci-{variant}-{n}", data)
                ctr.start()
                ctr.wait_healthy(limit_s=180)
                ctr.check_unprivileged()
            with (
                self.timings.stage(f"{variant}: container {n}: API tour"),
                httpx.Client(base_url=f"http://127.0.0.1:{ctr.port}", timeout=60) as client,
            ):
                tour_first(client, state) if n == 1 else tour_again(client, state)
            with self.timings.stage(f"{variant}: container {n}: stop (SIGTERM)"):
                ctr.stop()
            expect((data / "mst.sqlite3").is_file(), f"the service wrote no mst.sqlite3 to the volume {data}")
            owners = data_owners(data)
            expect(owners == {config.uid}, f"the volume holds files of uids {owners}, not only {config.uid}")
        self.refuses_unwritable_volume(ctr)

    def refuses_unwritable_volume(self, ctr: Container) -> None:
        """The entrypoint stops, with its message, on a volume the image's user cannot write."""
        root_owned = self.work / f"data-root-owned-{ctr.name}"
        root_owned.mkdir(mode=0o755)
        argv = self.b.cmd(*ctr.run_args(volume=root_owned), *ctr.config.entrypoint, *ctr.config.cmd)
        # The entrypoint exits at once, and a runtime can lose a short-lived process's last output
        # (the class of containerd#770, concourse#6775): on a loaded host (pytest beside it) buildah
        # once relayed none of it (exit 1, only buildah's own lines). So a failed run without the
        # message is run again, up to three times; a run that succeeds, or never says why it stops,
        # still fails the check.
        for _ in range(3):
            done = subprocess.run(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60, check=False
            )
            said = done.stdout.decode(errors="replace")
            if done.returncode == 0 or "is not a folder writable by uid" in said:
                break
            log(f"the refusal's run said nothing of the entrypoint's (exit {done.returncode}); again")
        expect(
            done.returncode != 0 and "is not a folder writable by uid" in said,
            f"the entrypoint did not refuse a root-owned volume (exit {done.returncode}): {said[-400:]}",
        )
        log("the entrypoint refuses a volume owned by root: " + said.splitlines()[0][:120])

    def imports(self, image: str, variant: str) -> str:
        """The image's Python imports what the variant ships, and has every kernel as package data."""
        config = ImageConfig.read(self.b, image)
        data = self.volume(f"data-{variant}-imports", config)
        ctr = self.container(image, config, f"mst-ci-{variant}-imports", data)
        modules = ["cupy"] if variant == "gpu" else []
        modules += ["numba", "pyarrow", "gpu_core", "service", "service.app"]
        argv = self.b.cmd(*ctr.run_args(), "python", "-c", IMPORTS_CHECK, *modules)
        done = subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120, check=False
        )
        said = done.stdout.decode(errors="replace").strip()
        expect(
            done.returncode == 0,
            f"imports in the {variant} image failed (exit {done.returncode}): {said[-1500:]}",
        )
        kernels, versions = said.splitlines()[-2:]
        wanted = " ".join(sorted(p.name for p in (REPO / "gpu_core" / "kernels").glob("*.cu")))
        expect(kernels == wanted, f"the {variant} image's gpu_core/kernels has {kernels!r}, not {wanted!r}")
        log(f"{variant} image: {versions}; gpu_core/kernels: {kernels}")
        return versions

    def print_logs(self) -> None:
        for path in sorted(self.logs.glob("mst-ci-*.log")):
            print_tail(path, 200)

    def cleanup(self, keep: bool) -> None:
        for ctr in self.containers:
            ctr.kill()
        if keep:
            log(f"kept {self.work}: {' '.join(self.b.globals)} images / containers")
            return
        for args in (("rm", "--all"), ("rmi", "--all", "--force")):
            subprocess.run(self.b.cmd(*args), stdout=subprocess.DEVNULL, check=False)
        shutil.rmtree(self.work, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--gpu", action="store_true", help="also build and check the default GPU variant")
    parser.add_argument("--keep", action="store_true", help="keep the work folder, its images and logs")
    parser.add_argument(
        "--storage-driver",
        choices=("auto", "overlay", "vfs"),
        default="auto",
        help="buildah's storage driver (auto: overlay where the kernel mounts one, else vfs)",
    )
    parser.add_argument("--work-dir", type=Path, help="the parent of the work folder (default /var/tmp)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print(
            "ci_image.py: run as root (buildah's chroot isolation and a volume of uid 10001)", file=sys.stderr
        )
        return 2
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="mst-ci-image.", dir=args.work_dir or "/var/tmp"))
    # buildah keeps each run's bundle in TMPDIR; one killed after a failure leaves it there.
    (work / "tmp").mkdir()
    os.environ["TMPDIR"] = str(work / "tmp")
    driver = storage_driver(work) if args.storage_driver == "auto" else args.storage_driver
    log(f"work folder {work}, storage driver {driver}")
    run = Run(work, driver)
    figures: list[str] = []
    try:
        with run.timings.stage("tools (buildah, mmdebstrap)"):
            ensure_tools()
        with run.timings.stage("base: mmdebstrap --variant=minbase bookworm"):
            make_base(run.b)
        volumes = build_volumes(work)
        variants = [("cpu", "scipy")] + ([("gpu", "gpu")] if args.gpu else [])
        for variant, extra in variants:
            image = f"localhost/mst-service:ci-{variant}"
            with run.timings.stage(f"{variant}: build (GPU_EXTRA={extra})"):
                build(run.b, image, extra, volumes)
            figures.append(f"{variant} image (GPU_EXTRA={extra}): {run.b.image_size(image)}")
            with run.timings.stage(f"{variant}: imports"):
                figures.append(f"{variant} image: " + run.imports(image, variant))
            run.serve(image, variant, restart=variant == "cpu")
    except (CheckFailed, subprocess.SubprocessError, httpx.HTTPError, OSError) as exc:
        run.print_logs()
        log(f"FAILED: {type(exc).__name__}: {exc}")
        run.cleanup(args.keep)
        return 1
    except BaseException:
        run.cleanup(args.keep)
        raise
    with run.timings.stage("cleanup"):
        run.cleanup(args.keep)
    print("\n".join(["", "image check passed", *figures]))
    for name, seconds in run.timings.stages.items():
        print(f"  {seconds:6.1f} s  {name}")
    print(f"  {time.monotonic() - started:6.1f} s  in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
