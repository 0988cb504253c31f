"""The result arena: memory the API process and one worker both map, where the worker puts small
results for the API to send without reading a file.

The API process creates it (an anonymous ``memfd``, so no ``/dev/shm`` size limit applies, as
in a container) and hands it to each process it spawns for the worker, so it outlives restarts;
which part of it holds which job is the API's to decide (:mod:`service.runtime.pool.result_memory`).
A job's request names its place (offset, capacity); the worker writes the result's ``.npz``
there before its reply, and its file from those bytes behind the reply (as before: the file is
still what makes the result durable).
"""

from __future__ import annotations

import mmap
import os
from multiprocessing import reduction
from typing import Any

#: a request's place for its result in the arena: (offset, capacity) in bytes
Place = tuple[int, int]


class ResultArena:
    """A shared map of ``size`` bytes; pickles (only while spawning a process) as its descriptor."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self.map = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
        #: the whole arena as bytes (slices of it are views, no copies)
        self.view = memoryview(self.map)

    @classmethod
    def create(cls, size: int) -> ResultArena | None:
        """A new arena of ``size`` bytes (pages are taken as they are first written), or None
        where there can be none (``size`` 0, or no ``memfd_create``: results then go by file)."""
        if size <= 0 or not hasattr(os, "memfd_create"):
            return None
        fd = os.memfd_create("mst-results", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            return cls(fd, size)
        except BaseException:
            os.close(fd)
            raise

    def place(self, place: Place) -> memoryview:
        offset, capacity = place
        return self.view[offset : offset + capacity]

    def __reduce__(self) -> tuple[Any, ...]:
        # multiprocessing passes the descriptor to the child it is spawning (as its heap does)
        return _rebuild, (reduction.DupFd(self.fd), self.size)


def _rebuild(fd: Any, size: int) -> ResultArena:
    return ResultArena(fd.detach(), size)
