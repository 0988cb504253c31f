"""What a worker and the API processes say to each other: the one thing both import.

Each worker listens on a Unix socket of its own (in the service's private run folder); every API
process keeps one connection to every worker and first says which API process it is
(``(HELLO, slot)``). Then, over each connection (or a Ray actor's calls, which carry the same
messages):

* a request is ``(op, req_id, stamp, flags, *args)``: ``req_id`` counts up per connection,
  ``stamp`` is the sender's ``time.monotonic()`` (system-wide on Linux) when it first wrote the
  request, ``flags`` say whether it is sent again after a worker's death (:data:`RESENT`). The
  worker reads every connection at once and takes the requests in stamp order, so a request
  written after another was answered (or queued: a submission is acknowledged only once its
  request is written) is never taken before it, whichever API processes sent them;
* the worker answers each with ``(req_id, ok, payload)``: ``payload`` a small dict, or the
  exception when ``ok`` is false. Bulk arrays rarely travel over the sockets: graphs come in as
  spool files, results go out as ``.npz`` files in the spool; only a one-shot's forest of at most
  ``MST_ONESHOT_INLINE_BYTES`` and a prediction's arrays come back in the reply (:data:`INLINE`);
* a handler's work behind its reply (an MST job's result file, :class:`Reply`) ends with a note
  ``(STORED, req_id, error)`` (``error`` None on success);
* control requests (:data:`CONTROL`) are answered as soon as they are read, not in the queue.

An MST request of a job carries its :class:`JobSpec`: the worker writes the job's transitions
in the store itself (:mod:`service.storage.job_table`) and answers with its final record.

Which requests a worker is computing is not a message: before a run it writes, per API process,
the run's request ids into the board (:meth:`~service.runtime.board.Board.stamp`), which an API
process reads when the worker dies.

Messages are framed as ``Connection.send`` frames them (:func:`framed`, :func:`unframed`), so
either end may write or read them in pieces without blocking.

Design: docs/design/worker-protocol.md.
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
from pathlib import Path
from typing import Any, Literal

# request operations
LOAD = "load"
MST = "mst"
WEIGHTS = "weights"
ONESHOT = "oneshot"
DROP = "drop"
PING = "ping"
#: the first message of a connection: which API process it is; the worker answers WELCOME
HELLO = "hello"
WELCOME = "welcome"
#: wait until a job's result file is written (or say at once that none is being written)
AWAIT_STORED = "await_stored"
#: a job submitted with ?wait= was given out unfinished: its record is in the store now
PUBLISHED = "published"
#: a new dataset's record is committed (COMMIT), or will not be (ABANDON: drop it)
COMMIT = "commit"
ABANDON = "abandon"
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

#: a request's flags: sent again to the next worker process after the one it went to died (a job
#: of it that its predecessor had begun runs again, see :mod:`.job_records`); and suspect: it ran
#: with others when a worker died, so it runs alone now (no other request in its run)
RESENT = 1
SUSPECT = 2
#: an API process has sent again everything it kept for a new worker process (which waits for
#: every API process's word, or a moment, before it runs anything: see :mod:`.loop`)
SYNCED = "synced"

#: requests a worker answers as soon as it reads them, whatever is queued (DROP among them: a
#: deleted dataset's queued jobs are cancelled, not run on what is still resident)
CONTROL = frozenset({HELLO, SYNCED, AWAIT_STORED, PUBLISHED, COMMIT, ABANDON, DROP, STOP})
#: the key of a job's reply that holds its final record, as stored
JOB = "job"

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
    #: the service's data dir (the worker opens the store there) and the worker's socket
    data_dir: str
    socket_path: str
    #: the value for CUDA_VISIBLE_DEVICES (the GPU this worker owns); None on the CPU backend
    cuda_device: str | None
    tmp_dir: str
    max_edges: int
    heartbeat_interval_s: float
    #: how long to poll for the next request before sleeping in recv (MST_WORKER_SPIN_MS)
    spin_s: float = 0.0
    #: bytes of graphs this worker may hold (MST_WORKER_MEMORY_BYTES); 0: its share of its device
    memory_bytes: int = 0
    #: how many workers share its device (MST_WORKERS_PER_GPU): without a cap each holds at most
    #: that share of the device's memory
    memory_share: int = 1
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
    #: how many API processes may connect (the board's run stamps per process)
    api_slots: int = 1
    #: the result files' folder (MST_RESULT_DIR); empty: the spool's ``results``
    result_dir: str = ""

    @property
    def result_folder(self) -> Path | None:
        """:attr:`result_dir` for :class:`~service.storage.store.Store` (None: the spool's)."""
        return Path(self.result_dir) if self.result_dir else None

    def inflate_caps(self) -> tuple[int, float]:
        """(most bytes, largest ratio) a compressed upload may inflate to: unlimited where unset."""
        return self.max_inflated_bytes or 2**63, self.max_compression_ratio or 1e18


@dataclass(frozen=True)
class JobSpec:
    """A job as its MST request carries it: what its worker needs to record it."""

    id: str
    graph_id: str
    created_at: float
    task: str
    #: the parameters as canonical JSON (what the record stores)
    params: str
    owner: str
    #: its record is in the store (queued): the worker starts it only if it is still queued;
    #: else (``?wait=``) the worker inserts its record when it ends
    published: bool
    #: it holds a quota token (MST_QUOTA_QUEUED_JOBS), released with its final record
    token: bool = False
    #: one shard's step of a job on a sharded graph: the first step to begin starts the job (a
    #: cancel wins until then); its coordinating API process writes the job's end
    step: bool = False


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


def framed(message: tuple[Any, ...]) -> memoryview:
    """``message`` as ``multiprocessing.Connection.send`` frames it (a length, then the pickle), so
    the other end's ``Connection.recv`` reads it.

    Pickled (as ``ForkingPickler.dumps`` pickles, its default protocol) behind room for the
    length, which is written in place after: no copy of the pickle (a large message's copies
    would fault in fresh pages).
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
#: a prediction's points go in one write, not many turns of the API's event loop each waiting
#: for the worker to read the default buffer's worth; the kernel caps it at net.core.wmem_max
PIPE_BUFFER_BYTES = 4 << 20


def widen(conn: Connection | socket.socket) -> None:
    """Give ``conn``'s end a send buffer of :data:`PIPE_BUFFER_BYTES` (or the most the kernel
    allows); a pipe that is no socket is left as it is."""
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(conn.fileno())) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, PIPE_BUFFER_BYTES)


def received(conn: Connection) -> Any:
    """The next message on ``conn`` (blocking), as ``Connection.recv`` answers it, read into one
    buffer of the message's size: ``recv`` reads into a growing ``BytesIO`` through a fresh
    buffer per read and unpickles from a copy of it. EOFError when the other end is gone."""
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
