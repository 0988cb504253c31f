"""The worker process: owns one device, keeps graphs resident on it and computes their forests.

Started by :mod:`service.runtime.supervisor` with the ``spawn`` start method, so the
child is a fresh interpreter: it pins its GPU with ``CUDA_VISIBLE_DEVICES``
and only then imports :mod:`gpu_core` (and through it CuPy). The API process
imports this module for :class:`WorkerConfig` and the message names but never
runs :func:`main`, so CUDA is never touched there.

Protocol over one duplex :class:`multiprocessing.connection.Connection`:

* the worker first sends ``("ready", info)`` once its kernels are warm and a
  tiny graph has been computed, or ``("failed", error)`` and exits;
* then it answers each request ``(op, req_id, *args)`` in order with
  ``(req_id, ok, payload)`` (before it computes a run, one request or several answered by one
  computation, it writes the run's first and last request id into its
  :class:`~.restarts.RunStamp`, shared memory the supervisor reads if the process dies, and
  clears it once the run's replies are sent): ``payload`` is a small dict, or the exception
  when ``ok`` is false. Bulk arrays rarely travel over the pipe: graphs come in
  as spool files, forests go out as ``.npz`` files in the spool; only a
  one-shot's forest of at most ``MST_ONESHOT_INLINE_BYTES`` comes back in its reply
  (:data:`INLINE`), which spares the file's creation, writing, reading and removal.
* an MST job's forest file is written *behind* its reply: the reply (the
  summary) goes out as soon as the forest is on the host, then the worker
  writes the file and sends ``("stored", req_id, error)`` (``error`` None on
  success). Creating and filling that file costs 0.2-0.4 ms, which the
  client's next request (for the result) would otherwise wait for; the API
  holds that request until the note arrives.

Several requests in the pipe at once (the supervisor pipelines them, ``MST_DISPATCH_DEPTH``):
identical MST requests queued back to back (same dataset, task, parameters, nothing in between)
are answered by one computation, each with its own reply, result file (a hard link of the
first) and STORED note (``MST_COALESCE_JOBS``); one-shot requests waiting together are computed
as one disjoint-union graph (:mod:`service.runtime.batching`, ``MST_ONESHOT_BATCH_EDGES``).

Sharded graphs (see :mod:`service.runtime.sharding`): a shard is LOADed like a graph, with the
format ``npz[lo:hi]`` (:func:`shard_format`: edges ``lo..hi-1`` of the spool's npz, a view of the
mapped file); ``DESCRIBE`` sizes an upload before it is sharded (writing text formats as npz);
``MERGE`` runs a job's task on the union of its shards' forests.

The ops themselves (:meth:`_Worker.handle`) do not know the pipe: the Ray worker pool
(:mod:`service.runtime.ray_pool`) runs a :class:`_Worker` inside a Ray actor and calls the same
method for each request.

Between requests the worker polls its pipe for ``MST_WORKER_SPIN_MS`` before
it blocks: a job that follows soon (a client's next request) then finds it
awake, without the wake-up of a sleeping process and with warm caches.

Start-up (:meth:`_Worker.start`, before ``ready``): CuPy and the engine, the CUDA context, every
task once on small datasets, every kernel a request can need (``gpu_core._warm_up.warm_start``:
the parts of the full sweep a manifest in the kernel cache names, or the full sweep where there is
none), Numba's compiled passes (on a thread meanwhile) and the probe; ``ready`` says what each took
(``startup_ms``) and how the kernels were warmed up (``warm_up``), so no request compiles, loads or
imports anything afterwards. On an H200 with a warm kernel cache (2026-11-24): 4.9 s from the spawn,
of which 1.3 s the process, 0.3 s the imports, 0.1 s the context, 3.1 s the warm-up (its tasks 1.6 s,
36 of the sweep's 475 parts 1.5 s, 244 CuPy modules loaded in 0.5 s of that); the full sweep, once
per kernel cache and version, about 21 s (2 minutes with a cold cache: NVRTC).

A heartbeat thread stamps ``time.monotonic()`` into shared memory every
``heartbeat_interval_s``; the supervisor restarts a worker whose stamp gets
old. After a :class:`gpu_core.errors.DeviceError` the worker answers and exits,
so its replacement starts from a fresh CUDA context; out of device memory
(:class:`gpu_core.errors.DeviceMemoryError`) is the exception: it is answered
(507), the pool's cached blocks are freed and the worker carries on.

Admission: a parsed upload is checked against the memory the worker has
(:meth:`_Worker._admit`, with ``gpu_core.estimate_device_bytes``) before the
graph is built: 413 when it can never fit, 507 when it does not fit now.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import os
import signal
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gpu_core.errors import GraphValidationError
from gpu_core.formats import EdgeArrays

from ..errors import (
    GraphExceedsWorkerError,
    InsufficientMemoryError,
    PayloadTooLargeError,
    ServiceError,
    WorkerInternalError,
    storage_error,
)
from ..limits import check_vertices
from ..storage import npzio
from ..timing import Steps
from .restarts import RunStamp

if TYPE_CHECKING:  # the API process must not import gpu_core's backends at run time through here
    import gpu_core

    from .point_sets import ResidentPoints

# request operations
LOAD = "load"
MST = "mst"
WEIGHTS = "weights"
ONESHOT = "oneshot"
#: the key of a one-shot reply's forest arrays (``edge_ids``, ``weights``) sent in the reply itself
INLINE = "arrays"
#: the key of a one-shot reply's count of one-shots its engine run computed (1: alone)
BATCH_MEMBERS = "batch_members"
DROP = "drop"
PING = "ping"
#: a sharded upload's sizes and memory needs (see :meth:`_Worker.describe`)
DESCRIBE = "describe"
#: the forest (or query) of a sharded graph from its shards' forests (see :meth:`_Worker.merge`)
MERGE = "merge"
STOP = "stop"
#: head of the note that follows a :class:`Reply`'s reply once its ``after`` work is done
STORED = "stored"


@dataclass(frozen=True)
class WorkerConfig:
    """What a worker needs to start; pickled to the child."""

    index: int
    backend: str  # "gpu" or "cpu"
    #: the value for CUDA_VISIBLE_DEVICES (the GPU this worker owns); None on the CPU backend
    cuda_device: str | None
    tmp_dir: str
    max_edges: int
    heartbeat_interval_s: float
    #: how long to poll for the next request before sleeping in recv (MST_WORKER_SPIN_MS)
    spin_s: float = 0.0
    #: bytes of graphs this worker may hold (MST_WORKER_MEMORY_BYTES); 0: its device's memory
    memory_bytes: int = 0
    #: MST_MAX_VERTICES, MST_MAX_INFLATED_BYTES, MST_MAX_COMPRESSION_RATIO
    max_vertices: int = 2**31 - 1
    max_inflated_bytes: int | None = None
    max_compression_ratio: float | None = None
    #: answer identical MST requests queued back to back in the pipe with one computation (MST_COALESCE_JOBS)
    coalesce: bool = True
    #: one-shot requests waiting together are computed as one union of up to this many edges (0: never)
    oneshot_batch_edges: int = 0
    #: a one-shot forest of at most this many bytes comes back in the reply, not as a file
    oneshot_inline_bytes: int = 0


def shard_format(lo: int, hi: int) -> str:
    """The LOAD format of one shard of a sharded graph: edges ``lo..hi-1`` of the spool's npz."""
    return f"npz[{lo}:{hi}]"


