"""The device's brute-force searches: float16 tensor-core products fused with the selection, every
candidate rechecked exactly.

The same searches as ``brute_cpu`` (and the same rounds, ``brute``), on the device. The index keeps
a float16 copy of the points, shifted by their mean and scaled by a power of two (``filter``:
``float16_scale``); ``kernels/brute.cu``'s ``fused_select`` multiplies a block of 128 query rows (64
above 768 coordinates; :data:`VARIANTS`) with every tile of 128 targets on the tensor cores
(``mma.sync``; on compute capability 9.0 ``kernels/brute_wgmma.cu``'s builds on Hopper's ``wgmma``,
:data:`WGMMA_VARIANTS`, the same products) and selects in the same kernel: each row keeps the
targets whose filtered key is at most its threshold in a buffer (``cap`` entries) and tightens the
threshold from the buffer's m-th key when it fills, so the products never reach device memory and
nothing waits on the host per tile. ``fused_flush`` then rechecks each row's survivors exactly in
float64 (coordinate order, no FMA) and merges them into the row's list of the ``m`` least ``(key,
id)``. Rows go in batches of ``batch`` (their buffers: ``batch x cap x 8`` bytes); a row whose
buffer cannot take another tile even after compaction (ties and near-ties inside the filter's
margin) stops, is flushed and is launched again from where it stopped, so any number of ties is
exact; the host reads one counter per search.

``devices``: the searches' rows are split over these devices (contiguous blocks, in proportion),
each holding its own copy of the targets; a row's list does not depend on where it is computed.

Device memory for ``n`` points of ``d`` coordinates (:func:`workspace_bytes` counts it): the index
keeps the float64 points (``8nd``; the exact recheck reads them), the float16 copy (``2n d32``,
``d32`` the coordinates rounded up to 32) and per-point norms and margins; a tree adds the lists,
a permuted float16 copy for the searches outside a component and one batch's buffers.

Design: docs/design/brute-force.md.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._backend.arrays import to_host
from .._backend.kernels import BRUTE_FILE, BRUTE_WGMMA_FILE, kernel
from .brute import BruteIndex, boruvka, finish_order, list_width, plan_blocks, split_rows, stable_argsort
from .filter import Precision, float16_scale, row_terms
from .tree import EuclideanTree

Array = Any
#: targets per tile (FS_BN in kernels/brute.cu)
BN = 128
#: candidates a row's buffer holds, and for lists wider than WIDE (the kernel keeps a buffer at
#: most cap - 2 BN full after compaction, so a list of m needs cap >= m + 2 BN)
CAP = 512
CAP_WIDE = 1024
WIDE = CAP - 2 * BN
#: query rows per launch (their buffers: BATCH x CAP x 8 bytes, 256 MiB)
BATCH = 1 << 16
#: the longest list the flush merges (FL_SORT in kernels/brute.cu is twice it)
MAX_WIDTH = 256
#: shared memory of a fused_select block besides its rows: STAGES stages of 128 targets x (BK + 8)
#: halves (FS_STAGES), 20 bytes per query row (FS_ROW_BYTES; a streamed build 4 more, the row's
#: source), 64 bytes of static and spare
STAGES = 3
_ROW_BYTES = 20
_SOURCE_BYTES = 4
_SPARE = 64
#: shared memory the driver keeps per block besides the block's own (sm_80 on): a multiprocessor
#: holds ``limit + _RESERVED`` bytes, ``limit`` the most one block may take
_RESERVED = 1024
#: bytes a wgmma build's block allows for aligning its tiles to 1,024 bytes (the swizzle's atoms)
_WG_ALIGN = 1024
#: the default build where the caller names none (``stream=None``, ``MST_BRUTE_STREAM`` unset): a
#: streamed build where the resident one leaves fewer than two blocks a multiprocessor (False: the
#: first resident build that fits). One H200, nearest(26), the same lists: 10^5 x 768 167 -> 118 ms
#: (resident 128 x 32 against streamed 128 x 64), 10^5 x 384 70 -> 58; at 10^6 x 128, where two
#: resident blocks fit, streaming costs 1,301 -> 1,401 ms (:func:`variant_for`)
STREAM_WHEN_ONE_BLOCK = True
#: the environment variable that forces (``1``) or forbids (``0``) the streamed builds
STREAM_ENV = "MST_BRUTE_STREAM"
#: the environment variable that forbids (``0``) the wgmma builds on compute capability 9.0
WGMMA_ENV = "MST_BRUTE_WGMMA"
FLUSH_WARPS = 4
#: a search of few rows (a refresh of a round's last components, a small query) is a few blocks,
#: each sweeping every target: it takes one block's whole pass while the device idles. Such a
#: search's targets are split into windows of at least SPLIT_MIN_TILES tiles (at most SPLIT_MAX),
#: each window searched on its own stream, so the blocks fill the device; the windows' exact lists
#: merge into the same list (:func:`target_splits`, :func:`merge_lists`). Each window costs the host
#: its setup, launches and read-back: one H200, outside() of 1 / 64 / 512 rows at 10^5 x 768 took
#: 5.5 / 7.2 / 8.2 ms with at most 8 windows, 10.9 / 8.8 / 10.1 with 16, 17.7 / 18.4 / 18.3 with
#: 64, 13.4 / 16.2 / 19.0 unsplit (at 10^6 x 128: 8.6 / 10.5 / 15.1, 26.9 / 32.3 / 42.1 with 64)
SPLIT_MIN_TILES = 16
SPLIT_MAX = 8
#: the largest float16 magnitude a query may reach after scaling (beyond: the host's search)
_QUERY_LIMIT = 60000.0
#: float64 bytes a chunk of the index's float16 copy and norms takes at most (bounded temporaries)
_CHUNK_BYTES = 1 << 26


@functools.cache
def _row_squares(dtype: str) -> Any:
    """A CuPy reduction: each row's sum of squares in float64."""
    import cupy

    x = "(double)(float)x" if dtype == "float16" else "(double)x"
    return cupy.ReductionKernel(
        "T x", "float64 y", f"{x} * {x}", "a + b", "y = a", "0", f"row_squares_{dtype}"
    )


