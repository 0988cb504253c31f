"""What a worker and its handle in the API process say to each other: the one thing both import.

Over one duplex :class:`multiprocessing.connection.Connection` (or a Ray actor's calls, which
carry the same messages):

* the worker first sends ``("ready", info)`` once its kernels are warm and a tiny graph has been
  computed, or ``("failed", error)`` and exits;
* then it answers each request ``(op, req_id, *args)`` in order with ``(req_id, ok, payload)``:
  ``payload`` is a small dict, or the exception when ``ok`` is false. Bulk arrays rarely travel
  over the pipe: graphs come in as spool files, results go out as ``.npz`` files in the spool;
  only a one-shot's forest of at most ``MST_ONESHOT_INLINE_BYTES`` comes back in its reply
  (:data:`INLINE`);
* a handler's work behind its reply (an MST job's result file, :class:`Reply`) ends with a note
  ``(STORED, req_id, error)`` (``error`` None on success): the reply goes out as soon as the
  answer is on the host, and a request for the result waits for the note instead.

Which requests a worker is computing is not a message: before a run (one request, or several
answered by one computation) it writes the run's first and last request id into a
:class:`RunStamp`, shared memory its handle reads if the process dies, and clears it once the
run's replies are sent (see :mod:`service.runtime.pool.restarts`).

Messages are framed as ``Connection.send`` frames them (:func:`framed`, :func:`unframed`), so
either end may write or read them in pieces without blocking.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any, Literal

# request operations
LOAD = "load"
MST = "mst"
WEIGHTS = "weights"
ONESHOT = "oneshot"
DROP = "drop"
PING = "ping"
#: a sharded upload's sizes and memory needs (see :func:`service.runtime.worker.shards.describe`)
DESCRIBE = "describe"
#: the forest (or query) of a sharded graph from its shards' forests (see ``shards.merge``)
MERGE = "merge"
#: fit an HDBSCAN* model on a resident point set, predict with one, drop one (see ``ops``)
FIT = "fit"
PREDICT = "predict"
DROP_MODEL = "drop_model"
STOP = "stop"
#: head of the note that follows a :class:`Reply`'s reply once its ``after`` work is done
STORED = "stored"
#: the key of a one-shot reply's forest arrays (``edge_ids``, ``weights``) sent in the reply itself
INLINE = "arrays"
#: the key of a one-shot reply's count of one-shots its engine run computed (1: alone)
BATCH_MEMBERS = "batch_members"

#: the key of an MST reply's ``(started, ms)``: when the worker began it (``time.monotonic()``, which
#: is system-wide on Linux) and how long it took to answer, for the job's ``Server-Timing``
SERVED = "served"

#: most identical MST requests (or one-shots) answered by one computation
MAX_COALESCED = 64


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
    #: start the forests of up to this many MST jobs queued behind the one answered (MST_LAUNCH_AHEAD)
    launch_ahead: int = 0
    #: one-shot requests waiting together are computed as one union of up to this many edges (0: never)
    oneshot_batch_edges: int = 0
    #: a one-shot forest of at most this many bytes comes back in the reply, not as a file
    oneshot_inline_bytes: int = 0
    #: "all": every task and kernel warmed before ready; "none": the probe graph only (MST_WARM_UP)
    warm_up: Literal["all", "none"] = "all"


@dataclass(frozen=True)
class Reply:
    """A handler's answer with work to do once it is sent (its outcome follows as a STORED note)."""

    payload: dict[str, Any]
    after: Callable[[], None]


def shard_format(lo: int, hi: int) -> str:
    """The LOAD format of one shard of a sharded graph: edges ``lo..hi-1`` of the spool's npz."""
    return f"npz[{lo}:{hi}]"


def parse_shard_format(fmt: str) -> tuple[int, int] | None:
    """``(lo, hi)`` of a :func:`shard_format` format; None for any other format."""
    if not (fmt.startswith("npz[") and fmt.endswith("]")):
        return None
    lo, _, hi = fmt[4:-1].partition(":")
    return int(lo), int(hi)