def parse_shard_format(fmt: str) -> tuple[int, int] | None:
    """``(lo, hi)`` of a :func:`shard_format` format; None for any other format."""
    if not (fmt.startswith("npz[") and fmt.endswith("]")):
        return None
    lo, _, hi = fmt[4:-1].partition(":")
    return int(lo), int(hi)


@dataclass(frozen=True)
class Reply:
    """A handler's answer with work to do once it is sent (its outcome follows as a STORED note)."""

    payload: dict[str, Any]
    after: Callable[[], None]


def main(conn: Connection, heartbeat: Any, config: WorkerConfig, running: Any = None) -> None:
    """Entry point of the worker process. ``running``: the shared ``RawArray('q', 2)`` of its
    :class:`~.restarts.RunStamp` (which requests it is computing, read by the supervisor if it dies)."""
    entered = time.monotonic()  # system-wide on Linux: the supervisor compares it with its own
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the API, which stops its workers
    if config.cuda_device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = config.cuda_device
    beat = threading.Thread(
        target=_heartbeat, args=(heartbeat, config.heartbeat_interval_s), name="heartbeat", daemon=True
    )
    heartbeat.value = time.monotonic()
    beat.start()
    try:
        worker = _Worker(config)
        worker.stamp = RunStamp(running)
        info = worker.start()
        info["entered_at"] = entered
    except BaseException as exc:
        conn.send(("failed", _portable(exc)))
        conn.close()
        return
    gc.freeze()  # the engine and its warm-up state stay: no full collections walking them per job
    conn.send(("ready", info))
    worker.serve(conn)


def _next_request(conn: Connection, spin_s: float) -> Any:
    """The next request: polled for up to ``spin_s`` seconds, then waited for asleep."""
    if spin_s > 0:
        deadline = time.monotonic() + spin_s
        while not conn.poll() and time.monotonic() < deadline:
            pass
    return conn.recv()


#: most identical MST requests answered by one computation
MAX_COALESCED = 64


def _same_jobs(conn: Connection, backlog: deque[Any], args: list[Any]) -> list[tuple[int, str]]:
    """Identical MST requests queued right behind one with ``args``: their (req id, result path),
    taken out of ``backlog`` (which first gets every request already waiting in the pipe).

    Identical: the same dataset, task and parameters, and nothing else in between (a weight
    update, a reload) — so they compute on the same data and have the same result.
    """
    while len(backlog) < MAX_COALESCED and conn.poll():
        backlog.append(conn.recv())
    key = (args[0], *args[2:])
    same: list[tuple[int, str]] = []
    while backlog and len(same) < MAX_COALESCED:
        op, rid, *other = backlog[0]
        if op != MST or (other[0], *other[2:]) != key:
            break
        backlog.popleft()
        same.append((rid, other[1]))
    return same


def _more_of(conn: Connection, backlog: deque[Any], op: str) -> list[tuple[int, list[Any]]]:
    """Requests of ``op`` queued right behind one of it: their (req id, args), taken out of
    ``backlog`` (which first gets every request already waiting in the pipe)."""
    while len(backlog) < MAX_COALESCED and conn.poll():
        backlog.append(conn.recv())
    more: list[tuple[int, list[Any]]] = []
    while backlog and backlog[0][0] == op and len(more) < MAX_COALESCED:
        _, rid, *args = backlog.popleft()
        more.append((rid, args))
    return more


def framed(message: tuple[Any, ...]) -> bytes:
    """``message`` as ``multiprocessing.Connection.send`` frames it (a length, then the pickle), so
    the other end's ``Connection.recv`` reads it."""
    payload = ForkingPickler.dumps(message)
    size = len(payload)
    if size > 0x7FFFFFFF:
        return struct.pack("!i", -1) + struct.pack("!Q", size) + bytes(payload)
    return struct.pack("!i", size) + bytes(payload)