def chunk_rows(d: int) -> int:
    """Rows of a chunk of the index's float16 copy: :data:`_CHUNK_BYTES` of float64 coordinates."""
    return max(1, _CHUNK_BYTES // (8 * d))


def _k(name: str, wgmma: bool = False) -> Any:
    return kernel(name, BRUTE_WGMMA_FILE if wgmma else BRUTE_FILE)


@dataclasses.dataclass(frozen=True)
class Variant:
    """A build of ``fused_select``: query rows a block, coordinates a pipeline stage, whether the
    block's rows stream through the stages beside the targets (``stream``: shared memory
    independent of ``d``) or stay resident in shared memory (the same products, bit for bit), and
    whether the products run on Hopper's ``wgmma`` (``kernels/brute_wgmma.cu``: 128 rows, stages
    of 64 coordinates in the tensor cores' swizzled layout) rather than ``mma.sync``."""

    rows: int
    chunk: int
    stream: bool = False
    wgmma: bool = False

    @property
    def kernel(self) -> str:
        if self.wgmma:
            return "fused_select_wgs" if self.stream else "fused_select_wg"
        if self.rows == 64:
            return "fused_select_64"
        name = "fused_select_128s" if self.stream else "fused_select_128"
        return name if self.chunk == 64 else f"{name}_32"

    @property
    def threads(self) -> int:
        return self.rows // 64 * 128

    def padded(self, d: int) -> int:
        """Coordinates of the float16 rows: ``d`` rounded up to a whole stage."""
        return -(-d // self.chunk) * self.chunk

    def smem(self, d: int) -> int:
        """Dynamic shared memory of a block (the kernels' layout): resident, its float16 rows
        then STAGES stages of targets; streamed, STAGES stages of rows and targets; then the rows'
        state. The wgmma builds' rows are unpadded (128 bytes a row and stage, swizzled), with
        1,024 bytes to align them, and a stage's tile norms."""
        if self.wgmma:
            tile = self.rows * self.chunk * 2  # bytes of a stage's rows (or a tile's targets)
            a = STAGES * tile if self.stream else self.padded(d) // self.chunk * tile
            return (
                _WG_ALIGN
                + a
                + STAGES * (BN * self.chunk * 2 + BN * 4)
                + self.rows * (_ROW_BYTES + _SOURCE_BYTES)
            )
        row = (self.chunk + 8) * 2  # bytes of a row of a stage
        if self.stream:
            return STAGES * (self.rows + BN) * row + self.rows * (_ROW_BYTES + _SOURCE_BYTES)
        return self.rows * (self.padded(d) + 8) * 2 + STAGES * BN * row + self.rows * _ROW_BYTES

    def blocks(self, d: int, limit: int) -> int:
        """Blocks a multiprocessor holds by shared memory (``limit``: the most one block may take)."""
        return (limit + _RESERVED) // (self.smem(d) + _SPARE + _RESERVED)


#: the builds: resident, fastest first (128 rows and stages of 64 coordinates while the rows fit),
#: then streamed (128 rows, stages of 64 or 32 coordinates)
VARIANTS = (
    Variant(128, 64),
    Variant(128, 32),
    Variant(64, 32),
    Variant(128, 64, stream=True),
    Variant(128, 32, stream=True),
)
#: the wgmma builds (compute capability 9.0), chosen among by the same rule
WGMMA_VARIANTS = (Variant(128, 64, wgmma=True), Variant(128, 64, stream=True, wgmma=True))


def variant_for(
    d: int,
    limit: int,
    rows: int | None = None,
    chunk: int | None = None,
    stream: bool | None = None,
    wgmma: bool = False,
) -> Variant:
    """The first build of :data:`VARIANTS` (``wgmma``: of :data:`WGMMA_VARIANTS` first) whose block
    fits ``limit`` bytes of shared memory (``rows``, ``chunk``, ``stream``: only builds of those).
    Where ``stream`` is None the resident build comes first, unless :data:`STREAM_WHEN_ONE_BLOCK`
    and it leaves fewer than two blocks a multiprocessor where a streamed build gets two."""
    fits = [
        v
        for v in (WGMMA_VARIANTS + VARIANTS if wgmma else VARIANTS)
        if rows in (None, v.rows)
        and chunk in (None, v.chunk)
        and stream in (None, v.stream)
        and v.smem(d) + _SPARE <= limit
    ]
    if not fits:
        raise ValueError(f"no fused_select build holds {d} coordinates in {limit} bytes of shared memory")
    if stream is None and STREAM_WHEN_ONE_BLOCK and fits[0].blocks(d, limit) < 2:
        two = [v for v in fits if v.stream and v.blocks(d, limit) >= 2]
        return two[0] if two else fits[0]
    return fits[0]


def stream_setting(value: str | None) -> bool | None:
    """``MST_BRUTE_STREAM``'s value: ``1`` forces the streamed builds, ``0`` forbids them, unset
    or empty leaves the choice to :func:`variant_for`."""
    if value is None or value.strip() == "":
        return None
    if value.strip() in ("0", "1"):
        return value.strip() == "1"
    raise ValueError(f"{STREAM_ENV} must be 0 or 1 (or unset); got {value!r}")


def wgmma_setting(value: str | None) -> bool:
    """``MST_BRUTE_WGMMA``'s value: ``0`` forbids the wgmma builds; ``1``, unset or empty allows
    them where the device has them."""
    if value is None or value.strip() in ("", "1"):
        return True
    if value.strip() == "0":
        return False
    raise ValueError(f"{WGMMA_ENV} must be 0 or 1 (or unset); got {value!r}")


@dataclasses.dataclass
class _Rows:
    """A search's query rows on one device: slot ``s`` (the search's row order) is row ``src[s]``
    (or ``s``) of every array but ``src`` and ``out``, and its list goes to ``out[s]`` (or ``s``)."""

    half: Array  # float16 rows the kernel reads
    src: Array | None  # int32: slot -> row (None: the slot itself)
    exact: Array  # float64 rows the flush reads
    norm2: Array  # scaled squared norms of the float16 rows (float64)
    alpha: Array
    beta: Array
    core: Array | None = None  # scaled squared core distances (float64)
    core_raw: Array | None = None  # the same, unscaled (the exact keys')
    comp: Array | None = None  # int32 components
    out: Array | None = None  # int32: slot -> row of the lists (None: the slot itself)

    @property
    def count(self) -> int:
        return int((self.norm2 if self.src is None else self.src).shape[0])

    def part(self, lo: int, hi: int) -> _Rows:
        """Slots ``[lo, hi)`` as slots from 0, their lists from row 0."""
        if self.src is not None:
            return dataclasses.replace(self, src=self.src[lo:hi], out=None)
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return _Rows(**{k: None if v is None else v[lo:hi] for k, v in fields.items()})


@dataclasses.dataclass
class _Cols:
    """A search's targets on one device, by position (the search's target order)."""

    half: Array  # (n, dpad) float16
    norm2f: Array  # float32 scaled squared norms
    exact: Array  # float64 points by point id
    order: Array | None = None  # int64 position -> point id (None: the identity)
    core_f: Array | None = None  # float32 scaled squared cores, rounded down
    core_d: Array | None = None  # the same in float64
    core_raw: Array | None = None  # unscaled, by point id
    comp: Array | None = None  # int32

    @property
    def n(self) -> int:
        return int(self.norm2f.shape[0])


@dataclasses.dataclass
class _Blocks:
    """Blocks of query rows (host arrays over slots): ``[lo, hi)``, and the target positions
    ``[skip_lo, skip_hi)`` a block skips (its component's own; empty: ``n, n``)."""

    lo: np.ndarray[Any, Any]
    hi: np.ndarray[Any, Any]
    skip_lo: np.ndarray[Any, Any] | None = None
    skip_hi: np.ndarray[Any, Any] | None = None

    @classmethod
    def uniform(cls, count: int, rows: int) -> _Blocks:
        lo = np.arange(0, count, rows, dtype=np.int64)
        return cls(lo, np.minimum(lo + rows, count))

    def part(self, first: int, last: int) -> _Blocks:
        """Blocks ``[first, last)``, their slots from 0."""
        shift = self.lo[first] if last > first else 0
        skip = (
            None
            if self.skip_lo is None or self.skip_hi is None
            else (self.skip_lo[first:last], self.skip_hi[first:last])
        )
        return _Blocks(self.lo[first:last] - shift, self.hi[first:last] - shift, *(skip or (None, None)))


class _Replica:
    """One device's copies of the index's targets."""

    def __init__(self, half: Array, norm2f: Array, coords: Array) -> None:
        self.half, self.norm2f, self.coords = half, norm2f, coords


class DeviceEngine:
    """The brute-force searches over validated float64 coordinates on the device (CuPy).

    ``precision``: the filter's products (``float16``, the tensor cores'); ``cap``, ``batch``:
    a row's buffer (at least 384) and query rows per launch; ``rows_per_block`` (128 or 64),
    ``chunk`` (coordinates a pipeline stage, 64 or 32) and ``stream`` (the block's rows streamed
    through the stages, True, or resident, False): the kernel's build (None: the fastest the
    shared memory takes, :data:`VARIANTS`; ``stream`` None: the environment's ``MST_BRUTE_STREAM``,
    ``1`` or ``0``, where it names a build the other two allow, else :func:`variant_for`'s choice);
    ``wgmma``: the products on Hopper's wgmma (:data:`WGMMA_VARIANTS`) where the device has it
    (compute capability 9.0) and the other knobs allow (None: unless ``MST_BRUTE_WGMMA=0``; False:
    never; True: required); ``devices``: the device ids the searches are split over (None: the
    current device). The tests make ``cap`` and ``batch`` small so that stops, relaunches and
    several batches meet small sets.
    """

    def __init__(
        self,
        coords: Array,
        precision: Precision = "float16",
        *,
        cap: int = CAP,
        batch: int = BATCH,
        rows_per_block: int | None = None,
        chunk: int | None = None,
        stream: bool | None = None,
        wgmma: bool | None = None,
        devices: Sequence[int] | None = None,
    ) -> None:
        cp = self.xp = self._array_module()
        if precision != "float16":
            raise ValueError(
                f"the device's filter runs on float16 tensor cores; got precision={precision!r}."
            )
        if cap < 3 * BN or cap % 32:
            raise ValueError(f"cap must be a multiple of 32 of at least {3 * BN}; got {cap}.")
        if rows_per_block not in (None, 64, 128) or chunk not in (None, 32, 64):
            raise ValueError(
                f"rows_per_block must be 64 or 128, chunk 32 or 64; got {rows_per_block}, {chunk}"
            )
        self.precision: Precision = precision
        self.cap, self.batch = cap, max(1, batch)
        self.coords = cp.ascontiguousarray(cp.asarray(coords, dtype=cp.float64))
        self.n, self.d = (int(x) for x in self.coords.shape)

        self.device_ids = [self._current()] if not devices else [int(i) for i in devices]
        if stream is None:  # the environment's, where the other knobs allow a build of it
            stream = stream_setting(os.environ.get(STREAM_ENV))
            if stream and rows_per_block == 64:
                stream = None
        if stream and rows_per_block == 64:
            raise ValueError("the streamed builds have 128 rows a block; got rows_per_block=64")
        capable = self._wgmma_capable()
        if wgmma and not capable:
            raise ValueError("wgmma=True needs a device of compute capability 9.0 (Hopper)")
        allowed = capable and (wgmma if wgmma is not None else wgmma_setting(os.environ.get(WGMMA_ENV)))
        self.variant = variant_for(self.d, self._shared_limit(), rows_per_block, chunk, stream, allowed)
        if wgmma and not self.variant.wgmma:
            raise ValueError(f"no wgmma build with rows_per_block={rows_per_block}, chunk={chunk}")
        self.block_rows, self.dpad = self.variant.rows, self.variant.padded(self.d)
        self.shift = self.coords.mean(axis=0)
        self._float16_copy()
        self.alpha, self.beta = row_terms(cp, self.norms, self.radius, self.scale, self.d, precision)
        self._replicas: dict[int, _Replica] = {
            self.device_ids[0]: _Replica(self.half, self.norm2f, self.coords)
        }
        #: where a caller wants each launch timed: (what, start event, end event), appended
        self.events: list[tuple[str, Any, Any]] | None = None

    # what ties the engine to CuPy and its kernels (the tests' model of the kernels replaces these)

    def _array_module(self) -> Any:
        import cupy

        return cupy

    def _current(self) -> int:
        return int(self.xp.cuda.Device().id)

    def _shared_limit(self) -> int:
        return int(self.xp.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"])

    def _wgmma_capable(self) -> bool:
        """Whether every device of the searches runs the sm_90a builds (compute capability 9.0
        exactly): one build serves them all."""
        return all(str(self.xp.cuda.Device(i).compute_capability) == "90" for i in self.device_ids)

    def _on(self, device: int) -> Any:
        """A context in which ``device`` is the current one."""
        return self.xp.cuda.Device(device)

    def _wave(self) -> int:
        """Blocks the device runs at once (a wave): multiprocessors times the blocks one holds."""
        return self._multiprocessors() * self.variant.blocks(self.d, self._shared_limit())

    def _multiprocessors(self) -> int:
        return int(self.xp.cuda.Device().attributes["MultiProcessorCount"])

    def _stream(self) -> Any:
        """A context in which a new stream of the current device is the current one (a blocking
        stream: it waits for the null stream's work, where the searches' arrays were set up)."""
        return self.xp.cuda.Stream()

    def _row_squares(self, rows: Array) -> Array:
        """Each row's sum of squares, summed in float64 (float16 rows widened exactly), with no
        temporary of the rows' size."""
        return _row_squares(str(rows.dtype))(rows, axis=1)

    def _kernel(self, name: str, shared: int = 0) -> Any:
        """A kernel of ``kernels/brute.cu``, allowed ``shared`` bytes of dynamic shared memory."""
        found = _k(name, wgmma=name.startswith("fused_select_wg"))
        if shared > 48 * 1024:
            found.max_dynamic_shared_size_bytes = shared
        return found

    def _float16_copy(self) -> None:
        """The scaled float16 rows (zeros past ``d``), their squared norms in float64 and float32,
        and the float64 norms of the shifted points, :func:`chunk_rows` rows at a time (the one
        temporary: a float64 chunk)."""
        cp, n = self.xp, self.n
        step = chunk_rows(self.d)
        largest = 0.0
        for lo in range(0, n, step):
            shifted = self.coords[lo : lo + step] - self.shift
            largest = max(largest, float(cp.abs(shifted, out=shifted).max()))
            del shifted
        scale = float16_scale(largest)
        #: coordinates float16 cannot hold even scaled (past 2^±500): the host's exact searches
        self.fallback = scale is None
        self.scale = 1.0 if scale is None else scale
        self.scale2 = self.scale * self.scale
        if self.fallback:
            n = 0
        self.half = cp.zeros((n, self.dpad), dtype=cp.float16)
        self.norm2 = cp.empty(n)
        self.norms = cp.empty(n)
        for lo in range(0, n, step):
            sl = slice(lo, min(lo + step, n))
            shifted = self.coords[sl] - self.shift
            shifted *= self.scale  # a power of two: exact, and so are the norms divided by it
            self.norms[sl] = cp.sqrt(self._row_squares(shifted)) / self.scale
            self.half[sl, : self.d] = shifted
            del shifted
            self.norm2[sl] = self._row_squares(self.half[sl, : self.d])
        self.norm2f = self.norm2.astype(cp.float32)
        self.radius = float(self.norms.max()) if n else 0.0
        if self.fallback:
            self.norms = cp.zeros(self.n)

    @property
    def nbytes(self) -> int:
        arrays = (self.coords, self.half, self.norm2, self.norm2f, self.norms, self.alpha, self.beta)
        return int(sum(a.nbytes for a in arrays))

    def _host(self) -> Any:
        """The host's engine over the same points (exact too): lists wider than the flush merges,
        coordinates past float16's reach."""
        from .brute_cpu import HostEngine

        return HostEngine(to_host(self.coords))

    def _replica(self, device: int) -> _Replica:
        """The targets on ``device`` (copied from the first device once)."""
        if device not in self._replicas:
            cp = self.xp
            with self._on(device):
                self._replicas[device] = _Replica(
                    cp.asarray(self.half), cp.asarray(self.norm2f), cp.asarray(self.coords)
                )
        return self._replicas[device]

    # the searches -----------------------------------------------------------------------------

    def nearest(self, width: int) -> tuple[Array, Array]:
        cp = self.xp
        if width > MAX_WIDTH or self.fallback:
            ids, keys = self._host().nearest(width)
            return cp.asarray(ids), cp.asarray(keys)
        rows = _Rows(self.half, None, self.coords, self.norm2, self.alpha, self.beta)
        return self._search(rows, lambda rep: _Cols(rep.half, rep.norm2f, rep.coords), width, None)

    def query(self, queries: Array, width: int) -> tuple[Array, Array]:
        cp = self.xp
        exact = cp.ascontiguousarray(queries, dtype=cp.float64)
        count = int(exact.shape[0])
        shifted = exact - self.shift
        too_far = self.fallback or (count and float(cp.abs(shifted).max()) * self.scale > _QUERY_LIMIT)
        if width > MAX_WIDTH or too_far:  # wider than the flush merges, or past float16's range
            ids, keys = self._host().query(to_host(exact), width)
            return cp.asarray(ids), cp.asarray(keys)
        half = cp.zeros((count, self.dpad), dtype=cp.float16)
        half[:, : self.d] = (shifted * self.scale).astype(cp.float16)
        wide = half[:, : self.d].astype(cp.float64)
        norm2 = cp.einsum("ij,ij->i", wide, wide)
        norms = cp.sqrt(cp.einsum("ij,ij->i", shifted, shifted))
        del shifted, wide
        alpha, beta = row_terms(cp, norms, self.radius, self.scale, self.d, self.precision)
        rows = _Rows(half, None, exact, norm2, alpha, beta)
        return self._search(rows, lambda rep: _Cols(rep.half, rep.norm2f, rep.coords), width, None)

    def outside(self, rows: Array, comp: Array, core2: Array | None, width: int) -> tuple[Array, Array]:
        cp = self.xp
        if width > MAX_WIDTH or self.fallback:
            ids, keys = self._host().outside(
                to_host(rows), to_host(comp), None if core2 is None else to_host(core2), width
            )
            return cp.asarray(ids), cp.asarray(keys)
        order = stable_argsort(cp, comp)  # targets grouped by component
        comp_sorted = comp[order]
        labels = cp.arange(int(comp_sorted[-1]) + 1)
        first = to_host(cp.searchsorted(comp_sorted, labels, side="left"))
        last = to_host(cp.searchsorted(comp_sorted, labels, side="right"))
        perm = stable_argsort(cp, comp[rows])
        by_comp = rows[perm]
        blocks = _component_blocks(to_host(comp[by_comp]), first, last, self.block_rows, self.n)
        scaled = None if core2 is None else core2 * self.scale2  # a power of two: exact
        comp32 = comp.astype(cp.int32)
        search_rows = _Rows(
            self.half, by_comp.astype(cp.int32), self.coords, self.norm2, self.alpha, self.beta, scaled,
            core2, comp32, perm.astype(cp.int32),
        )  # fmt: skip

        def cols(rep: _Replica) -> _Cols:
            at = cp.asarray(order)  # on the replica's device
            core_d = None if scaled is None else cp.asarray(scaled)[at]
            core_f = None if core_d is None else cp.nextafter(core_d.astype(cp.float32), cp.float32(-cp.inf))
            return _Cols(
                rep.half[at], rep.norm2f[at], rep.coords, at, core_f, core_d,
                None if core2 is None else cp.asarray(core2), cp.asarray(comp32)[at],
            )  # fmt: skip

        return self._search(search_rows, cols, width, blocks)

    def products_only(self) -> float:
        """Every block's products with every tile, nothing selected: the tensor cores' arithmetic
        alone, the floor under any search's time; returns 0."""
        rows = _Rows(self.half, None, self.coords, self.norm2, self.alpha, self.beta)
        rep = self._replicas[self.device_ids[0]]
        search = _LocalSearch(self, rows, _Cols(rep.half, rep.norm2f, rep.coords), 1, None, mode=1)
        search.launch()
        return 0.0

    def dump_products(self, lo: int, hi: int) -> Array:
        """The float32 products of points ``[lo, hi)`` with every point, as the kernel holds them
        (the tests' check of its tensor-core fragments)."""
        rows = _Rows(self.half, None, self.coords, self.norm2, self.alpha, self.beta).part(lo, hi)
        rep = self._replicas[self.device_ids[0]]
        search = _LocalSearch(self, rows, _Cols(rep.half, rep.norm2f, rep.coords), 1, None, mode=2)
        search.launch()
        assert search.dump is not None
        return search.dump

    def _search(self, rows: _Rows, cols: Any, m: int, blocks: _Blocks | None) -> tuple[Array, Array]:
        """Every row's ``m`` least ``(exact key, id)`` targets (in ``rows.out``'s order), the rows
        split over the devices."""
        cp = self.xp
        if rows.count == 0:
            return cp.full((0, m), -1, dtype=cp.int64), cp.full((0, m), cp.inf)
        blocks = blocks if blocks is not None else _Blocks.uniform(rows.count, self.block_rows)
        home = self._replica(self.device_ids[0])
        with self._on(self.device_ids[0]):
            targets = cols(home)
            slots = self._wave()
            # the windows' lists and their merge within what a search of every point's takes
            limit = min(self.batch, self.n // 4)
            splits = target_splits(blocks.lo.size, rows.count, -(-targets.n // BN), slots, limit)
            if splits > 1:
                # a small search runs on the first device alone, its targets in windows that
                # fill it: split over the devices by rows, its few blocks would leave each device
                # nearly idle (one block sweeping every target)
                return self._split_search(_on_device(cp, rows), targets, m, blocks, splits)
        cols = _Fixed(targets, home, cols)
        parts = [
            (dev, run)
            for dev, run in zip(
                self.device_ids, split_rows(blocks.hi - blocks.lo, len(self.device_ids)), strict=True
            )
            if run[1] > run[0]
        ]
        # every device's inputs first (copies from the first device, which may wait on its queue),
        # then every device's launches (asynchronous: all queued before any waits)
        searches: list[_LocalSearch] = []
        for device, (first, last) in parts:
            lo, hi = int(blocks.lo[first]), int(blocks.hi[last - 1])
            part = rows if len(parts) == 1 else rows.part(lo, hi)
            with self._on(device):
                searches.append(
                    _LocalSearch(
                        self, _on_device(cp, part), cols(self._replica(device)), m, blocks.part(first, last)
                    )
                )
        for local in searches:
            with self._on(local.device):
                local.launch()
        for local in searches:
            with self._on(local.device):
                local.finish()
        if len(searches) == 1:
            return searches[0].ids, searches[0].keys
        ids = cp.concatenate([cp.asarray(s.ids) for s in searches])
        keys = cp.concatenate([cp.asarray(s.keys) for s in searches])
        if rows.out is None:
            return ids, keys
        out_ids, out_keys = cp.empty_like(ids), cp.empty_like(keys)
        out_ids[rows.out], out_keys[rows.out] = ids, keys
        return out_ids, out_keys

    def _split_search(
        self, rows: _Rows, targets: _Cols, m: int, blocks: _Blocks, splits: int
    ) -> tuple[Array, Array]:
        """:meth:`_search` on one device with the targets in ``splits`` windows of whole tiles,
        each a search of its own on a stream of its own (all set up, then all launched, then all
        finished), their lists merged."""
        tiles = -(-targets.n // BN)
        searches = []
        for s in range(splits):
            a = s * tiles // splits * BN
            b = min((s + 1) * tiles // splits * BN, targets.n)
            searches.append(
                _LocalSearch(self, rows, _window(self.xp, targets, a, b), m, _window_blocks(blocks, a, b))
            )
        streams = [self._stream() for _ in searches]
        for local, stream in zip(searches, streams, strict=True):
            with stream:
                local.launch()
        for local, stream in zip(searches, streams, strict=True):
            with stream:
                local.finish()
        return merge_lists(self.xp, [s.ids for s in searches], [s.keys for s in searches], m)


class _Fixed:
    """Targets already built for one replica (the first device's), handed on where
    :meth:`DeviceEngine._search` takes a builder; any other replica's built by ``builder``."""

    def __init__(self, targets: _Cols, replica: _Replica, builder: Callable[[_Replica], _Cols]) -> None:
        self.targets, self.replica, self.builder = targets, replica, builder

    def __call__(self, replica: _Replica) -> _Cols:
        return self.targets if replica is self.replica else self.builder(replica)


def target_splits(blocks: int, rows: int, tiles: int, slots: int, limit: int) -> int:
    """Windows to split a search's ``tiles`` into: enough that ``blocks`` blocks a window fill
    the device's ``slots`` (blocks it runs at once), where the blocks fill less than half of
    them; each window at least :data:`SPLIT_MIN_TILES` tiles, at most :data:`SPLIT_MAX` windows,
    and the windows' rows together at most ``limit`` (the engine's: one batch, whose buffers
    :func:`workspace_bytes` counts, and a quarter of the points, so that the windows' lists and
    their merge take no more than the lists of a search of every point)."""
    if blocks <= 0 or 2 * blocks > slots:
        return 1
    return max(1, min(-(-slots // blocks), tiles // SPLIT_MIN_TILES, limit // max(rows, 1), SPLIT_MAX))


def _window(xp: Any, targets: _Cols, a: int, b: int) -> _Cols:
    """The targets at positions ``[a, b)`` (views; positions from 0, their point ids kept)."""
    order = targets.order[a:b] if targets.order is not None else xp.arange(a, b, dtype=xp.int64)
    return _Cols(
        targets.half[a:b], targets.norm2f[a:b], targets.exact, order,
        None if targets.core_f is None else targets.core_f[a:b],
        None if targets.core_d is None else targets.core_d[a:b],
        targets.core_raw, None if targets.comp is None else targets.comp[a:b],
    )  # fmt: skip


def _window_blocks(blocks: _Blocks, a: int, b: int) -> _Blocks:
    """``blocks`` over the targets' window ``[a, b)``: each block's skip clipped to the window
    and counted from ``a`` (empty: ``b - a`` twice)."""
    if blocks.skip_lo is None or blocks.skip_hi is None:
        return blocks
    width = b - a
    lo = np.clip(blocks.skip_lo - a, 0, width)
    hi = np.clip(blocks.skip_hi - a, 0, width)
    empty = hi <= lo
    return _Blocks(blocks.lo, blocks.hi, np.where(empty, width, lo), np.where(empty, width, hi))


def merge_lists(xp: Any, ids: list[Array], keys: list[Array], m: int) -> tuple[Array, Array]:
    """Each row's ``m`` least ``(key, id)`` of several exact lists over disjoint targets (``-1``
    and ``+inf`` past the targets, last as in each list)."""
    all_ids, all_keys = xp.concatenate(ids, axis=1), xp.concatenate(keys, axis=1)
    by_id = stable_argsort(xp, all_ids, axis=1)
    all_ids = xp.take_along_axis(all_ids, by_id, axis=1)
    all_keys = xp.take_along_axis(all_keys, by_id, axis=1)
    by_key = stable_argsort(xp, all_keys, axis=1)[:, :m]
    return (
        xp.ascontiguousarray(xp.take_along_axis(all_ids, by_key, axis=1)),
        xp.ascontiguousarray(xp.take_along_axis(all_keys, by_key, axis=1)),
    )


def _on_device(cp: Any, rows: _Rows) -> _Rows:
    """The rows' arrays on the current device (copies only where they live elsewhere)."""
    fields = (getattr(rows, f.name) for f in dataclasses.fields(rows))
    return _Rows(*(None if a is None else cp.asarray(a) for a in fields))


def _component_blocks(
    row_comp: np.ndarray[Any, Any], first: np.ndarray[Any, Any], last: np.ndarray[Any, Any], rows: int, n: int
) -> _Blocks:
    """``plan_blocks``' blocks of rows sorted by component: a block of one component skips that
    component's targets ``[first[c], last[c])``; a mixed block skips none (its rows mask them)."""
    planned = plan_blocks(row_comp, rows)
    lo = np.array([s for s, _, _ in planned], dtype=np.int64)
    hi = np.array([e for _, e, _ in planned], dtype=np.int64)
    comps = np.array([c for _, _, c in planned], dtype=np.int64)
    own = comps >= 0
    skip_lo = np.where(own, first[np.maximum(comps, 0)], n)
    skip_hi = np.where(own, last[np.maximum(comps, 0)], n)
    return _Blocks(lo, hi, skip_lo, skip_hi)


class _LocalSearch:
    """One device's part of a search: rows in batches, each batch's kernel and flush queued, then
    the rows that stopped launched again until none is left."""

    def __init__(
        self, engine: DeviceEngine, rows: _Rows, cols: _Cols, m: int, blocks: _Blocks | None, mode: int = 0
    ) -> None:
        cp = self.cp = engine.xp
        self.engine, self.rows, self.cols, self.m, self.mode = engine, rows, cols, m, mode
        self.device = engine._current()
        self.blocks = blocks if blocks is not None else _Blocks.uniform(rows.count, engine.block_rows)
        count = rows.count
        # the kernel compacts a buffer over cap - 2 BN entries: at least m must stay under that
        self.cap = engine.cap if m <= engine.cap - 2 * BN else max(engine.cap, CAP_WIDE)
        self.ids = cp.full((count, m), -1, dtype=cp.int64)  # by rows.out when given
        self.keys = cp.full((count, m), cp.inf)
        self.theta = cp.full(count, cp.inf)
        self.tq = cp.empty(count, dtype=cp.float32)  # each row's final limit on its buffer's entries
        self.resume = cp.full(count, -1, dtype=cp.int32)
        self.stops = cp.zeros(1, dtype=cp.int32)
        self.dump: Array | None = None
        if mode == 2:
            self.dump = cp.full((count, cols.n), cp.nan, dtype=cp.float32)
        buffered = min(count, max(engine.batch, engine.block_rows)) if mode == 0 else 1
        self.buf_key = cp.empty(buffered * self.cap, dtype=cp.float32)
        self.buf_pos = cp.empty(buffered * self.cap, dtype=cp.int32)
        self.count = cp.zeros(max(buffered, 1), dtype=cp.int32)
        self.smem = engine.variant.smem(engine.d)
        self.select = engine._kernel(engine.variant.kernel, self.smem)
        self.flush = engine._kernel("fused_flush")
        self.threads = engine.variant.threads

    def launch(self) -> None:
        """Every batch of blocks (at most ``batch`` rows), its kernel and its flush."""
        self._launch_all(self.blocks, None, None)

    def finish(self) -> None:
        """The stopped rows, flushed already, launched again from where they stopped (their own
        blocks' skips kept, so their tiles are the same) until none stops."""
        cp = self.cp
        while self.mode == 0 and int(to_host(self.stops)[0]) > 0:
            self.stops.fill(0)
            stopped = np.flatnonzero(to_host(self.resume) >= 0)
            start = self.resume.copy()
            which = np.searchsorted(self.blocks.lo, stopped, side="right") - 1
            heads = np.flatnonzero(np.r_[True, which[1:] != which[:-1]])
            lo = heads.astype(np.int64)
            hi = np.r_[heads[1:], stopped.size].astype(np.int64)
            skip: tuple[Any, Any] = (None, None)
            if self.blocks.skip_lo is not None and self.blocks.skip_hi is not None:
                skip = (self.blocks.skip_lo[which[heads]], self.blocks.skip_hi[which[heads]])
            self._launch_all(_Blocks(lo, hi, *skip), cp.asarray(stopped.astype(np.int32)), start)

    def _launch_all(self, blocks: _Blocks, slots: Array | None, start: Array | None) -> None:
        """``blocks`` in batches: their descriptors relative to each batch go to the device in one
        copy; slots ``p`` of a batch are ``at + p`` (or ``slots[at + p]``), ``at`` its first row."""
        cp = self.cp
        plan = _batches(blocks.hi - blocks.lo, self.engine.batch, self.engine._wave())
        table = np.empty((4, blocks.lo.size), dtype=np.int32)
        for first, last in plan:
            shift = blocks.lo[first]
            table[0, first:last] = blocks.lo[first:last] - shift
            table[1, first:last] = blocks.hi[first:last] - shift
        skips = blocks.skip_lo is not None and blocks.skip_hi is not None
        if blocks.skip_lo is not None and blocks.skip_hi is not None:
            table[2], table[3] = blocks.skip_lo, blocks.skip_hi
        on_device = cp.asarray(table)
        for first, last in plan:
            at = int(blocks.lo[first])
            num_p = int(blocks.hi[last - 1]) - at
            desc = tuple(on_device[i, first:last] if i < 2 or skips else None for i in range(4))
            base, batch_slots = (at, None) if slots is None else (0, slots[at : at + num_p])
            self._batch(last - first, num_p, desc, base, batch_slots, start)

    def _batch(
        self,
        blocks: int,
        num_p: int,
        desc: tuple[Any, ...],
        slot_base: int,
        slots: Array | None,
        start: Array | None,
    ) -> None:
        """One launch of fused_select over ``blocks`` blocks of ``num_p`` rows (slots ``slot_base +
        p``, or ``slots[p]``) and the flush of its rows."""
        rows, cols, engine = self.rows, self.cols, self.engine
        args = (
            rows.half, rows.src, slots, np.int32(slot_base), np.int32(num_p), *desc, np.int32(engine.dpad),
            cols.half, np.int32(cols.n), cols.norm2f, cols.core_f, cols.core_d, cols.comp, rows.norm2,
            rows.core, rows.comp, rows.alpha, rows.beta, self.theta, self.tq, self.count, start, self.resume,
            self.stops,
            self.buf_key, self.buf_pos, np.int32(self.cap), np.int32(self.m), np.int32(self.mode),
            None if self.dump is None else self.dump[slot_base:],
        )  # fmt: skip
        timed = self.engine.events
        marks = self._mark(timed)
        self.select((blocks,), (self.threads,), args, shared_mem=self.smem)
        self._mark(timed, "select", marks)
        if self.mode != 0:
            return
        marks = self._mark(timed)
        grid = (max(1, min(-(-num_p // FLUSH_WARPS), 1 << 20)),)
        self.flush(
            grid, (32 * FLUSH_WARPS,),
            (np.int32(num_p), slots, np.int32(slot_base), rows.src, rows.out, rows.exact, cols.exact,
             cols.order, np.int32(engine.d), rows.core_raw, cols.core_raw, np.int32(self.cap), self.buf_key,
             self.buf_pos, self.count, self.tq, np.int32(self.m), self.ids, self.keys, self.theta,
             np.float64(engine.scale2)),
        )  # fmt: skip
        self._mark(timed, "flush", marks)

    def _mark(self, timed: list[Any] | None, what: str = "", begin: Any = None) -> Any:
        """An event where launches are timed (``DeviceEngine.events``): a start, or the end of ``what``."""
        if timed is None:
            return None
        event = self.cp.cuda.Event()
        event.record()
        if begin is not None:
            timed.append((what, begin, event))
        return event


def _batches(sizes: np.ndarray[Any, Any], batch: int, wave: int = 1) -> list[tuple[int, int]]:
    """Consecutive blocks of at most ``batch`` rows together (at least one block each). A batch cut
    short by ``batch`` that holds more than a ``wave`` of blocks (the blocks the device runs at
    once) ends at a whole number of waves, the rest going to the next batch: a launch's last wave
    nearly empty keeps most of the device idle while it runs (10^5 rows in batches of 65,536 rows
    were 512 + 270 blocks on an H200, four waves of 264 where three do)."""
    ends = np.cumsum(np.asarray(sizes, dtype=np.int64))
    out: list[tuple[int, int]] = []
    first, count = 0, int(ends.size)
    while first < count:
        before = int(ends[first - 1]) if first else 0
        last = max(first + 1, int(np.searchsorted(ends, before + batch, side="right")))
        if last < count and last - first > wave:
            last = first + (last - first) // wave * wave
        out.append((first, last))
        first = last
    return out


def workspace_bytes(n: int, d: int, min_samples: int) -> tuple[int, int]:
    """(resident, peak) device bytes of the brute-force index of ``n`` points of ``d`` coordinates
    and of a tree of ``min_samples`` computed on it (see the module's docstring).

    The peak is the largest of three phases: the index's build (a chunk of shifted float64
    coordinates), the lists (the first search's lists and
    per-row state, then ``brute``'s sorted copies of them: three lists' worth) and the rounds (the
    round's lists, its per-point arrays and either its gathers over the lists or a search outside
    the components: the permuted float16 copy and per-target arrays, the rows' state and lists).
    The lists and the rounds add one batch's candidate buffers.
    """
    dpad = -(-d // 64) * 64
    resident = 8 * n * d + 2 * n * dpad + 44 * n + 16 * d
    build = 10 * min(n, chunk_rows(d)) * dpad + 16 * n
    width = list_width(max(n, 1), min_samples)
    lists = n * width * 16 * 3 + 24 * n
    gathers = n * width * 17 + 96 * n  # a round's gathers over the lists and its per-point arrays
    search = n * (2 * dpad + 128) + n * (width * 16 + 24) + 70 * n
    rounds = n * width * 16 + max(gathers, search)
    batch = min(n, max(BATCH, 128))
    buffers = batch * ((CAP_WIDE if width > WIDE else CAP) * 8 + 4) + (1 << 16)
    return resident, resident + max(build, max(lists, rounds) + buffers)


class BruteGpuIndex(BruteIndex):
    """The GPU backend's index of points of many coordinates: the brute-force searches over them."""

    def __init__(self, coords: Array, **engine: Any) -> None:
        import cupy as cp

        from .gpu import _device_failures

        self.cp = cp
        begin = cp.cuda.Event()
        begin.record()
        with _device_failures(cp, "building the index"):
            self.engine = DeviceEngine(coords, **engine)
        end = cp.cuda.Event()
        end.record()
        self._events = (begin, end)
        self._build_ms: float | None = None
        self.n, self.d = self.engine.n, self.engine.d

    @property
    def nbytes(self) -> int:
        return self.engine.nbytes

    def build_ms(self) -> float:
        if self._build_ms is None:
            begin, end = self._events
            end.synchronize()
            self._build_ms = float(self.cp.cuda.get_elapsed_time(begin, end))
        return self._build_ms

    def tree(
        self, min_samples: int, started: float, fresh: bool, on_device: bool, *, keys: bool = False,
        core_scale: float = 1.0,
    ) -> EuclideanTree:  # fmt: skip
        return device_brute_tree(self, min_samples, started, fresh, on_device, keys, core_scale)

    def nearest(self, k: int) -> tuple[Array, Array]:
        return self.engine.nearest(k)

    def query(self, queries: Array, k: int) -> tuple[Array, Array]:
        return self.engine.query(queries, k)

    def coordinates(self) -> Array:
        return self.engine.coords


def device_brute_tree(
    index: Any, k: int, started: float, fresh: bool, on_device: bool, keys: bool, core_scale: float
) -> EuclideanTree:
    """The tree of a device brute-force index (its ``engine``, ``cp``, ``n``, ``d``, build time)."""
    from .gpu import _device_failures

    cp, n, d = index.cp, index.n, index.d
    timings: dict[str, float] = {"index_ms": index.build_ms() if fresh else 0.0}
    if n == 1:
        src = cp.empty(0, dtype=cp.int64)
        lo = hi = src
        w2 = cp.empty(0)
        core2 = cp.zeros(1) if k > 1 else None
    else:
        with _device_failures(cp, "computing the tree"):
            lo, hi, w2, core2 = boruvka(index.engine, k, timings, core_scale)
    t0 = time.perf_counter()
    order = finish_order(cp, lo, hi, w2, n)
    root = cp.copy if keys else cp.sqrt
    src, dst, weights = lo[order], hi[order], root(w2[order])
    core = None if core2 is None else root(core2)
    if not on_device:
        src, dst, weights = src.get(), dst.get(), weights.get()
        core = None if core is None else core.get()
    total = float(weights.sum())
    timings["host_ms"] = (time.perf_counter() - t0) * 1e3
    return EuclideanTree(
        src=src, dst=dst, weights=weights, total_weight=total, n=n, dimensions=d, min_samples=k,
        backend="gpu", compute_ms=(time.perf_counter() - started) * 1e3, core_distances=core,
        timings_ms=timings,
    )  # fmt: skip
