"""Which part of a worker's result arena holds which job's result, and for how long.

A job on a resident graph reserves a place in its worker's arena (:mod:`..worker.arena`) before
its request goes out, sized by what the graph's last forest needed (the first job of a graph
goes by file only). The worker writes the result's ``.npz`` there before it replies, so a
request for the result is answered from memory at once: no file read, no wait for the file
written behind the reply. The file is still written, from those bytes, and is what the result
falls back on once its place is reused.

Places are taken in a ring, oldest first out. A place is *pinned* while the worker may still
write or read it (from the reservation until the file is written behind the reply) and while a
response is sending from it: a view handed to the server keeps its place pinned until the
server has let go of every slice of it (the event loop may hold a slice until the socket takes
the bytes), so a place is never reused under a response. A reservation that would have to take
a pinned place gets none: that job goes by file, as before.
"""

from __future__ import annotations

import weakref
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..worker.arena import Place, ResultArena

#: header room of a forest's archive beyond its arrays' bytes (two members' local and central
#: headers and .npy headers, the end record: about 500 bytes)
ARCHIVE_OVERHEAD = 1024


def forest_bytes(num_edges: int, weight_itemsize: int) -> int:
    """Room for a forest's ``.npz`` (int64 edge ids and the weights)."""
    return num_edges * (8 + weight_itemsize) + ARCHIVE_OVERHEAD


@dataclass(eq=False)
class _Region:
    job_id: str
    offset: int
    capacity: int
    #: bytes of the archive the worker wrote (None until its reply says so)
    size: int | None = None
    #: the worker may write or read it (until its file is written)
    writing: bool = True
    #: responses sending from it now
    sending: int = 0

    @property
    def pinned(self) -> bool:
        return self.writing or self.sending > 0

    @property
    def end(self) -> int:
        return self.offset + self.capacity


class ResultMemory:
    """The places of one worker's arena (see the module's docstring)."""

    def __init__(self, arena: ResultArena) -> None:
        self.arena = arena
        #: live regions, oldest first; they lie in the arena in this order, wrapping once
        self._regions: deque[_Region] = deque()
        self._by_job: dict[str, _Region] = {}
        #: where the next region goes
        self._head = 0

    @property
    def size(self) -> int:
        return self.arena.size

    def reserve(self, job_id: str, capacity: int) -> Place | None:
        """A place of ``capacity`` bytes for a job's result, or None (too large, or only pinned
        places could be taken: the job goes by file)."""
        if capacity <= 0 or capacity > self.size // 4:
            return None
        while True:
            start = self._fit(capacity)
            if start is not None:
                break
            oldest = self._regions[0]
            if oldest.pinned:
                return None
            self._drop(oldest)
        region = _Region(job_id, start, capacity)
        self._regions.append(region)
        self._by_job[job_id] = region
        self._head = region.end
        return start, capacity

    def _fit(self, capacity: int) -> int | None:
        """Where a region of ``capacity`` goes without taking a live one's bytes, or None."""
        if not self._regions:
            self._head = 0
            return 0
        oldest = self._regions[0].offset
        if oldest < self._head:  # live bytes in one piece: room after them, or at the start
            if self._head + capacity <= self.size:
                return self._head
            return 0 if capacity <= oldest else None
        # wrapped: the room is between the newest region's end and the oldest's start
        return self._head if self._head + capacity <= oldest else None

    def _drop(self, region: _Region) -> None:
        self._regions.remove(region)
        if self._by_job.get(region.job_id) is region:
            del self._by_job[region.job_id]

    def filled(self, job_id: str, size: int) -> None:
        """The worker wrote ``size`` bytes of the job's archive (its reply said so)."""
        region = self._by_job.get(job_id)
        if region is not None and 0 < size <= region.capacity:
            region.size = size

    def written(self, job_id: str) -> None:
        """The job's file is written (or failed to be): the worker is done with its place."""
        region = self._by_job.get(job_id)
        if region is not None:
            region.writing = False
            if region.size is None:
                self._drop(region)

    def release(self, job_id: str) -> None:
        """The job will not use its place (it failed, or its reply came without the archive)."""
        region = self._by_job.get(job_id)
        if region is not None:
            region.writing = False
            region.size = None
            if not region.sending:
                self._drop(region)

    def view(self, job_id: str) -> memoryview | None:
        """The job's archive, if it is held here: a view that pins its place until every slice of
        it is released."""
        region = self._by_job.get(job_id)
        if region is None or region.size is None:
            return None
        # The view's buffer comes from this array: the array lives while any slice of the view
        # does, and its finalizer unpins the place once none is left.
        array = np.frombuffer(self.arena.map, dtype=np.uint8, count=region.size, offset=region.offset)
        region.sending += 1
        weakref.finalize(array, self._sent, region)
        return memoryview(array)  # type: ignore[arg-type]  # numpy arrays export the buffer protocol

    def _sent(self, region: _Region) -> None:
        region.sending -= 1
        if not region.pinned and region.size is None:
            self._drop(region)

    def holds(self, job_id: str) -> bool:
        region = self._by_job.get(job_id)
        return region is not None and region.size is not None
