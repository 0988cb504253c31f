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
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from .api_keys import check_api_key, read_key_file

#: the most API processes MST_API_WORKERS may ask for
MAX_API_WORKERS = 64

GiB = 1 << 30
MiB = 1 << 20

#: settings that existed once and are gone: an environment that still sets one starts as without it,
#: with one warning each (see :func:`retired_settings`)
RETIRED_SETTINGS = {
    "MST_FAST_LANE": "the plain-ASGI lane of the job routes was removed: every request goes through "
    "the FastAPI routes, with the same answers (the lane bought too little to keep a second path: "
    "docs/performance.md#tried-and-dropped)",
    "MST_DISPATCH_DEPTH": "every job goes to its worker's queue as soon as it is submitted (the "
    "worker's queue is the only one, shared by every API process): there is no API-side queue to "
    "hand jobs from any more (docs/design/architecture.md)",
    "MST_API_PROCESSES": "the front processes were removed: one process serves HTTP (they bought too "
    "little to keep a second path: docs/performance.md#tried-and-dropped)",
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

    host: str = Field(default="127.0.0.1", description="Address uvicorn binds to (`0.0.0.0` in the image).")
    port: int = Field(default=8000, ge=1, le=65535, description="TCP port uvicorn listens on.")
    data_dir: Path = Field(
        default=Path(".data"),
        description="Folder for the SQLite database and the spool of graphs and results (`/data` in the "
        "image).",
    )
    result_dir: Path | None = Field(
        default=None,
        description="Folder for the succeeded jobs' result files; unset: `spool/results` in `MST_DATA_DIR`. "
        "Results are derived data: one lost (or removed by `MST_MAX_RESULT_BYTES`) is computed again "
        "from the stored graph when asked for, 410 only if the graph was deleted or its weights changed "
        "meanwhile. On a memory file system (e.g. `/dev/shm/mst-results`) answers never wait for the "
        "disk, which caps a busy GPU host at what it writes (786 KB a forest of 2^16 vertices: 2 GB/s "
        "at 2,500 jobs/s); the files then outlive the service's restarts but not the host's. Every "
        "process of the service (every host, with Ray) must reach the same folder.",
    )
    backend: Literal["auto", "gpu", "cpu"] = Field(
        default="auto",
        description="`gpu` needs CuPy and a CUDA device (without them the service does not start); `auto` "
        "uses them when present, else the CPU; `cpu` never touches CUDA.",
    )
    gpus: Annotated[list[int] | None, NoDecode] = Field(
        default=None,
        description="GPU ordinals to run workers on (`MST_WORKERS_PER_GPU` each), e.g. `0,1`; unset, "
        "empty or `all` for every visible GPU. Local pool only: with `MST_WORKER_POOL=ray`, Ray "
        "gives each actor its GPU (setting both is refused).",
    )
    api_workers: int | Literal["auto"] = Field(
        default="auto",
        description="API processes serving HTTP on the one port, each reaching every worker directly "
        "(1 to 64). `auto`: a quarter of the host's cores, at least 1 and at most 8 (one on a 2- or "
        "3-core host). `1`: one process serves HTTP and supervises the workers itself. Several need "
        "`MST_WORKER_POOL=local`. See docs/design/architecture.md.",
    )
    workers_per_gpu: int = Field(
        default=1,
        ge=1,
        le=8,
        description="Worker processes per GPU (1 to 8), each holding its own datasets in an equal share of "
        "the device's memory (unless `MST_WORKER_MEMORY_BYTES` caps each): many small datasets "
        "spread over every worker, whose jobs then run side by side. Local pool only.",
    )
    mps: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="CUDA MPS for the workers of each GPU: the service starts a control daemon of its own "
        "(`nvidia-cuda-mps-control`, its pipe in the service's private run folder) before its workers, "
        "so their kernels share the device at once instead of taking turns (one H200, 4 workers: "
        "2,260 -> 3,055 jobs/s, bench/results/scaling/README.md). `auto`: where `MST_WORKERS_PER_GPU` "
        "is above 1 and the program is found, else without (the log says why); `on`: always, and "
        "the service does not start without it; `off`: never. With `CUDA_MPS_PIPE_DIRECTORY` already "
        "set, the workers use that daemon. Local GPU workers only. Under MPS a fatal fault inside one "
        "worker's kernel ends the running jobs of every worker of that GPU (they restart), not of that "
        "worker alone.",
    )
    cpu_workers: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Worker processes on the CPU backend (1 to 64); each holds its own graphs, and a sharded "
        "graph spreads over them as over GPUs; a new graph goes to the worker holding the fewest bytes. "
        "A worker runs one job at a time: on a many-core host, several (e.g. 4 on 16 cores) serve "
        "jobs on distinct graphs at once. Local pool only (with `MST_WORKER_POOL=ray`, "
        "refused: `MST_RAY_WORKERS` counts the actors).",
    )
    shard_edges_above: int = Field(
        default=0,
        ge=0,
        description="Shard every uploaded graph of more edges than this across all workers (when there are "
        "two or more); `0`: shard only graphs that do not fit one worker.",
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
        description="Largest text upload (`edgelist`, `mtx`, `dimacs`; 413 above): parsing text takes tens "
        "of times its size in memory (about 60x for an edge list), so a large text body could "
        "exhaust the worker's memory; `npz` and `egr` have no such cost.",
    )
    max_edges: int = Field(
        default=(1 << 32) - 1,
        gt=0,
        description="Most edges one graph may have (413 above).",
    )
    worker_memory_bytes: int = Field(
        default=0,
        ge=0,
        description="Memory each worker may fill with graphs; `0`: its GPU's memory (host memory on the CPU "
        "backend). Uploads are admitted against it and idle graphs evicted to make room (docs/operations.md, "
        "'Failures and restarts').",
    )
    max_vertices: int = Field(
        default=(1 << 31) - 1,
        gt=0,
        description="Most vertices one graph may have (413 above), declared (`num_vertices`, a file's "
        "header) or implied by the largest id; checked before anything of that size is allocated. The "
        "default is the GPU backend's 32-bit limit.",
    )
    max_inflated_bytes: int = Field(
        default=16 * GiB,
        gt=0,
        description="Most bytes an `.npz` upload's members may inflate to, together, or a Parquet upload's "
        "columns may decode to (413 above). Checked on the declared sizes (the zip's central "
        "directory; Parquet's row count) before anything is inflated, and for npz also on the "
        "bytes actually inflated while reading.",
    )
    max_compression_ratio: float = Field(
        default=100.0,
        ge=1,
        description="Most an `.npz` or Parquet upload may inflate relative to its size (413 above), so a "
        "small zip bomb is refused at once; archives that inflate to at most 16 MiB are not held "
        "to it.",
    )
    max_wait_s: float = Field(default=300.0, ge=0, description="Cap on `?wait=SECONDS` of job submissions.")
    heartbeat_interval_s: float = Field(default=0.5, gt=0, description="How often a worker beats.")
    heartbeat_timeout_s: float = Field(
        default=15.0,
        gt=0,
        description="A worker whose heartbeat is older than this is killed and restarted; must exceed twice "
        "the interval.",
    )
    worker_start_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="How long a new worker may take to import, warm up and answer; also how long the "
        "requests a dead worker had not started wait for the next one before they fail `worker_lost`.",
    )
    standby_worker: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="`on`: beside each local worker a warmed-up spare process waits and takes over at once "
        "when the worker dies (its graphs reload in the background), then another spare starts "
        "once the worker is ready again. It costs what an idle worker process costs: a CUDA "
        "context on the GPU (a few hundred MiB of device memory, shown as used to the worker's "
        "admission) and the process's host memory (about 200 MB on the CPU backend, more with "
        "CuPy and a CUDA context). `auto`: on for GPU workers, off for CPU workers (a CPU worker "
        "starts in about 1 s). `off`: none. Not with `MST_WORKER_POOL=ray`. A GPU in "
        "exclusive-process compute mode takes one context only: set `off` there (three spares in a "
        "row that die before they are warm switch it off anyway). See docs/operations.md, "
        "'Failures and restarts'.",
    )
    warm_up: Literal["all", "none"] = Field(
        default="all",
        description="`all`: a new worker (at start, after a restart, a standby) runs every task once and "
        "loads every kernel before it says it is ready, so no request waits for an import or a "
        "compile (its `startup_ms` in `/readyz` say what that took). `none`: ready after its imports "
        "and the probe graph; the first request of each kind then loads what it needs itself (on the "
        "GPU its kernels, from the kernel cache or compiled; on the CPU Numba's HDBSCAN* passes): "
        "for development and tests, which start many short-lived servers.",
    )
    worker_pool: Literal["local", "ray"] = Field(
        default="local",
        description="`local`: worker processes on this host, one per GPU. `ray`: each worker is a Ray actor "
        "(one GPU each) of a Ray cluster that may span hosts; needs the `ray` extra (without it "
        "the service refuses to start and names the extra) and `MST_DATA_DIR` on storage every "
        "host mounts at the same path. See docs/operations.md, 'Many hosts: Ray'.",
    )
    ray_address: str | None = Field(
        default=None,
        description="With `MST_WORKER_POOL=ray`: the cluster to join, `auto` (the one `ray start` runs on "
        "this host) or `host:port` of its head; unset: the service starts a local Ray cluster of "
        "its own (stopped with it). Ray Client addresses (`ray://`) are not supported. Set "
        "without `MST_WORKER_POOL=ray`, refused.",
    )
    ray_workers: int = Field(
        default=0,
        ge=0,
        description="With `MST_WORKER_POOL=ray`: how many worker actors; `0`: one per GPU the cluster has at "
        "start-up (with `MST_BACKEND=cpu`, or no GPU: one CPU actor). Set without "
        "`MST_WORKER_POOL=ray`, refused.",
    )
    coalesce_jobs: bool = Field(
        default=True,
        description="Identical jobs (same dataset, task, parameters, weights) waiting back to back in a "
        "worker's pipe are answered by one computation; each still gets its own result file (a "
        "hard link of the first's), and the later ones' results say `'coalesced': true`.",
    )
    launch_ahead: int = Field(
        default=8,
        ge=0,
        le=32,
        description="A GPU worker about to compute a job's forest first starts on the device the forests of "
        "up to this many jobs queued right behind it on other graphs, so the device computes them "
        "side by side and each job's turn only collects its run (the same forests, the same order of "
        "answers). `0`: each job's forest is computed at its turn.",
    )
    max_result_bytes: int = Field(
        default=32 << 30,
        ge=0,
        description="Bytes the result files may take together (at most half of their folder's file system, "
        "whatever this says); past it the least recently used are removed, and a request for one of "
        "them computes it again from the stored graph (410 if the graph was deleted or its weights "
        "changed since). `0`: no cap.",
    )
    oneshot_batch_edges: int = Field(
        default=1 << 20,
        ge=0,
        le=1 << 30,
        description="One-shot computations (`POST /v1/mst`) waiting together in a worker's queue are "
        "computed as one disjoint-union graph of up to this many edges, each answered with exactly "
        "its own forest; `0`: each on its own. `mst_oneshot_batch_members` (in `/metrics`) counts, "
        "per one-shot, the one-shots its run computed.",
    )
    oneshot_inline_bytes: int = Field(
        default=1 << 20,
        ge=0,
        le=16 << 20,
        description="A one-shot forest of at most this many bytes (edge ids and weights) comes back from the "
        "worker in its reply and is encoded from memory; a larger one goes through a result file "
        "in the spool, as job results do. 0 to 16 MiB; `0`: always a file. Same answers either "
        "way.",
    )
    worker_spin_ms: float = Field(
        default=2.0,
        ge=0,
        le=1000,
        description="After each request (and its result file, written behind the reply) a worker "
        "polls for the next one this long before it sleeps: the next request of a busy client "
        "finds it awake (less latency per job: docs/performance.md) at the cost of a busy CPU core "
        "meanwhile; `0` sleeps at once.",
    )
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default=[],
        description="API keys, comma-separated, at least 16 visible ASCII characters each. With keys (here "
        "or in the file below) every route but `/healthz` and `/readyz` needs `Authorization: Bearer "
        "<key>`; unset, with no file: no authentication (docs/operations.md, 'API keys and quotas').",
    )
    api_keys_file: Path | None = Field(
        default=None,
        description="File of keys as SHA-256 hashes, one `<sha256-hex> [owner]` per line, `#` comments; read "
        "at start-up.",
    )
    quota_graphs: int = Field(
        default=0, ge=0, description="Most graphs one key may store (429 `quota_exceeded` above)."
    )
    quota_device_bytes: int = Field(
        default=0,
        ge=0,
        description="Most device bytes one key's graphs may hold together (413 `quota_exceeded` above).",
    )
    quota_queued_jobs: int = Field(
        default=0,
        ge=0,
        description="Most queued or running jobs (one-shot computations included) one key may have (429 "
        "`quota_exceeded` above).",
    )
    max_queued_jobs: int = Field(
        default=10_000,
        gt=0,
        description="Most jobs and one-shot computations sent to the workers and not answered yet, all "
        "workers and API processes together (the board counts them); above, 503 `queue_full` with "
        "`Retry-After: 1`.",
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = Field(
        default="info", description="`critical`, `error`, `warning`, `info` or `debug`."
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

    @field_validator("result_dir")
    @classmethod
    def _check_result_dir(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        resolved = value.expanduser().resolve()
        if resolved == Path(resolved.anchor):
            raise ValueError("MST_RESULT_DIR must not be the file-system root; pick a folder of its own.")
        if resolved.exists() and not resolved.is_dir():
            raise ValueError(f"MST_RESULT_DIR {str(value)!r} is a file, not a folder.")
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
    def _check_result_dir_apart(self) -> Settings:
        if self.result_dir is None:
            return self
        results, data = self.result_dir.resolve(), self.data_dir.resolve()
        spool = data / "spool"
        if results in (data, spool) or results in data.parents:
            raise ValueError(
                f"MST_RESULT_DIR {str(self.result_dir)!r} holds MST_DATA_DIR: give the result files a "
                "folder of their own."
            )
        if any(
            results == spool / name or spool / name in results.parents for name in ("graphs", "tmp", "trash")
        ):
            raise ValueError(
                f"MST_RESULT_DIR {str(self.result_dir)!r} lies in the spool's own folders: give the result "
                "files a folder of their own."
            )
        return self

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
        if self.worker_pool == "ray" and isinstance(self.api_workers, int) and self.api_workers > 1:
            raise ValueError(
                "MST_API_WORKERS above 1 needs MST_WORKER_POOL=local: with Ray one API process serves "
                "HTTP; unset MST_API_WORKERS or set it to 1."
            )
        if self.worker_pool == "ray" and "workers_per_gpu" in self.model_fields_set:
            raise ValueError(
                "MST_WORKERS_PER_GPU sets this host's worker processes per GPU; with MST_WORKER_POOL=ray "
                "Ray gives each actor one GPU: unset MST_WORKERS_PER_GPU."
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

    @field_validator("api_workers")
    @classmethod
    def _check_api_workers(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 1 <= value <= MAX_API_WORKERS:
            raise ValueError(f"MST_API_WORKERS must be `auto` or 1 to {MAX_API_WORKERS}, got {value}.")
        return value

    @property
    def api_processes(self) -> int:
        """How many API processes serve HTTP (``MST_API_WORKERS`` resolved on this host)."""
        if isinstance(self.api_workers, int):
            return self.api_workers
        if self.worker_pool == "ray":
            return 1
        return max(1, min(8, (os.cpu_count() or 1) // 4))

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

    @property
    def results_dir(self) -> Path:
        """Where the result files live (``MST_RESULT_DIR``, else the spool's ``results`` folder)."""
        return self.result_dir if self.result_dir is not None else self.spool_dir / "results"
