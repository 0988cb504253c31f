"""How a graph is laid out on the device: 32-bit or 64-bit slot indices, and the worklists' size.

The CSR stores every loop-free edge once, in the row of its smaller endpoint: ``k`` slots.
Graphs of fewer than ``2**30`` loop-free edges index them with 32 bits (the fastest); larger ones
with 64 bits (``row_ptr``, ``split``, the heavy-row chunks, worklist positions), up to ``2**32 - 1``
edges, since ranks and edge ids stay 32-bit (unsigned). The kernels are templates on the
index type (``kernels/ecl_mst.cu``), picked per graph when it is built.

The worklists hold ``max(threshold, k - threshold)`` items of 12 bytes, twice: 24 bytes per
edge when the first phase takes only the ``n`` lightest edges. A 64-bit graph is a giant one,
where memory is what limits: its worklists hold half the edges (12 bytes per edge less), and
its second phase runs in rounds of at most that many ranks each (``phase_ends``): a round
takes the ranks below its end, the earlier rounds' edges being inside one set by then. The
forest is the same whatever the rounds (the order is total). (The switch stays at ``2**30``
edges, where it was when the CSR held both directions, ``2**31`` slots: graphs that large are
the ones memory limits, and the half-size worklists are what lets them fit.)
"""

from __future__ import annotations

from dataclasses import dataclass

from .forest import filter_threshold

#: graphs with at least this many loop-free edges take 64-bit slot indices and half-size worklists
WIDE_EDGES_FROM = 2**30
#: most edges the GPU backend takes: ranks and edge ids are 32-bit unsigned
MAX_GPU_EDGES = 2**32 - 1
#: the CSR build sorts the keys of at most about this many slots at once (8 bytes each, as much scratch)
CSR_CHUNK_SLOTS = 1 << 28
#: ... and of at most an eighth of the slots, from this many slots on (below: all at once)
CSR_SPLIT_FROM = 1 << 20
CSR_MIN_PIECES = 8


@dataclass(frozen=True)
class SlotLayout:
    """The index type of a graph's slots, its filter threshold and worklist capacity, and the
    rank ends of the second phase's rounds."""

    wide: bool
    threshold: int
    capacity: int
    phase_ends: tuple[int, ...]

    @property
    def slot(self) -> str:
        """The kernels' template argument for the slot index type."""
        return "long long" if self.wide else "int"

    @property
    def slot_bytes(self) -> int:
        return 8 if self.wide else 4


def slot_layout(num_vertices: int, num_loop_free: int, wide_from: int | None = None) -> SlotLayout:
    """The layout of a graph of ``num_vertices`` vertices and ``num_loop_free`` loop-free edges.

    ``wide_from``: the loop-free edge count from which the 64-bit layout is used (``WIDE_EDGES_FROM``
    unless given: tests force the 64-bit layout on small graphs with it).
    """
    k = num_loop_free
    wide = k >= (WIDE_EDGES_FROM if wide_from is None else wide_from)
    threshold = filter_threshold(num_vertices, k)
    if not wide:
        ends: tuple[int, ...] = (k,) if threshold < k else ()
        return SlotLayout(False, threshold, max(threshold, k - threshold, 1), ends)
    capacity = max(-(-k // 2), 1)
    threshold = min(threshold, capacity)
    ends = tuple(min(k, end) for end in range(threshold + capacity, k + capacity, capacity))
    if threshold >= k:
        ends = ()
    return SlotLayout(True, threshold, capacity, ends)


def csr_pieces(num_slots: int) -> int:
    """Chunks of rows the CSR build sorts one at a time: its scratch is ``16 / pieces`` bytes per slot."""
    if num_slots < CSR_SPLIT_FROM:
        return 1
    return max(CSR_MIN_PIECES, -(-num_slots // CSR_CHUNK_SLOTS))