def _send_all(conn: Connection, messages: list[tuple[Any, ...]]) -> None:
    """Send ``messages`` as ``conn.send`` would, one after another, in one write (a batch's
    replies: one system call, not one each); the API's reader takes them one by one."""
    data = memoryview(b"".join(framed(m) for m in messages))
    fd = conn.fileno()
    while data:
        data = data[os.write(fd, data) :]


def _linker(source: str, target: str) -> Callable[[], None]:
    """Give ``target`` the result file at ``source``: a hard link, or a copy where links fail."""

    def link() -> None:
        try:
            os.link(source, target)
        except OSError:  # no hard links on this file system: a copy, in place at once
            import shutil

            part = f"{target}.{os.getpid()}.part"
            try:
                shutil.copyfile(source, part)
                os.replace(part, target)
            except BaseException:
                Path(part).unlink(missing_ok=True)
                raise

    return link


def _in_whole_graph(exc: GraphValidationError, lo: int) -> GraphValidationError:
    """A shard's validation error as the whole graph's: its edge index counted from edge 0, not ``lo``."""
    if exc.index is None or lo == 0:
        return exc
    shifted = copy.copy(exc)
    local, index = exc.index, exc.index + lo
    shifted.index = index
    shifted.message = exc.message.replace(f"[{local}]", f"[{index}]", 1)
    shifted.args = (shifted.message,)
    return shifted


class _OnThread:
    """``work()`` on a thread of its own, started now; :meth:`join` waits for it."""

    def __init__(self, work: Callable[[], object], name: str) -> None:
        self._ms = 0.0
        self._thread = threading.Thread(target=self._run, args=(work,), name=name, daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], object]) -> None:
        started = time.perf_counter()
        try:
            work()
        finally:
            self._ms = (time.perf_counter() - started) * 1e3

    def join(self) -> float:
        """Wait for the work; the milliseconds it took."""
        self._thread.join()
        return self._ms


def _warm_up_host_passes() -> None:
    """Compile (or load from Numba's cache) the host passes of HDBSCAN* and single linkage; a
    failure is logged, not fatal: only the requests that need them would fail."""
    from gpu_core._clustering.hdbscan import warm_up_compiled

    try:
        warm_up_compiled()
    except Exception as exc:
        import sys

        print(f"mst-worker: the compiled host passes failed to load: {exc!r}", file=sys.stderr)


def _heartbeat(value: Any, interval: float) -> None:
    while True:
        value.value = time.monotonic()
        time.sleep(interval)


def _portable(exc: BaseException) -> BaseException:
    """The exception itself when it pickles with its fields, else a WorkerInternalError naming it."""
    from gpu_core.errors import MSTError

    if isinstance(exc, (MSTError, ServiceError)):
        return exc
    storage = storage_error(exc)  # the spool's file system full or read-only: 507/503, not a bug
    if storage is not None:
        return storage
    return WorkerInternalError(f"{type(exc).__name__}: {exc}")


def _read_weights(path: str, fmt: str, to_device: bool = False) -> tuple[Any, Any]:
    """(edge ids or None, weights) of a weights file: an ``.npy`` of every weight, or an ``.npz``
    with ``weight`` (every weight) or ``edge_ids`` and ``weights`` (some). Never unpickles.

    ``to_device``: an ``.npy`` goes straight to a device array (pinned pieces, overlapped).
    """
    import numpy as np

    from gpu_core.formats import npz_arrays

    from ..errors import InvalidUploadError

    try:
        if fmt == "npy" and to_device:
            from gpu_core._backend.staging import npy_to_device

            return None, npy_to_device(path)
        if fmt == "npy":
            return None, np.load(path, mmap_mode="r", allow_pickle=False)
        npz = npz_arrays(Path(path).read_bytes())  # not np.load: it allocates what a member's header says
        names = set(npz)
        if names == {"weight"}:
            return None, npz["weight"]
        if names == {"edge_ids", "weights"}:
            return npz["edge_ids"], npz["weights"]
    except (ValueError, OSError, EOFError) as exc:  # gpu_core's GraphValidationError is a ValueError
        raise InvalidUploadError(f"the weights file cannot be read as {fmt}: {exc}", field="body") from None
    raise InvalidUploadError(
        f"an npz of weights holds either 'weight' (every weight) or 'edge_ids' and 'weights' (some); "
        f"this one holds {sorted(names)}.",
        field="body",
    )


def _host_memory() -> tuple[int, int]:
    """(available, total) bytes of host memory, from /proc/meminfo where there is one."""
    try:
        values = {}
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                values[key] = int(rest.split()[0]) * 1024
        return values["MemAvailable"], values["MemTotal"]
    except (OSError, KeyError, ValueError, IndexError):
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return pages, pages


