"""The store: records in SQLite (WAL) and the spool folder holding their payloads, shared by every process.

Layout under the data dir::

    mst.sqlite3            records: graphs and point sets, placements, jobs, models, quota tokens
    .reserve               room kept for deletions on a full disk (:mod:`.reserve`)
    spool/tmp/             files being written (removed at start-up)
    spool/trash/           replaced weight files, freed in a thread after the answer (and at start-up)
    spool/graphs/<id>.npz  every stored graph: arrays src, dst, weight (+ num_vertices)
    spool/graphs/<id>.weights.npy  a graph's weights when they were replaced after its upload
    spool/results/<id>.npz every finished job's forest: arrays edge_ids, weights (least recently
                           used first out past MST_MAX_RESULT_BYTES)

Every process of the service opens its own :class:`Store` on the same data dir: the supervisor
(which recovers after a crash, :meth:`Store.recover`, and checkpoints the WAL), each API process
and each worker. What each writes: :mod:`.job_table`, :mod:`.graph_table`. The methods are the
interface a client/server database would implement to serve several hosts
(docs/design/architecture.md says what that takes).

Paths are only ever built from ids this module generated (random, 128 bits), never from client
input. A payload is written to ``spool/tmp``, fsynced and renamed into place before its record
is committed, so a record always has its file; a file without a record (a crash in between) is
removed at start-up.

Durability: ``synchronous=NORMAL`` in WAL mode, so a commit survives any crash of the service's
processes; payloads are also fsynced (with their folder). Result files are written by the worker
just after the job is recorded and are not fsynced; a lost one is computed again from the stored
graph when it is next asked for, and the job stays succeeded.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path

from .database import CHECKPOINT_INTERVAL_S, Checkpointer, Database
from .graph_table import GraphTable
from .job_table import JobTable
from .records import JobRecord
from .reserve import Reserve
from .schema import SCHEMA, migrate
from .spool import fsync_dir

#: a job's result file, and the part file a worker writes beside it (``.<name>.<pid>.part``): the
#: only names the store and the result cap ever remove from the result folder, which
#: ``MST_RESULT_DIR`` may put where other files live
RESULT_NAME = re.compile(r"j_[0-9a-f]{32}\.npz")
RESULT_PART = re.compile(r"\.j_[0-9a-f]{32}\.npz\.[0-9]+\.part")


class Store(GraphTable, JobTable):
    """SQLite records and the spool folder of one data dir; safe to share between threads.

    ``result_dir``: the result files' folder (default: the spool's ``results``); ``checkpoint``:
    this process checkpoints the WAL (one process of a service does: the supervisor);
    ``checkpoint_interval_s``: how often.
    """

    def __init__(
        self,
        data_dir: Path,
        checkpoint: bool = True,
        checkpoint_interval_s: float = CHECKPOINT_INTERVAL_S,
        result_dir: Path | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.spool = self.data_dir / "spool"
        self.tmp_dir = self.spool / "tmp"
        #: files replaced or dropped, waiting to be freed (see :meth:`publish_replacing`)
        self.trash_dir = self.spool / "trash"
        self.graph_dir = self.spool / "graphs"
        #: the result files (``MST_RESULT_DIR``: anywhere, a memory file system say)
        self.result_dir = Path(result_dir) if result_dir is not None else self.spool / "results"
        for folder in (self.data_dir, self.tmp_dir, self.trash_dir, self.graph_dir, self.result_dir):
            folder.mkdir(parents=True, exist_ok=True)
        #: room for the deletions that make room on a full disk (see :mod:`.reserve`)
        self.reserve = Reserve(self.data_dir)
        self.db = Database(self.data_dir / "mst.sqlite3")
        self.db.script(SCHEMA)
        with self.db.tx() as db:
            migrate(db)
        self._checkpoints: Checkpointer | None = None
        if checkpoint:
            self.reserve.keep()
            # the reserve is given up for a deletion on a full disk, and taken again when there is room
            self._checkpoints = Checkpointer(self.db.path, checkpoint_interval_s, self.reserve.keep)

    def close(self) -> None:
        if self._checkpoints is not None:
            self._checkpoints.stop()
        self.db.close()

    # -- spool paths (from generated ids only) ------------------------------------------------

    def graph_path(self, graph_id: str) -> Path:
        return self.graph_dir / f"{graph_id}.npz"

    def weights_path(self, graph_id: str) -> Path:
        """The graph's current weights when they were replaced after the upload (an ``.npy``)."""
        return self.graph_dir / f"{graph_id}.weights.npy"

    def result_path(self, job_id: str) -> Path:
        return self.result_dir / f"{job_id}.npz"

    def tmp_path(self, suffix: str = ".part") -> Path:
        """A fresh path in the spool's tmp folder (nothing is created)."""
        return self.tmp_dir / f"{secrets.token_hex(16)}{suffix}"

    @staticmethod
    def publish(tmp: Path, final: Path) -> None:
        """Rename a fully written, fsynced file into place and make the rename durable."""
        os.replace(tmp, final)
        fsync_dir(final.parent)

    def publish_replacing(self, tmp: Path, final: Path) -> Path | None:
        """:meth:`publish`, but the file it replaces (if any) keeps a link in the trash folder, whose
        path is returned: the caller removes it later, so that the rename does not wait for the
        file system to free the old data (tens of ms for a large file on a disk). A crash leaves it
        in the trash folder, which is emptied at start."""
        keep = self.trash_dir / f"{secrets.token_hex(16)}{final.suffix}"
        try:
            os.link(final, keep)
        except FileNotFoundError:  # nothing to replace
            self.publish(tmp, final)
            return None
        self.publish(tmp, final)
        return keep

    def delete_graph(self, graph_id: str, *, remove_payload: bool = True) -> bool:
        """Delete the record (placements and models too), then its payload (unless the caller
        removes it later); True when there was one."""
        gone = self.delete_graph_record(graph_id)
        if gone and remove_payload:
            self.graph_path(graph_id).unlink(missing_ok=True)
            self.weights_path(graph_id).unlink(missing_ok=True)
        return gone

    # -- start-up -----------------------------------------------------------------------------

    def recover(self, reason: str) -> tuple[list[JobRecord], int]:
        """Tidy up after the previous run of the service; the queued jobs (each worker runs those
        of its datasets again) and how many jobs failed.

        Jobs left ``running`` fail with ``worker_lost`` (the process that ran them is gone);
        temporary files, payloads and results without a record, and the quota tokens of what
        no longer runs are removed.
        """
        now = time.time()
        failed = self.db.write_count(
            "UPDATE jobs SET status = 'failed', finished_at = ?, error_type = 'worker_lost', "
            "error_message = ? WHERE status = 'running'",
            (now, reason),
        )
        self.release_finished_tokens()
        for leftover in (*self.tmp_dir.iterdir(), *self.trash_dir.iterdir()):
            leftover.unlink(missing_ok=True)
        known_graphs = {g.id for g in self.list_graphs()}
        for path in self.graph_dir.iterdir():
            if path.name.split(".", 1)[0] not in known_graphs:
                path.unlink(missing_ok=True)
        done = {r[0] for r in self.db.read("SELECT id FROM jobs WHERE status = 'succeeded'")}
        for path in self.result_dir.iterdir():
            if RESULT_PART.fullmatch(path.name) or (
                RESULT_NAME.fullmatch(path.name) and path.stem not in done
            ):
                path.unlink(missing_ok=True)
        # a succeeded job whose result file is missing stays succeeded: it is computed again if asked for
        return self.jobs_with_status("queued"), failed
