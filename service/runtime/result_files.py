"""The spool's result files under a size cap (``MST_MAX_RESULT_BYTES``), least recently used first out.

Every succeeded job keeps its record; its result *file* is a cache of a deterministic computation.
When the files together pass the cap, the least recently written or read ones are removed (in a
thread, off the event loop), and a later request for such a result computes it again from the
stored graph (:meth:`service.runtime.jobs.Jobs.result_path`), or answers 410 when the graph was
deleted or its weights changed since. Without a cap, results filled a 64 GB disk in two minutes of
the load benchmark (a 30M-edge graph's forest is ~90 MB a job).

Sizes are the files' own (a cached job's hard link counts again: the cap errs on the safe side).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict

from ..storage.spool import remove_later
from ..storage.store import Store


class ResultFiles:
    """Sizes of the result files by job id, least recently used first."""

    def __init__(self, store: Store, max_bytes: int) -> None:
        self._store = store
        self.max_bytes = max_bytes
        self._sizes: OrderedDict[str, int] = OrderedDict()
        self.total_bytes = 0
        if max_bytes:
            found = []
            for path in store.result_dir.glob("*.npz"):
                with contextlib.suppress(FileNotFoundError):
                    stat = path.stat()
                    found.append((stat.st_mtime, path.stem, stat.st_size))
            for _, job_id, size in sorted(found):  # oldest first
                self._sizes[job_id] = size
                self.total_bytes += size

    def stored(self, job_id: str) -> None:
        """A job's result file was written (or linked): count it, then keep to the cap."""
        if not self.max_bytes:
            return
        try:
            size = self._store.result_path(job_id).stat().st_size
        except FileNotFoundError:
            return
        self.total_bytes += size - self._sizes.pop(job_id, 0)
        self._sizes[job_id] = size
        self._keep_to_cap()

    def used(self, job_id: str) -> None:
        """A job's result was asked for: it is the most recently used now."""
        if job_id in self._sizes:
            self._sizes.move_to_end(job_id)

    def _keep_to_cap(self) -> None:
        doomed = []
        while self.total_bytes > self.max_bytes and len(self._sizes) > 1:  # never the newest one
            job_id, size = self._sizes.popitem(last=False)
            self.total_bytes -= size
            doomed.append(self._store.result_path(job_id))
        if doomed:
            remove_later(*doomed)
