"""Brute force for manhattan, chebyshev and minkowski keys in many coordinates, on either backend.

A matrix product filters Euclidean distances (``brute_cpu``, ``brute_gpu``); Minkowski keys have no
such shortcut, so here every key is computed exactly, tile by tile (``KeySpace.cross_keys`` on the
host, ``minkowski_tile`` of ``kernels/metrics.cu`` on the device: the same operations), and each
query row keeps its ``width`` least ``(key, id)``. The rounds are ``brute``'s, as for Euclidean
points, so the trees follow the same tie rule on both backends.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .brute import BruteIndex
from .metrics import KeySpace
from .tree import EuclideanTree

Array = Any
#: query rows per block and targets per tile, on the host and on the device
HOST_BLOCK, HOST_TILE = 256, 2048
DEVICE_BLOCK, DEVICE_TILE = 4096, 8192


class ExactEngine:
    """Exact key tiles over validated float64 coordinates (NumPy or CuPy), read-only once built."""

    def __init__(
        self, coords: Array, space: KeySpace, *, block: int | None = None, tile: int | None = None
    ) -> None:
        self.xp = _module_of(coords)
        on_host = self.xp is np
        self.coords = self.xp.ascontiguousarray(coords, dtype=self.xp.float64)
        self.space = space
        self.n, self.d = (int(v) for v in self.coords.shape)
        self.block = block or (HOST_BLOCK if on_host else DEVICE_BLOCK)
        self.tile = tile or (HOST_TILE if on_host else DEVICE_TILE)

    @property
    def nbytes(self) -> int:
        return int(self.coords.nbytes)

    def _cross(self, queries: Array, targets: Array) -> Array:
        if self.xp is np:
            return self.space.cross_keys(queries, targets)
        from .metric_kernels import device_cross_keys

        return device_cross_keys(queries, targets, self.space.code, self.space.p)

    def _sort(self, keys: Array) -> Array:
        return np.argsort(keys, axis=1, kind="stable") if self.xp is np else keys.argsort(axis=1)

    def _top(
        self,
        queries: Array,
        width: int,
        *,
        q_core: Array | None = None,
        core: Array | None = None,
        q_comp: Array | None = None,
        comp: Array | None = None,
    ) -> tuple[Array, Array]:
        """Each query row's ``width`` least ``(key, id)`` targets (``-1``/``+inf`` past the
        candidates): keys ``max(q_core, core, key)`` with cores, own-component targets skipped."""
        xp = self.xp
        q = int(queries.shape[0])
        ids = xp.full((q, width), -1, dtype=xp.int64)
        keys = xp.full((q, width), xp.inf)
        for s in range(0, self.n, self.tile):
            e = min(s + self.tile, self.n)
            tile = self._cross(queries, self.coords[s:e])
            if q_core is not None and core is not None:
                tile = xp.maximum(xp.maximum(q_core[:, None], core[None, s:e]), tile)
            if q_comp is not None and comp is not None:
                tile = xp.where(q_comp[:, None] == comp[None, s:e], xp.inf, tile)
            # earlier tiles hold lower ids, so a stable sort by key keeps the (key, id) order
            both_keys = xp.concatenate([keys, tile], axis=1)
            both_ids = xp.concatenate(
                [ids, xp.broadcast_to(xp.arange(s, e, dtype=xp.int64), tile.shape)], axis=1
            )
            order = self._sort(both_keys)[:, :width]
            keys = xp.take_along_axis(both_keys, order, axis=1)
            ids = xp.take_along_axis(both_ids, order, axis=1)
        return xp.where(xp.isinf(keys), -1, ids), keys

    def _blocks(self, count: int, top: Any) -> tuple[Array, Array]:
        pieces = [top(lo, min(lo + self.block, count)) for lo in range(0, count, self.block)]
        xp = self.xp
        if not pieces:
            return xp.empty((0, 0), dtype=xp.int64), xp.empty((0, 0))
        return xp.concatenate([p[0] for p in pieces]), xp.concatenate([p[1] for p in pieces])

    def nearest(self, width: int) -> tuple[Array, Array]:
        return self._blocks(self.n, lambda lo, hi: self._top(self.coords[lo:hi], width))

    def query(self, queries: Array, width: int) -> tuple[Array, Array]:
        q = self.xp.ascontiguousarray(queries, dtype=self.xp.float64)
        return self._blocks(int(q.shape[0]), lambda lo, hi: self._top(q[lo:hi], width))

    def outside(self, rows: Array, comp: Array, core2: Array | None, width: int) -> tuple[Array, Array]:
        def top(lo: int, hi: int) -> tuple[Array, Array]:
            r = rows[lo:hi]
            return self._top(
                self.coords[r], width, q_core=None if core2 is None else core2[r], core=core2,
                q_comp=comp[r], comp=comp,
            )  # fmt: skip

        return self._blocks(int(rows.shape[0]), top)


class ExactIndex(BruteIndex):
    """The brute-force index of Minkowski keys, on the backend of its coordinates' array module."""

    def __init__(self, coords: Array, space: KeySpace, *, owns_coords: bool = True, **engine: Any) -> None:
        started = time.perf_counter()
        self.engine = ExactEngine(coords, space, **engine)
        self.n, self.d = self.engine.n, self.engine.d
        self.cp = None if self.engine.xp is np else self.engine.xp
        self._owns_coords = owns_coords
        self._build_ms = (time.perf_counter() - started) * 1e3

    @property
    def nbytes(self) -> int:
        return self.engine.nbytes if self._owns_coords or self.cp is not None else 0

    def build_ms(self) -> float:
        return self._build_ms

    def tree(
        self, min_samples: int, started: float, fresh: bool, on_device: bool, *, keys: bool = False,
        core_scale: float = 1.0,
    ) -> EuclideanTree:  # fmt: skip
        if self.cp is None:
            from .brute_cpu import host_brute_tree

            return host_brute_tree(self, min_samples, started, fresh, keys, core_scale)
        from .brute_gpu import device_brute_tree

        return device_brute_tree(self, min_samples, started, fresh, on_device, keys, core_scale)

    def nearest(self, k: int) -> tuple[Array, Array]:
        return self.engine.nearest(k)

    def query(self, queries: Array, k: int) -> tuple[Array, Array]:
        return self.engine.query(queries, k)

    def coordinates(self) -> Array:
        return self.engine.coords


def _module_of(array: Any) -> Any:
    if type(array).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np
