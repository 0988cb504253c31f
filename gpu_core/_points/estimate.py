"""How much memory a point set's index and a tree on it take, before anything is allocated.

For an admission check of point sets (as ``estimate_device_bytes`` is for graphs): ``resident``
is what the index holds while the point set stays loaded (``PointIndex.nbytes``: the float64
coordinates counted, as a service worker copies them), ``peak`` the most a tree of ``min_samples``
on it holds at once, the index included. Upper bounds, counted from what the backends allocate:

* brute force (more coordinates than ``SPATIAL_MAX_DIMENSIONS``): on the GPU ``brute_gpu``'s
  (the float64 points and the float16 filter copy, ``8 nd + 2 n d32``; a tree adds its lists, the
  permuted filter copy of the searches outside a component and a batch's candidate buffers:
  ``workspace_bytes``);
  on the CPU ``brute_cpu``'s (the points, their transpose and the filter's shifted copy, ``24 nd``;
  a tree adds its lists, a permuted copy and the tiles of one block);
* the spatial indexes: the GPU's hierarchy (the Morton-ordered points and two boxes per node,
  ``2 P`` nodes for ``P`` the leaves rounded up to a power of two) and its rounds' per-point state;
  the CPU's k-d tree (its nodes, the transpose) and its rounds' neighbour lists.
"""

from __future__ import annotations

from typing import Literal

from .._backend.memory import MemoryEstimate
from .brute import list_width
from .index import SPATIAL_MAX_DIMENSIONS

#: bytes a computation adds whatever its size (pool rounding, counters, small scratch)
OVERHEAD = 1 << 20
#: bytes an index holds whatever its size (its objects, the shift, per-coordinate scratch)
INDEX_OVERHEAD = 1 << 16


def estimate_point_set_bytes(
    num_points: int, dimensions: int, *, min_samples: int = 1, backend: Literal["gpu", "cpu"] = "gpu"
) -> MemoryEstimate:
    """Memory an index of ``num_points`` points of ``dimensions`` coordinates and a tree of
    ``min_samples`` on it need on ``backend``: device bytes on the GPU, host bytes on the CPU.

    The index is the one :func:`gpu_core.build_point_index` would build (brute force above
    ``SPATIAL_MAX_DIMENSIONS``); the caller's own copy of the points is not counted.
    """
    n, d, k = int(num_points), int(dimensions), int(min_samples)
    if n < 1 or d < 1 or k < 1:
        raise ValueError(f"sizes must be positive, got n={n}, d={d}, min_samples={k}.")
    if backend not in ("gpu", "cpu"):
        raise ValueError(f"backend must be 'gpu' or 'cpu', got {backend!r}.")
    brute = d > SPATIAL_MAX_DIMENSIONS[backend]
    if backend == "gpu" and brute:
        from .brute_gpu import workspace_bytes

        resident, peak = workspace_bytes(n, d, k)
    elif backend == "gpu":
        resident, peak = _hierarchy(n, d, k)
    elif brute:
        resident, peak = _host_brute(n, d, k)
    else:
        resident, peak = _kdtree(n, d, k)
    return MemoryEstimate(resident=resident + INDEX_OVERHEAD, peak=peak + INDEX_OVERHEAD + OVERHEAD)


def _hierarchy(n: int, d: int, k: int) -> tuple[int, int]:
    leaves = 1 << max(0, (n - 1).bit_length())
    nodes = 2 * leaves
    resident = 8 * n * d + 8 * n + 16 * nodes * d
    build = resident + 8 * n * d + 16 * n  # the build's unsorted copy, Morton codes and order
    # a tree: per node its core minimum, component and packed box; per point the lists (8
    # neighbours), core distance and the rounds' state; the sorted edges
    tree = resident + nodes * (8 + 4 + 32) + n * (8 * 12 + 8 + 80) + 48 * n + (8 * n * d if k > 64 else 0)
    return resident, max(build, tree)


def _host_brute(n: int, d: int, k: int) -> tuple[int, int]:
    from .brute_cpu import BLOCK, TILE

    resident = 24 * n * d + 32 * n  # the points, their transpose, the shifted copy; norms and margins
    width = list_width(n, k)
    lists = n * width * 16 * 3
    rounds = n * width * 25 + 96 * n
    block = min(n, BLOCK) * (min(n, TILE) + width) * 8 * 4  # a tile's products, keys, the partition
    return resident, resident + lists + max(rounds, 8 * n * d + 24 * n) + block


def _kdtree(n: int, d: int, k: int) -> tuple[int, int]:
    resident = 16 * n * d + 8 * n + 80 * (2 * n // 16 + 1)  # the points, the transpose, the tree
    lists = n * (16 + k) * 16 * 4  # the cached neighbour lists, their exact weights, the queries' copies
    return resident, resident + lists + 96 * n + 16 * n * d