class RunStamp:
    """The ids of the run a worker is computing, in shared memory (``multiprocessing.RawArray('q', 2)``).

    Written by the worker (:meth:`begin`, :meth:`end`), read by its handle once the worker is
    gone (:meth:`running`). Without an array (the Ray actor) it does nothing.
    """

    def __init__(self, array: Any = None) -> None:
        self._array = array

    def begin(self, first: int, last: int) -> None:
        if self._array is not None:
            self._array[1] = last
            self._array[0] = first

    def end(self) -> None:
        if self._array is not None:
            self._array[0] = 0

    def running(self) -> range:
        """The request ids of the run in progress (empty when none was)."""
        if self._array is None or self._array[0] <= 0:
            return range(0)
        first, last = int(self._array[0]), int(self._array[1])
        return range(first, max(first, last) + 1)


def framed(message: tuple[Any, ...]) -> memoryview:
    """``message`` as ``multiprocessing.Connection.send`` frames it (a length, then the pickle), so
    the other end's ``Connection.recv`` reads it.

    Pickled (as ``ForkingPickler.dumps`` pickles, its default protocol) behind room for the
    length, which is written in place after: no copy of the pickle. A prediction's 2.4 MB of
    points took 2.7 ms more here when the pickle was copied twice (the copies' fresh pages).
    """
    buffer = io.BytesIO()
    buffer.write(bytes(4))
    ForkingPickler(buffer).dump(message)
    size = buffer.tell() - 4
    view = buffer.getbuffer()
    if size > 0x7FFFFFFF:  # Connection's long frame: -1, then an 8-byte length
        return memoryview(struct.pack("!i", -1) + struct.pack("!Q", size) + view[4:])
    struct.pack_into("!i", view, 0, size)
    return view


#: the most bytes of messages on their way in the pipe's socket (its send buffer, each end's):
#: a prediction's 2.4 MB of points goes in one write, not a dozen turns of the API's event loop
#: each waiting for the worker to read 200 kB; the kernel caps it at net.core.wmem_max
PIPE_BUFFER_BYTES = 4 << 20


def widen(conn: Connection) -> None:
    """Give ``conn``'s end of the pipe a send buffer of :data:`PIPE_BUFFER_BYTES` (or the most
    the kernel allows); a pipe that is no socket is left as it is."""
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(conn.fileno())) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, PIPE_BUFFER_BYTES)


def received(conn: Connection) -> Any:
    """The next message on ``conn`` (blocking), as ``Connection.recv`` answers it, read into one
    buffer of the message's size: ``recv`` reads into a growing ``BytesIO`` through a fresh
    buffer per read and unpickles from a copy of it (2.4 MB of points to predict: 1.5 ms there,
    0.5 ms here). EOFError when the other end is gone."""
    fd = conn.fileno()
    head = _read_exactly(fd, 4)
    (size,) = struct.unpack("!i", head)
    if size == -1:
        (size,) = struct.unpack("!Q", _read_exactly(fd, 8))
    return ForkingPickler.loads(_read_exactly(fd, size))


def _read_exactly(fd: int, size: int) -> bytearray:
    buffer = bytearray(size)
    with memoryview(buffer) as view:
        got = 0
        while got < size:
            count = os.readv(fd, [view[got:]])
            if count == 0:
                raise EOFError
            got += count
    return buffer


def unframed(inbox: bytearray) -> list[Any]:
    """The whole messages at the start of ``inbox`` (framed as ``Connection.send`` frames them),
    taken out of it; a message that cannot be unpickled comes as the exception."""
    out: list[Any] = []
    start = 0
    while len(inbox) - start >= 4:
        (size,) = struct.unpack_from("!i", inbox, start)
        head = 4
        if size == -1:
            if len(inbox) - start < 12:
                break
            (size,) = struct.unpack_from("!Q", inbox, start + 4)
            head = 12
        if len(inbox) - start - head < size:
            break
        payload = memoryview(inbox)[start + head : start + head + size]
        try:
            out.append(ForkingPickler.loads(payload))
        except Exception as exc:
            out.append(exc)
        finally:
            payload.release()
        start += head + size
    del inbox[:start]
    return out
