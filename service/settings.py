"""The service's one settings object, read once at start-up from ``MST_*`` environment variables.

>>> Settings(port=9000).port
9000

Every field can be set as ``MST_<NAME>`` (``MST_PORT=9000``, ``MST_BACKEND=cpu``,
``MST_GPUS=0,1``). Validators refuse values that would make the service unsafe
or useless (a port out of range, a limit of zero, a heartbeat timeout shorter
than the heartbeat).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from .api_keys import check_api_key, read_key_file

GiB = 1 << 30
MiB = 1 << 20

#: settings that existed once and are gone: an environment that still sets one starts as without it,
#: with one warning each (see :func:`retired_settings`)
RETIRED_SETTINGS = {
    "MST_FAST_LANE": "the plain-ASGI lane of the job routes was removed: every request goes through "
    "the FastAPI routes, with the same answers (the lane bought 4 % jobs/s at 64 clients on an H200, "
    "short of the 20 % a second path must buy; bench/results/lanes-h200/README.md)",
    "MST_API_PROCESSES": "the front processes were removed: one process serves HTTP (they bought 4 % "
    "jobs/s at 64 clients on an H200, short of the 20 % a second path must buy; "
    "bench/results/lanes-h200/README.md)",
}


def retired_settings(environ: Mapping[str, str]) -> list[str]:
    """A warning for each retired setting ``environ`` still sets (it is ignored)."""
    return [
        f"{name} is set but no longer exists, so it is ignored: {why}. Unset it."
        for name, why in RETIRED_SETTINGS.items()
        if name in environ
    ]


class Settings(BaseSettings):
    """Configuration of ``python -m service``; see the field descriptions."""

    model_config = SettingsConfigDict(env_prefix="MST_", frozen=True, extra="ignore")

    host: str = Field(default="127.0.0.1", description="Address uvicorn binds to.")
    port: int = Field(default=8000, ge=1, le=65535, description="TCP port uvicorn listens on.")
    data_dir: Path = Field(
        default=Path(".data"),
        description="Folder for the SQLite database and the spool of graphs and results.",
    )
    backend: Literal["auto", "gpu", "cpu"] = Field(
        default="auto", description="'gpu' needs CuPy and a CUDA device; 'auto' uses them when present."
    )
    gpus: Annotated[list[int] | None, NoDecode] = Field(
        default=None, description="GPU ordinals to run one worker each on (e.g. '0,1'); default: all visible."
    )
    cpu_workers: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Worker processes on the CPU backend (each holds its own graphs; a sharded graph "
        "spreads over them as over GPUs).",
    )
    shard_edges_above: int = Field(
        default=0,
        ge=0,
        description="Shard every uploaded graph of more edges than this across all workers (when there "
        "are two or more); 0: shard only graphs that do not fit one worker.",
    )
    max_upload_bytes: int = Field(
        default=4 * GiB, gt=0, description="Largest binary upload body (413 above)."
    )
    max_json_bytes: int = Field(
        default=256 * MiB,
        gt=0,
        description="Largest JSON upload body (413 above); use a binary upload for more.",
    )
    max_text_bytes: int = Field(
        default=256 * MiB,
        gt=0,
        description="Largest text upload (edgelist, mtx, dimacs; 413 above): parsing text takes tens of "
        "times its size in memory; npz and egr uploads have no such cost.",
    )
    max_edges: int = Field(
        default=(1 << 32) - 1,
        gt=0,
        description="Most edges one graph may have (413 above); the GPU engine's limit is 2^32 - 1.",
    )
    worker_memory_bytes: int = Field(
        default=0,
        ge=0,
        description="Memory each worker may fill with graphs (bytes); 0: its device's (host memory on the "
        "CPU backend). Uploads are admitted against it; idle graphs are evicted to make room.",
    )
    max_vertices: int = Field(
        default=(1 << 31) - 1,
        gt=0,
        description="Most vertices one graph may have (413 above), checked before anything of that size "
        "is allocated; the default is the GPU backend's 32-bit limit.",
    )
    max_inflated_bytes: int = Field(
        default=16 * GiB,
        gt=0,
        description="Most bytes an .npz (or Parquet) upload may inflate to, together (413 above).",
    )
    max_compression_ratio: float = Field(
        default=100.0,
        ge=1,
        description="Most an .npz or Parquet upload may inflate relative to its size (413 above); files that "
        "inflate to at most 16 MiB are not held to it.",
    )
    max_wait_s: float = Field(default=300.0, ge=0, description="Cap on ?wait=SECONDS of job submissions.")
    heartbeat_interval_s: float = Field(default=0.5, gt=0, description="How often a worker beats.")
    heartbeat_timeout_s: float = Field(
        default=15.0, gt=0, description="A worker whose heartbeat is older than this is killed and restarted."
    )
    worker_start_timeout_s: float = Field(
        default=300.0, gt=0, description="How long a new worker may take to import, warm up and answer."
    )
    standby_worker: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Keep a warmed-up spare process beside each local worker, which takes over at once "
        "when the worker dies (its graphs reload in the background); it costs a CUDA context (a few "
        "hundred MiB of device memory) and a process's host memory. 'auto': for GPU workers only.",
    )
    worker_pool: Literal["local", "ray"] = Field(
        default="local",
        description="'local': worker processes on this host (one per GPU). 'ray': each worker is a Ray "
        "actor (one GPU each) of the cluster at MST_RAY_ADDRESS, on any of its hosts; needs the "
        "extra mst-service[ray] and MST_DATA_DIR on storage every host mounts at the same path.",
    )
    ray_address: str | None = Field(
        default=None,
        description="With MST_WORKER_POOL=ray: the cluster to join ('auto': the one started on this host "
        "with `ray start`; 'ray://...' is not supported); unset: start a local Ray cluster.",
    )
    ray_workers: int = Field(
        default=0,
        ge=0,
        description="With MST_WORKER_POOL=ray: how many worker actors; 0: one per GPU of the cluster "
        "(MST_BACKEND=cpu, or none: one CPU actor).",
    )
    dispatch_depth: int = Field(
        default=16,
        ge=1,
        le=32,
        description="Jobs handed to a worker at once (in its pipe or running): the worker computes the "
        "next without waiting for the API between jobs. A handed job can no longer be cancelled. "
        "1: one job at a time.",
    )
    coalesce_jobs: bool = Field(
        default=True,
        description="A worker answers identical jobs (same dataset, task, parameters and weights) that "
        "wait back to back in its pipe with one computation; each job still gets its own result file.",
    )
    max_result_bytes: int = Field(
        default=32 << 30,
        ge=0,
        description="Bytes the spool's result files may take together; past it the least recently used "
        "are removed, and a request for one of them computes it again from the stored graph (410 if "
        "the graph was deleted or its weights changed since). 0: no cap.",
    )
    oneshot_batch_edges: int = Field(
        default=1 << 20,
        ge=0,
        le=1 << 30,
        description="One-shot computations (POST /v1/mst) waiting together in a worker's pipe are "
        "computed as one disjoint-union graph of up to this many edges (the forest of a disjoint union "
        "is the union of the forests: the answers are exact); 0: each on its own.",
    )
    oneshot_inline_bytes: int = Field(
        default=1 << 20,
        ge=0,
        le=16 << 20,
        description="A one-shot forest (POST /v1/mst) of at most this many bytes (edge ids and weights) "
        "comes back from the worker in its reply, without a result file; larger ones go through a file "
        "in the spool. 0: always a file.",
    )
    worker_spin_ms: float = Field(
        default=2.0,
        ge=0,
        le=1000,
        description="After each request a worker polls for the next one this long before it sleeps "
        "(0: sleeps at once): no wake-up on the hot path, a busy core meanwhile.",
    )
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default=[],
        description="API keys (comma-separated, at least 16 characters each); with these or "
        "MST_API_KEYS_FILE every route but /healthz and /readyz needs 'Authorization: Bearer <key>'. "
        "Unset (and no file): no authentication.",
    )
    api_keys_file: Path | None = Field(
        default=None,
        description="File of API keys as SHA-256 hashes: one '<sha256-hex> [owner]' per line, '#' comments.",
    )
    quota_graphs: int = Field(default=0, ge=0, description="Most graphs one API key may store (0: no limit).")
    quota_device_bytes: int = Field(
        default=0, ge=0, description="Most device bytes one API key's graphs may hold together (0: no limit)."
    )
    quota_queued_jobs: int = Field(
        default=0, ge=0, description="Most queued or running jobs one API key may have (0: no limit)."
    )
    max_queued_jobs: int = Field(
        default=10_000,
        gt=0,
        description="Most jobs (one-shot computations included) queued on all workers together, not "
        "counting those handed to a worker (MST_DISPATCH_DEPTH each); 503 with Retry-After above.",
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = Field(
        default="info", description="Log level of uvicorn and the service."
    )

    @field_validator("gpus", mode="before")
    @classmethod
    def _split_gpus(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if text in ("", "all"):
                return None
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("gpus")
    @classmethod
    def _check_gpus(cls, value: list[int] | None) -> list[int] | None:
        if value is not None:
            if not value:
                raise ValueError("MST_GPUS must name at least one GPU ordinal, or be unset for all.")
            if any(g < 0 for g in value) or len(set(value)) != len(value):
                raise ValueError(f"MST_GPUS must list distinct non-negative ordinals, got {value}.")
        return value

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_api_keys(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",")] if value.strip() else []
        return value

    @field_validator("api_keys")
    @classmethod
    def _check_api_keys(cls, value: list[SecretStr]) -> list[SecretStr]:
        for position, key in enumerate(value, 1):
            check_api_key(key.get_secret_value(), f"key {position} of MST_API_KEYS")
        return value

    @field_validator("api_keys_file")
    @classmethod
    def _check_api_keys_file(cls, value: Path | None) -> Path | None:
        if value is not None:
            read_key_file(value)  # refuses an unreadable file or a malformed line at start-up
        return value

    @field_validator("data_dir")
    @classmethod
    def _check_data_dir(cls, value: Path) -> Path:
        resolved = value.expanduser().resolve()
        if resolved == Path(resolved.anchor):
            raise ValueError("MST_DATA_DIR must not be the file-system root; pick a folder of its own.")
        return value.expanduser()

    @field_validator("worker_pool")
    @classmethod
    def _check_worker_pool(cls, value: str) -> str:
        if value == "ray" and importlib.util.find_spec("ray") is None:
            raise ValueError(
                "MST_WORKER_POOL=ray needs Ray, which is not installed: pip install 'mst-service[ray]'."
            )
        return value

    @model_validator(mode="after")
    def _check_pool_settings(self) -> Settings:
        if self.worker_pool == "ray" and self.gpus is not None:
            raise ValueError(
                "MST_GPUS picks this host's GPUs for local workers; with MST_WORKER_POOL=ray, Ray assigns "
                "each actor its GPU: unset MST_GPUS (MST_RAY_WORKERS sets how many actors)."
            )
        if self.worker_pool == "ray" and "cpu_workers" in self.model_fields_set:
            raise ValueError(
                "MST_CPU_WORKERS counts this host's CPU worker processes; with MST_WORKER_POOL=ray, "
                "MST_RAY_WORKERS sets how many actors: unset MST_CPU_WORKERS."
            )
        if self.worker_pool == "ray" and self.standby_worker == "on":
            raise ValueError(
                "MST_STANDBY_WORKER=on keeps spare local worker processes; the Ray pool has none: "
                "unset it or set MST_WORKER_POOL=local."
            )
        ray_only = {"ray_address", "ray_workers"} & self.model_fields_set
        if self.worker_pool != "ray" and ray_only:
            names = " and ".join(sorted(f"MST_{name.upper()}" for name in ray_only))
            raise ValueError(
                f"{names} set, but MST_WORKER_POOL is not ray: set MST_WORKER_POOL=ray or unset them."
            )
        return self

    @model_validator(mode="after")
    def _check_heartbeat(self) -> Settings:
        if self.heartbeat_timeout_s <= 2 * self.heartbeat_interval_s:
            raise ValueError(
                "MST_HEARTBEAT_TIMEOUT_S must be more than twice MST_HEARTBEAT_INTERVAL_S, "
                f"got {self.heartbeat_timeout_s} and {self.heartbeat_interval_s}."
            )
        return self

    @property
    def database_path(self) -> Path:
        return self.data_dir / "mst.sqlite3"

    @property
    def spool_dir(self) -> Path:
        return self.data_dir / "spool"
