"""What the container image, docker compose and the README rely on exists in the repository and the package.

No Docker engine runs in CI, so the image is never built there: these tests check, without one, that
the image's command and health check exist and work, that the Dockerfile and the compose files only
name files that exist, that the wheel's package data carries the kernels, and that the README's
commands and settings match the code and .ci/run.
"""

from __future__ import annotations

import fnmatch
import http.server
import importlib.metadata
import importlib.resources
import importlib.util
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HEALTHCHECK = ROOT / "docker" / "healthcheck.py"
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"


def _pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def _dockerfile() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (KEYWORD, arguments), continuation lines joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).strip().partition(" ")
        instructions.append((keyword.upper(), args.strip()))
        pending = ""
    return instructions


def _instruction(keyword: str) -> list[str]:
    return [args for kw, args in _dockerfile() if kw == keyword]


def _exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def _compose(path: Path) -> dict[str, Any]:
    class ComposeLoader(yaml.SafeLoader):
        """Knows Compose's merge tags (`!override`, `!reset`), which are not content."""

    def plain(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node, deep=True)
        assert isinstance(node, yaml.ScalarNode)
        return loader.construct_scalar(node)

    ComposeLoader.add_constructor("!override", plain)
    ComposeLoader.add_constructor("!reset", plain)
    data = yaml.load(path.read_text(encoding="utf-8"), Loader=ComposeLoader)
    assert isinstance(data, dict)
    return data


# --- the command the image runs -------------------------------------------------------------------


def test_console_script_is_declared_and_resolves() -> None:
    scripts = _pyproject()["project"]["scripts"]
    assert scripts["mst-service"] == "service.__main__:main"
    (entry,) = [
        ep for ep in importlib.metadata.entry_points(group="console_scripts") if ep.name == "mst-service"
    ]
    assert entry.value == "service.__main__:main"
    assert callable(entry.load())


def test_python_m_service_is_runnable() -> None:
    assert importlib.util.find_spec("service.__main__") is not None


def test_image_runs_the_console_script_through_the_entrypoint() -> None:
    (entrypoint,) = _instruction("ENTRYPOINT")
    (cmd,) = _instruction("CMD")
    assert _exec_form(entrypoint) == ["/app/docker/entrypoint.sh"]
    assert _exec_form(cmd) == ["mst-service"]
    assert "mst-service" in _pyproject()["project"]["scripts"]


def test_entrypoint_is_an_executable_posix_script() -> None:
    assert os.access(ENTRYPOINT, os.X_OK), "docker/entrypoint.sh must be executable (git mode 100755)"
    assert ENTRYPOINT.read_text(encoding="utf-8").startswith("#!/bin/sh\n")
    subprocess.run(["sh", "-n", str(ENTRYPOINT)], check=True)


def test_entrypoint_runs_another_command_as_given() -> None:
    out = subprocess.run([str(ENTRYPOINT), "echo", "hello"], capture_output=True, text=True, check=True)
    assert out.stdout == "hello\n"