class _Worker:
    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.graphs: dict[str, gpu_core.Graph] = {}
        #: resident point sets (see :mod:`service.runtime.point_sets`)
        self.points: dict[str, ResidentPoints] = {}
        self.backend: Literal["gpu", "cpu"] = "cpu"
        self.tmp_dir = Path(config.tmp_dir)
        #: which requests it computes now (the supervisor reads it if this process dies)
        self.stamp = RunStamp()
        self._handlers: dict[str, Callable[..., dict[str, Any] | Reply]] = {
            LOAD: self.load,
            MST: self.mst,
            WEIGHTS: self.weights,
            ONESHOT: self.oneshot,
            DROP: self.drop,
            PING: self.ping,
            DESCRIBE: self.describe,
            MERGE: self.merge,
        }

    # -- start-up -----------------------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        """Import the engine, open the device, warm up every task and kernel and compute the probe
        graph; the ``ready`` info.

        Its ``startup_ms`` says where the time went: ``imports`` (gpu_core, and CuPy for the GPU),
        ``device`` (the CUDA context), ``warm_up_tasks`` (point sets' tasks and graph dendrograms,
        :meth:`_warm_up_tasks`), ``warm_up`` (every kernel: :func:`gpu_core._warm_up.warm_start`, the
        parts its manifest names, or the full sweep; ``warm_up_full`` where the quick one fell
        short), ``host_passes`` (the wait for Numba's compiled HDBSCAN* passes, loaded on a thread
        meanwhile: ``host_passes_thread`` is what that thread took), ``probe``, ``release``; its
        ``warm_up`` what ``warm_start`` reported (``mode`` quick or full, ``parts``, ``modules``,
        ``compiled``, ``load_ms``, ``manifest``; a ``note`` is also printed to stderr).
        """
        import gpu_core  # first import of the engine (and CuPy) happens here, in the child

        steps = Steps()
        self.backend = gpu_core.resolve_backend(self.config.backend)  # imports CuPy for the GPU
        steps.lap("imports")
        if self.backend == "gpu":
            import cupy

            cupy.cuda.runtime.memGetInfo()  # the first call that needs it creates the CUDA context
        steps.lap("device")
        passes = _OnThread(_warm_up_host_passes, "warm-up-host-passes")
        from gpu_core._warm_up import warm_start

        kernels = warm_start(self.backend, self._warm_up_tasks, lap=steps.lap)  # quick where it can
        if "note" in kernels:
            print(f"mst-worker: warm-up: {kernels['note']}", file=sys.stderr, flush=True)
        passes_ms = passes.join()
        steps.lap("host_passes")
        probe = self._probe()
        steps.lap("probe")
        self._release_cached()  # the warm-up's scratch blocks go back to the device
        steps.lap("release")
        free, total = self._memory()
        return {
            "pid": os.getpid(),
            "backend": self.backend,
            "device": self._device_name(),
            "warmup_ms": sum(steps.ms.values()),
            "startup_ms": {**steps.ms, "host_passes_thread": round(passes_ms, 3)},
            "warm_up": {k: v for k, v in kernels.items() if k != "ms"},
            "probe_ms": probe,
            "free_bytes": free,
            "total_bytes": total,
        }

    def _warm_up_tasks(self) -> None:
        """Every task a request can run, once, end to end: a point set's tasks on small sets
        (:func:`.point_sets.warm_up`) and a graph's dendrogram of each weight dtype. Run by
        :func:`gpu_core._warm_up.warm_start` before the kernels' parts (what it loads, no part need
        load again); the CPU backend's whole warm-up with the graphs'."""
        import numpy as np

        import gpu_core

        from .point_sets import warm_up as warm_up_points

        warm_up_points(self.backend)
        src, dst = np.array([0, 1, 2, 0, 3]), np.array([1, 2, 0, 3, 4])
        for dtype in gpu_core.WEIGHT_DTYPES:
            weights = np.array([3, 1, 2, 5, 4], dtype=dtype)
            gpu_core.Graph(src, dst, weights, 5, backend=self.backend).single_linkage()

    def _probe(self) -> float:
        """Compute a tiny forest and check its answer; the milliseconds it took."""
        import numpy as np

        import gpu_core

        forest = gpu_core.Graph(
            np.array([0, 1, 2, 0]), np.array([1, 2, 0, 3]), np.array([1, 2, 3, 4]), 5, backend=self.backend
        ).minimum_spanning_forest()
        if forest.edge_ids.tolist() != [0, 1, 3] or forest.total_weight != 7 or forest.num_components != 2:
            raise WorkerInternalError(f"the device computed a wrong forest for the probe graph: {forest}")
        return forest.compute_ms

    def _device_name(self) -> str:
        if self.backend != "gpu":
            return "cpu"
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props.get("name", b"cuda")
        name = name.decode() if isinstance(name, bytes) else str(name)
        return f"{name} (CUDA_VISIBLE_DEVICES={self.config.cuda_device})"

    def _memory(self) -> tuple[int, int]:
        """(free, total) bytes of the memory graphs live in: the device's, or the host's; with
        MST_WORKER_MEMORY_BYTES, no more than that cap less what the resident graphs hold."""
        if self.backend != "gpu":
            free, total = _host_memory()
        else:
            import cupy

            device_free, device_total = cupy.cuda.runtime.memGetInfo()
            free = int(device_free) + int(cupy.get_default_memory_pool().free_bytes())
            total = int(device_total)
        cap = self.config.memory_bytes
        if cap:
            held = sum(g.nbytes for g in self.graphs.values()) + sum(p.nbytes for p in self.points.values())
            free, total = min(free, max(cap - held, 0)), min(cap, total)
        return free, total

    def _admit(self, edges: Any, num_vertices: int | None) -> None:
        """Refuse a parsed graph that cannot be built here, before anything of its size is allocated:
        413 when it needs more than the worker has in all, 507 when more than is free now
        (the supervisor then evicts idle graphs and asks again)."""
        import numpy as np

        import gpu_core

        m = int(edges.weight.shape[0]) if edges.weight.shape[:1] else 0
        n = num_vertices
        if n is None:
            ids = [a for a in (edges.src, edges.dst) if a.dtype.kind in "iu" and a.size]
            n = max((int(a.max()) for a in ids), default=-1) + 1
        dtype = edges.weight.dtype if edges.weight.dtype in gpu_core.WEIGHT_DTYPES else np.dtype(np.float64)
        needed = gpu_core.estimate_device_bytes(max(n, 0), m, dtype, backend=self.backend).peak
        free, total = self._memory()
        where = "device" if self.backend == "gpu" else "host"
        if needed > total:
            raise GraphExceedsWorkerError(
                f"the graph ({n} vertices, {m} edges, {dtype} weights) needs about {needed} bytes of "
                f"{where} memory to build, more than worker {self.config.index} has in all ({total} bytes).",
                needed=needed,
                capacity=total,
                field="body",
            )
        if needed > free:
            raise InsufficientMemoryError(
                f"the graph needs about {needed} bytes of {where} memory to build; worker "
                f"{self.config.index} has {free} of {total} bytes free.",
                needed=needed,
                available=free,
                capacity=total,
            )

    # -- requests -----------------------------------------------------------------------------

    def serve(self, conn: Connection) -> None:
        backlog: deque[Any] = deque()  # requests read ahead from the pipe (see _same_jobs)
        while True:
            try:
                request = backlog.popleft() if backlog else _next_request(conn, self.config.spin_s)
            except (EOFError, OSError):
                return  # the API process is gone
            op, req_id, *args = request
            if op == STOP:
                with contextlib.suppress(OSError, ValueError):
                    conn.send((req_id, True, {}))
                return
            if op == ONESHOT and self.config.oneshot_batch_edges:
                try:
                    more = _more_of(conn, backlog, ONESHOT)
                except (EOFError, OSError):
                    return
                if more:
                    self.stamp.begin(req_id, more[-1][0])
                    replies, fatal = self.oneshots([(req_id, args), *more])
                    try:
                        _send_all(conn, replies)
                    except (OSError, ValueError):
                        return
                    self.stamp.end()
                    if fatal:
                        return
                    continue
            if op == MST and self.config.coalesce:
                try:
                    same = _same_jobs(conn, backlog, args)
                except (EOFError, OSError):
                    return
                if same:
                    self.stamp.begin(req_id, same[-1][0])
                    if not self._serve_same(conn, req_id, args, same):
                        return
                    continue
            self.stamp.begin(req_id, req_id)
            ok, payload, after, fatal = self.handle(op, args)
            try:
                conn.send((req_id, ok, payload))
                self.stamp.end()  # its result file is written behind the reply: nothing runs then
                if after is not None:
                    conn.send((STORED, req_id, self._after(after)))
            except (OSError, ValueError):
                return  # the API process is gone
            if fatal:
                return  # a fresh process gets a fresh CUDA context

    def _serve_same(
        self, conn: Connection, req_id: int, args: list[Any], same: list[tuple[int, str]]
    ) -> bool:
        """Answer an MST request and ``same`` (req id, result path) identical ones queued right behind
        it with one computation: each gets the summary, then its own result file (a hard link of
        the first, or a copy). False when the worker must stop (the API process is gone, or the
        device failed)."""
        ok, payload, after, fatal = self.handle(MST, args)
        first = args[1]
        try:
            conn.send((req_id, ok, payload))
            for rid, _ in same:  # the followers' results say that they shared the computation
                conn.send((rid, ok, dict(payload, coalesced=True) if ok else payload))
            self.stamp.end()
            if after is not None:
                stored = self._after(after)
                conn.send((STORED, req_id, stored))
                for rid, path in same:
                    conn.send(
                        (STORED, rid, stored if stored is not None else self._after(_linker(first, path)))
                    )
        except (OSError, ValueError):
            return False
        return not fatal

    def handle(self, op: str, args: Sequence[Any]) -> tuple[bool, Any, Callable[[], None] | None, bool]:
        """Run one request: (ok, the answer or the portable error, work to do once the answer is
        sent or None, whether this worker must end now). Shared by :meth:`serve` (the pipe) and the
        Ray actor (:mod:`service.runtime.ray_pool`)."""
        try:
            answer = self._handlers[op](*args)
        except BaseException as exc:
            from gpu_core.errors import DeviceError, DeviceMemoryError

            # out of device memory is not sticky: answer, free the pool's cache, carry on
            fatal = not isinstance(exc, Exception) or (
                isinstance(exc, DeviceError) and not isinstance(exc, DeviceMemoryError)
            )
            if isinstance(exc, DeviceMemoryError):
                self._release_cached()
            return False, _portable(exc), None, fatal
        if isinstance(answer, Reply):
            return True, answer.payload, answer.after, False
        return True, answer, None, False

    def _release_cached(self) -> None:
        """Give the memory pool's cached blocks back to the device (after an out-of-memory error)."""
        if self.backend == "gpu":
            import cupy

            gc.collect()
            cupy.get_default_memory_pool().free_all_blocks()

    @staticmethod
    def _after(work: Callable[[], None]) -> BaseException | None:
        """Run a reply's ``after`` work: None when it succeeded, else the (portable) error."""
        try:
            work()
        except Exception as exc:
            return _portable(exc)
        return None

    def _parse(self, path: str, fmt: str) -> Any:
        """The edge arrays of a spool file: a plain npz is read (mapped when large), the rest is parsed."""
        import gpu_core

        if fmt == "npz":
            edges = npzio.plain_graph(path)
            if edges is not None:
                return edges
            # anything unusual: the engine's reader decides, and words its errors
        config = self.config
        data = Path(path).read_bytes()
        return gpu_core.read_graph(
            data, fmt, max_inflated_bytes=config.max_inflated_bytes, max_ratio=config.max_compression_ratio
        )

    def _read(
        self,
        path: str,
        fmt: str,
        num_vertices: int | None,
        steps: Steps | None = None,
    ) -> tuple[Any, gpu_core.Graph]:
        """Parse a spool file and make it a resident graph; (the parsed edge arrays, the graph)."""
        import gpu_core

        steps = steps or Steps()
        edges, n = self._checked_edges(path, fmt, num_vertices)
        self._admit(edges, n)
        steps.lap("parse")
        shard = parse_shard_format(fmt)
        try:
            graph = gpu_core.Graph(edges.src, edges.dst, edges.weight, n, backend=self.backend)
        except GraphValidationError as exc:
            raise exc if shard is None else _in_whole_graph(exc, shard[0]) from None
        steps.lap("build")
        return edges, graph

    def _checked_edges(
        self, path: str, fmt: str, num_vertices: int | None
    ) -> tuple[Any, int | None]:
        """A spool file's edge arrays and vertex count, within the service's limits (not yet the
        engine's validation)."""
        shard = parse_shard_format(fmt)
        edges = self._parse(path, "npz" if shard is not None else fmt)
        if shard is not None:  # one shard of a sharded graph: a slice of its edges (a view, no copy)
            lo, hi = shard
            edges = EdgeArrays(edges.src[lo:hi], edges.dst[lo:hi], edges.weight[lo:hi], edges.num_vertices)
        if edges.weight.shape[:1] and int(edges.weight.shape[0]) > self.config.max_edges:
            raise PayloadTooLargeError(
                f"the graph has {int(edges.weight.shape[0])} edges, more than this service's limit of "
                f"{self.config.max_edges} (MST_MAX_EDGES).",
                field="body",
            )
        n = num_vertices if num_vertices is not None else edges.num_vertices
        check_vertices(edges.src, edges.dst, n, self.config.max_vertices)  # before n-sized estimates
        return edges, n

    @staticmethod
    def _write_canonical(edges: Any, num_vertices: int, out: str) -> None:
        """Write a parsed upload as the spool's npz (fsynced), so reloads skip parsing."""
        import numpy as np

        arrays = {"src": edges.src, "dst": edges.dst, "weight": edges.weight}
        npzio.write_npz_file(out, {**arrays, "num_vertices": np.int64(num_vertices)}, sync=True)

    def _summary(self, graph: gpu_core.Graph) -> dict[str, Any]:
        free, total = self._memory()
        return {
            "num_vertices": graph.num_vertices,
            "num_edges": graph.num_edges,
            "weight_dtype": str(graph.weight_dtype),
            "device_bytes": graph.nbytes,
            "free_bytes": free,
            "total_bytes": total,
        }

    def load(
        self,
        graph_id: str,
        path: str,
        fmt: str,
        num_vertices: int | None,
        canonical: str | None,
        weights: str | None = None,
    ) -> dict[str, Any]:
        """Make a graph resident from a spool file; with ``canonical``, also write it there as npz.

        ``weights``: an ``.npy`` of weights that replaced the uploaded ones (a reload after an update).
        A format ``points.npz`` or ``points.npy`` makes a point set resident instead.
        """
        if fmt.startswith("points."):
            return self._load_points(graph_id, path, fmt, canonical)
        steps = Steps()
        edges, graph = self._read(path, fmt, num_vertices, steps)
        if canonical is not None:
            self._write_canonical(edges, graph.num_vertices, canonical)
            steps.lap("canonical")
        del edges
        if weights is not None:
            replaced = _read_weights(weights, "npy")[1]
            shard = parse_shard_format(fmt)
            graph.set_weights(replaced if shard is None else replaced[shard[0] : shard[1]])
            steps.lap("weights")
        graph.prepare()  # the first run's one-time work (GPU: iteration count, CUDA graph) happens here
        steps.lap("prepare")
        self.graphs[graph_id] = graph
        return {**self._summary(graph), "timings_ms": steps.ms}

    def weights(self, graph_id: str, path: str, fmt: str, out: str | None, expected: int) -> dict[str, Any]:
        """New weights for a resident graph from a spool file (all of them, or ``edge_ids`` + ``weights``).

        ``expected``: the weights version the graph has now (the API's record); it becomes
        ``expected + 1``. ``out``: where to write the complete new weights as ``.npy`` (fsynced),
        when the file received is not that already (a partial update, or an npz).
        """
        graph = self._resident(graph_id)
        steps = Steps()
        edge_ids, values = _read_weights(path, fmt, to_device=graph.backend == "gpu")
        if edge_ids is None:
            graph.set_weights(values)
        else:
            graph.update_weights(edge_ids, values)
        del edge_ids, values
        steps.lap("apply")
        if out is not None:
            import numpy as np

            host = graph.weights()
            with open(out, "wb") as f:
                np.save(f, host, allow_pickle=False)
                f.flush()
                os.fsync(f.fileno())
            steps.lap("save")
        graph.prepare()  # learn and capture the new order's run now, not on the next job's path
        steps.lap("prepare")
        summary = self._summary(graph)
        summary["weights_version"] = expected + 1
        summary["timings_ms"] = steps.ms
        return summary

    def _load_points(self, points_id: str, path: str, fmt: str, canonical: str | None) -> dict[str, Any]:
        import numpy as np

        from .point_sets import ResidentPoints, read_points

        config = self.config
        raw = read_points(path, fmt, config.max_inflated_bytes or 2**63, config.max_compression_ratio or 1e18)
        resident = ResidentPoints(raw, self.backend)
        if canonical is not None:
            npzio.write_npz_file(canonical, {"points": np.ascontiguousarray(raw)}, sync=True)
        del raw
        self.points[points_id] = resident
        free, total = self._memory()
        return {
            "num_vertices": resident.num_points,
            "num_edges": resident.dims,
            "weight_dtype": resident.dtype,
            "device_bytes": resident.nbytes,
            "free_bytes": free,
            "total_bytes": total,
        }

    def _resident(self, graph_id: str) -> gpu_core.Graph:
        graph = self.graphs.get(graph_id)
        if graph is None:
            raise WorkerInternalError(f"graph {graph_id} is not resident on worker {self.config.index}.")
        return graph

    def _write_result(self, forest: Any, result_path: str, write_out: bool = True) -> None:
        self._write_arrays({"edge_ids": forest.edge_ids, "weights": forest.weights}, result_path, write_out)

    @staticmethod
    def _forest_summary(forest: Any) -> dict[str, Any]:
        return {
            "num_edges": forest.num_edges,
            "total_weight": forest.total_weight,
            "num_components": forest.num_components,
            "compute_ms": forest.compute_ms,
            "weight_dtype": str(forest.weights.dtype),
        }

    def mst(
        self, graph_id: str, result_path: str, task: str = "mst", params: dict[str, Any] | None = None
    ) -> Reply:
        """The result's summary now; its file at ``result_path`` right after the reply.

        ``task`` (with ``params``): ``mst`` (objective, exclude), ``components`` (exclude),
        ``clusters`` (k or threshold) or ``dendrogram`` on a graph; ``emst``, ``hdbscan`` or
        ``single_linkage`` on a point set.
        """
        points = self.points.get(graph_id)
        if points is not None:
            point_summary, point_arrays = points.run(task, params or {})
            return Reply(point_summary, lambda: self._write_arrays(point_arrays, result_path))
        return self._run_task(self._resident(graph_id), task, params or {}, result_path)

    def _run_task(
        self,
        graph: gpu_core.Graph,
        task: str,
        params: dict[str, Any],
        result_path: str,
        edge_ids: Any = None,
    ) -> Reply:
        """A graph task's summary and, behind it, its result file. ``edge_ids``: the global id of each
        of the graph's edges, when they are not its positions (the union graph of :meth:`merge`)."""
        if task == "mst":
            forest = graph.minimum_spanning_forest(
                objective=params.get("objective", "min"), exclude=params.get("exclude"), reuse_prepared=True
            )
            if edge_ids is not None:
                forest = dataclasses.replace(forest, edge_ids=edge_ids[forest.edge_ids])
            return Reply(self._forest_summary(forest), lambda: self._write_result(forest, result_path))
        started = time.perf_counter()
        arrays: dict[str, Any]
        summary: dict[str, Any]
        if task == "dendrogram":
            linkage = graph.single_linkage()
            arrays = {"linkage": linkage}
            summary = {"num_edges": int(linkage.shape[0]), "num_components": 1}
        else:
            if task == "components":
                labels = graph.component_labels(exclude=params.get("exclude"))
            elif task == "clusters":
                labels = graph.cluster_labels(k=params.get("k"), threshold=params.get("threshold"))
            else:
                raise WorkerInternalError(f"unknown task {task!r}.")
            arrays = {"labels": labels}
            clusters = int(labels.max()) + 1 if labels.size else 0
            summary = {"num_edges": graph.num_vertices - clusters, "num_components": clusters}
        summary.update(total_weight=None, compute_ms=(time.perf_counter() - started) * 1e3)
        return Reply(summary, lambda: self._write_arrays(arrays, result_path))

    def _write_arrays(self, arrays: dict[str, Any], result_path: str, write_out: bool = True) -> None:
        """A result file, written out to the disk at once (``write_out``: see
        :func:`npzio.write_npz_file`); a one-shot's, read once and removed, is not."""
        tmp = self.tmp_dir / f"{os.path.basename(result_path)}.{os.getpid()}.part"
        try:
            npzio.write_npz_file(tmp, arrays, write_out=write_out)
            os.replace(tmp, result_path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def oneshot(
        self, path: str, fmt: str, num_vertices: int | None, result_path: str
    ) -> dict[str, Any]:
        edges, graph = self._read(path, fmt, num_vertices)
        del edges
        forest = graph.minimum_spanning_forest()
        del graph
        return self._oneshot_answer(forest, result_path, 1)

    def _oneshot_answer(self, forest: Any, result_path: str, members: int) -> dict[str, Any]:
        """A one-shot's reply: its forest's summary with the arrays (:data:`INLINE`) when they are
        small, else with its result file written at ``result_path``; ``members``: how many
        one-shots its engine run computed (:data:`BATCH_MEMBERS`)."""
        summary = self._forest_summary(forest)
        summary[BATCH_MEMBERS] = members
        if forest.edge_ids.nbytes + forest.weights.nbytes <= self.config.oneshot_inline_bytes:
            summary[INLINE] = {"edge_ids": forest.edge_ids, "weights": forest.weights}
        else:  # read once and removed: not handed to the disk (see _write_arrays)
            self._write_result(forest, result_path, write_out=False)
        return summary

    def oneshots(self, requests: list[tuple[int, list[Any]]]) -> tuple[list[tuple[int, bool, Any]], bool]:
        """Several one-shot requests ``(req id, args)`` waiting together: their replies, and whether
        this worker must end now (the device failed).

        Those that parse within the limits and share the first one's weight dtype are computed as
        one disjoint-union graph (see :mod:`service.runtime.batching`), in chunks of at most
        ``MST_ONESHOT_BATCH_EDGES`` edges; any other, and every member of a union that the engine
        refuses (then each gets its own answer, or its own error), runs alone.
        """
        from .batching import batched_forests, default_vertices, fits_union

        limit = self.config.oneshot_batch_edges

        replies: list[tuple[int, bool, Any]] = []
        alone: list[tuple[int, list[Any]]] = []
        chunk: list[tuple[int, list[Any], Any]] = []
        chunks = [chunk]
        dtype: Any = None
        edges_in_chunk = 0
        for req_id, args in requests:
            path, fmt, num_vertices, _ = args
            try:
                edges, n = self._checked_edges(path, fmt, num_vertices)
            except Exception as exc:
                replies.append((req_id, False, _portable(exc)))
                continue
            m = int(edges.weight.shape[0]) if edges.weight.shape[:1] else 0
            n = n if n is not None else default_vertices(edges.src, edges.dst)
            if n is None or not fits_union(edges.src, edges.dst, edges.weight, n) or m > limit:
                alone.append((req_id, args))
                continue
            dtype = edges.weight.dtype if dtype is None else dtype
            if edges.weight.dtype != dtype:
                alone.append((req_id, args))
                continue
            if chunk and edges_in_chunk + m > limit:
                chunk = []
                chunks.append(chunk)
                edges_in_chunk = 0
            chunk.append((req_id, args, (edges.src, edges.dst, edges.weight, n)))
            edges_in_chunk += m
        for members in chunks:
            if len(members) == 1:
                alone.append((members[0][0], members[0][1]))
                continue
            if not members:
                continue
            try:
                forests = batched_forests([graph for *_, graph in members], self.backend)
            except Exception:  # one member is invalid, or no room: each on its own says why
                alone.extend((req_id, args) for req_id, args, _ in members)
                continue
            for (req_id, args, _), forest in zip(members, forests, strict=True):
                try:
                    answer = self._oneshot_answer(forest, args[3], len(members))
                except Exception as exc:
                    replies.append((req_id, False, _portable(exc)))
                else:
                    replies.append((req_id, True, answer))
        fatal = False
        for req_id, args in alone:
            if fatal:  # the device failed: the rest end worker_lost when this worker exits
                break
            ok, payload, _, fatal = self.handle(ONESHOT, args)
            replies.append((req_id, ok, payload))
        return replies, fatal

    def describe(self, path: str, fmt: str, canonical: str | None, max_shards: int) -> dict[str, Any]:
        """Sizes of an upload to be sharded, without building it; with ``canonical``, written there as npz.

        Returns ``num_vertices``, ``num_edges``, ``weight_dtype``, this worker's ``capacity`` and,
        for ``k = 1..max_shards`` shards, the peak bytes of building the largest shard
        (``shard_peak[k-1]``) and of the union of ``k`` shard forests (``union_peak[k-1]``).
        """
        import numpy as np

        import gpu_core

        edges = self._parse(path, fmt)
        m = int(edges.weight.shape[0]) if edges.weight.shape[:1] else 0
        if m > self.config.max_edges:
            raise PayloadTooLargeError(
                f"the graph has {m} edges, more than this service's limit of "
                f"{self.config.max_edges} (MST_MAX_EDGES).",
                field="body",
            )
        n = edges.num_vertices
        check_vertices(edges.src, edges.dst, n, self.config.max_vertices)
        if n is None:
            ids = [a for a in (edges.src, edges.dst) if a.dtype.kind in "iu" and a.size]
            n = max((int(a.max()) for a in ids), default=-1) + 1
        weight = edges.weight.dtype
        dtype = weight if weight in gpu_core.WEIGHT_DTYPES else np.dtype(np.float64)
        if canonical is not None:
            self._write_canonical(edges, n, canonical)

        def peak(edge_count: int) -> int:
            return gpu_core.estimate_device_bytes(n, edge_count, dtype, backend=self.backend).peak

        shards = range(1, max(max_shards, 1) + 1)
        return {
            "num_vertices": n,
            "num_edges": m,
            "weight_dtype": str(weight),
            "capacity": self._memory()[1],
            "shard_peak": [peak(-(-m // k)) for k in shards],
            "union_peak": [peak(min(m, k * max(n - 1, 0))) for k in shards],
        }

    def merge(
        self,
        path: str,
        num_vertices: int,
        parts: list[tuple[str, int]],
        task: str,
        params: dict[str, Any],
        result_path: str,
    ) -> Reply:
        """Finish a job on a sharded graph: the task on the union of its shards' forests.

        ``parts``: each shard's forest file (``edge_ids`` local to the shard, ``weights``) and the
        shard's first global edge id; the endpoints come from the graph's spool npz at ``path``.
        By the cycle property the union answers every task as the whole graph would (see
        :mod:`gpu_core._shards`); an ``mst`` result carries global edge ids.
        """
        import numpy as np

        import gpu_core

        edges = self._parse(path, "npz")
        forests = []
        for forest_path, lo in parts:
            arrays = npzio.read_npz(forest_path, ("edge_ids", "weights"))
            if arrays is None:
                raise WorkerInternalError(f"the shard forest {forest_path} cannot be read.")
            ids = np.asarray(arrays["edge_ids"], dtype=np.int64) + lo
            forests.append(gpu_core.ShardForest(ids, edges.src[ids], edges.dst[ids], arrays["weights"]))
        del edges
        count = sum(int(f.edge_ids.shape[0]) for f in forests)
        dtype = forests[0].weights.dtype if forests else np.dtype(np.float64)
        needed = gpu_core.estimate_device_bytes(num_vertices, count, dtype, backend=self.backend).peak
        free, total = self._memory()
        if needed > free:
            raise InsufficientMemoryError(
                f"the union of the shard forests ({count} edges) needs about {needed} bytes to build; "
                f"worker {self.config.index} has {free} of {total} bytes free.",
                needed=needed,
                available=free,
                capacity=total,
            )
        graph, ids = gpu_core.union_graph(forests, num_vertices, backend=self.backend)
        del forests
        return self._run_task(graph, task, params, result_path, edge_ids=ids)

    def drop(self, graph_id: str) -> dict[str, Any]:
        self.graphs.pop(graph_id, None)
        self.points.pop(graph_id, None)
        free, total = self._memory()
        return {"free_bytes": free, "total_bytes": total}

    def ping(self) -> dict[str, Any]:
        return {"probe_ms": self._probe()}