def test_entrypoint_refuses_a_data_dir_it_cannot_use(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {**os.environ, "MST_DATA_DIR": str(blocker / "data")}
    out = subprocess.run([str(ENTRYPOINT)], capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 1
    assert "MST_DATA_DIR" in out.stderr and "not a folder writable" in out.stderr


# --- the health check ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _run_healthcheck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HEALTHCHECK), *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def readyz_server() -> Iterator[tuple[int, dict[str, int]]]:
    """A stand-in server whose /readyz answers `state["status"]`."""
    state = {"status": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status = state["status"] if self.path == "/readyz" else 404
            body = b'{"ready": true}' if status == 200 else b'{"ready": false}'
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_healthcheck_fails_on_a_closed_port() -> None:
    port = _free_port()
    out = _run_healthcheck(f"http://127.0.0.1:{port}/readyz")
    assert out.returncode == 1
    assert "unreachable" in out.stderr


def test_healthcheck_passes_when_ready_and_fails_when_not(readyz_server: tuple[int, dict[str, int]]) -> None:
    port, state = readyz_server
    url = f"http://127.0.0.1:{port}/readyz"
    assert _run_healthcheck(url).returncode == 0
    state["status"] = 503
    out = _run_healthcheck(url)
    assert out.returncode == 1
    assert "503" in out.stderr


def test_healthcheck_default_url_follows_mst_port(readyz_server: tuple[int, dict[str, int]]) -> None:
    port, _ = readyz_server
    assert _run_healthcheck(env={"MST_PORT": str(port)}).returncode == 0


def test_entrypoint_serves_until_the_healthcheck_passes_and_stops_on_sigterm(tmp_path: Path) -> None:
    """What the container does, without a container: entrypoint -> mst-service -> /readyz 200 -> stop."""
    port = _free_port()
    scripts = Path(sys.executable).parent  # the venv's bin/, where pip put mst-service
    assert (scripts / "mst-service").exists()
    env = {
        **os.environ,
        "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}",
        "MST_HOST": "127.0.0.1",
        "MST_PORT": str(port),
        "MST_DATA_DIR": str(tmp_path / "data"),
        "MST_BACKEND": "cpu",
    }
    log = (tmp_path / "service.log").open("w+")
    server = subprocess.Popen([str(ENTRYPOINT)], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            check = _run_healthcheck(env={"MST_PORT": str(port)})
            if check.returncode == 0:
                break
            assert server.poll() is None, "the service exited early:\n" + Path(log.name).read_text()
            assert time.monotonic() < deadline, "not ready after 90 s:\n" + Path(log.name).read_text()
            time.sleep(0.5)
        assert (tmp_path / "data").is_dir()
        server.send_signal(signal.SIGTERM)  # what `docker stop` sends
        # uvicorn shuts down gracefully, then re-raises the signal it caught: 0 or -SIGTERM.
        assert server.wait(timeout=30) in (0, -signal.SIGTERM)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)
        log.close()
    assert "entrypoint:" in Path(log.name).read_text()


def test_image_and_compose_health_checks_run_the_shipped_script() -> None:
    (healthcheck,) = _instruction("HEALTHCHECK")
    options, _, cmd = healthcheck.partition(" CMD ")
    assert "--start-period=" in options
    image_test = _exec_form(cmd.strip())
    assert image_test == ["/opt/venv/bin/python", "/app/docker/healthcheck.py"]
    service = _compose(ROOT / "docker-compose.yml")["services"]["mst"]
    assert service["healthcheck"]["test"] == ["CMD", *image_test]


# --- the Dockerfile and compose files name files that exist ------------------------------------------


def test_dockerfile_copies_only_files_that_exist() -> None:
    copies = _instruction("COPY")
    assert copies, "the Dockerfile copies nothing"
    copied: dict[str, str] = {}
    for args in copies:
        words = [w for w in shlex.split(args) if not w.startswith("--")]
        *sources, dest = words
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
            target = dest + Path(source).name if dest.endswith("/") else dest
            copied[target] = source
    assert copied.get("/app/docker/entrypoint.sh") == "docker/entrypoint.sh"
    assert copied.get("/app/docker/healthcheck.py") == "docker/healthcheck.py"
    # The dependency layer comes before the source layer.
    order = [w for args in copies for w in shlex.split(args)]
    assert order.index("pyproject.toml") < order.index("gpu_core/") < order.index("docker/entrypoint.sh")


def test_dockerfile_base_user_port_volume_and_nvidia_settings() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    base = re.search(r"^ARG CUDA_IMAGE=(\S+)$", text, re.M)
    assert base and re.fullmatch(r"nvidia/cuda:13\.\d+\.\d+-runtime-ubuntu\d+\.\d+", base.group(1))
    (user,) = _instruction("USER")
    assert user.split(":")[0] not in ("0", "root")
    assert _instruction("EXPOSE") == ["8000"]
    assert _instruction("VOLUME") == ['["/data"]']
    env = " ".join(_instruction("ENV"))
    for setting in (
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
        "MST_PORT=8000",
        "MST_DATA_DIR=/data",
        "MST_HOST=0.0.0.0",
    ):
        assert setting in env


def test_compose_service_gpu_volume_restart_and_files() -> None:
    compose = _compose(ROOT / "docker-compose.yml")
    service = compose["services"]["mst"]
    assert (ROOT / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
    (device,) = service["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert service["restart"] in ("always", "unless-stopped", "on-failure")
    assert service["volumes"] == ["mst-data:/data"] and "mst-data" in compose["volumes"]
    assert service["environment"]["MST_DATA_DIR"] == "/data"
    assert service["ports"][0].endswith(":" + service["environment"]["MST_PORT"])
    (env_file,) = service["env_file"]
    assert env_file["required"] is False
    assert (ROOT / (env_file["path"] + ".example")).is_file(), "ship an example of the optional env file"


def test_multi_gpu_override_reserves_every_gpu() -> None:
    override = _compose(ROOT / "docker" / "compose.multi-gpu.yml")
    assert set(override["services"]) <= set(_compose(ROOT / "docker-compose.yml")["services"])
    (device,) = override["services"]["mst"]["deploy"]["resources"]["reservations"]["devices"]
    assert device == {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}
    assert "devices: !override" in (ROOT / "docker" / "compose.multi-gpu.yml").read_text(encoding="utf-8")


def test_ray_compose_runs_the_ray_pool_on_one_shared_data_dir() -> None:
    path = ROOT / "docker" / "compose.ray.yml"
    compose = _compose(path)
    api, worker = compose["services"]["mst"], compose["services"]["ray-worker"]
    for service in (api, worker):
        build = service["build"]
        assert (path.parent / build["context"] / build["dockerfile"]).is_file()
        assert build["args"]["EXTRAS"].split() == ["ray"]
        assert "ray" in _pyproject()["project"]["optional-dependencies"]
        assert service["volumes"] == ["mst-data:/data"] and service["network_mode"] == "host"
        assert service["environment"]["RAY_AUTH_MODE"] == "token"
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device == {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}
    assert compose["volumes"]["mst-data"]["driver_opts"]["type"] == "nfs"  # storage every host sees
    env = api["environment"]
    assert (env["MST_WORKER_POOL"], env["MST_RAY_ADDRESS"], env["MST_DATA_DIR"]) == ("ray", "auto", "/data")
    assert {"worker_pool", "ray_address"} <= _settings_fields()
    (head,) = api["command"]
    assert head.startswith("ray start --head --port=6379 ")
    assert head.endswith("exec /app/docker/entrypoint.sh")
    assert any(arg.startswith("--address=") and arg.endswith(":6379") for arg in worker["command"])
    assert "ray-worker" in path.read_text(encoding="utf-8").split("# On every other GPU host")[1]


# --- package data ------------------------------------------------------------------------------------


def test_package_data_includes_every_kernel() -> None:
    package_data = _pyproject()["tool"]["setuptools"]["package-data"]["gpu_core"]
    kernels = sorted((ROOT / "gpu_core" / "kernels").glob("*.cu"))
    assert kernels, "gpu_core/kernels holds no .cu file"
    for kernel in kernels:
        relative = kernel.relative_to(ROOT / "gpu_core").as_posix()
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in package_data), relative
    installed = importlib.resources.files("gpu_core").joinpath("kernels")
    assert {k.name for k in kernels} <= {p.name for p in installed.iterdir()}


# --- README, .ci/run and the settings agree -----------------------------------------------------------


def _readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_test_command_is_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    block = re.search(r"# >>> readme-test-command\n(.*?)# <<< readme-test-command", ci, re.S)
    assert block, ".ci/run lost its readme-test-command markers"
    lines = [line for line in block.group(1).splitlines() if line and not line.startswith("tests_rc=0")]
    (line,) = lines
    command = line.removesuffix(" || tests_rc=$?")
    assert command != line, "CI must capture the command's exit status"
    assert f"\n{command}\n" in _readme()


def _settings_fields() -> set[str]:
    from service.settings import Settings

    return set(Settings.model_fields)


def test_settings_reference_lists_every_setting() -> None:
    # docs/settings.md is generated from Settings (tools/docs_gen.py; tests/test_docs.py checks it is current)
    text = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `MST_([A-Z0-9_]+)` \|", text, re.M))
    assert documented == {name.upper() for name in _settings_fields()}


def test_env_example_names_only_real_settings() -> None:
    text = (ROOT / "docker" / "mst.env.example").read_text(encoding="utf-8")
    named = set(re.findall(r"^#? ?MST_([A-Z0-9_]+)=", text, re.M))
    assert named
    assert named <= {name.upper() for name in _settings_fields()}


def _ci_image() -> Any:
    spec = importlib.util.spec_from_file_location("ci_image", ROOT / "docker" / "ci_image.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ci_image"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


STOPPED_LOG = """\
INFO:     Application shutdown complete.
INFO:     Finished server process [2078]
subprocess exited on terminated
subprocess exited with status 1
Error: exit status 1
"""


@pytest.mark.parametrize(
    ("log", "ending"),
    [
        (STOPPED_LOG, "SIGTERM"),
        (STOPPED_LOG.replace("on terminated", "with status 0"), "status 0"),
        # buildah lost its innermost report (seen in CI): a silent graceful end, then only "status 1"
        (
            STOPPED_LOG.replace("subprocess exited on terminated\n", ""),
            "SIGTERM, buildah's report of it lost",
        ),
    ],
)
def test_image_check_reads_how_the_service_ended(log: str, ending: str) -> None:
    assert _ci_image().shutdown_ending("c", log, 2078, 1) == ending


def test_image_check_takes_buildahs_exit_0_as_the_main_process_exit_0() -> None:
    ci_image = _ci_image()
    log = STOPPED_LOG.split("subprocess exited")[0]  # a process that exits 0: buildah says nothing
    assert ci_image.shutdown_ending("c", log, 2078, 0) == "status 0"
    with pytest.raises(ci_image.CheckFailed, match="did not end by SIGTERM"):
        ci_image.shutdown_ending("c", log, 2078, 1)


@pytest.mark.parametrize(
    ("log", "problem"),
    [
        (STOPPED_LOG.replace("[2078]", "[2079]"), "no graceful shutdown"),
        (
            STOPPED_LOG.replace("subprocess exited on terminated", "Traceback (most recent call last):"),
            "printed after",
        ),
        (STOPPED_LOG.replace("on terminated", "with status 1"), "did not end by SIGTERM"),
        (STOPPED_LOG.replace("on terminated", "on killed"), "did not end by SIGTERM"),
    ],
)
def test_image_check_refuses_an_unclean_end(log: str, problem: str) -> None:
    ci_image = _ci_image()
    with pytest.raises(ci_image.CheckFailed, match=problem):
        ci_image.shutdown_ending("c", log, 2078, 1)


def test_throughput_override_keeps_results_in_memory_for_the_image_user() -> None:
    override = _compose(ROOT / "docker" / "compose.throughput.yml")
    assert set(override["services"]) <= set(_compose(ROOT / "docker-compose.yml")["services"])
    service = override["services"]["mst"]
    env = service["environment"]
    assert set(env) <= {name.upper() for name in (f"MST_{f}" for f in _settings_fields())}
    (mount,) = service["tmpfs"]
    folder, _, options = mount.partition(":")
    assert env["MST_RESULT_DIR"] == folder and env["MST_MPS"] in ("auto", "on")
    (user,) = _instruction("USER")
    uid, gid = user.split(":")
    assert {f"uid={uid}", f"gid={gid}", "mode=0700"} <= set(options.split(","))
    size = next(o for o in options.split(",") if o.startswith("size="))
    assert int(env["MST_MAX_RESULT_BYTES"]) <= int(size.removeprefix("size=").removesuffix("g")) << 30
