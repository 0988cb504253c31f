"""Ad-hoc: forests after new weights against fresh builds, on the GPU (RMAT of several scales)."""

from __future__ import annotations

import sys
import time

import cupy as cp
import numpy as np

import gpu_core
from gpu_core._order import edge_order

from .generators import rmat_topology

for scale in (12, 16, 20):
    topo = rmat_topology(scale, 8)
    m = len(topo.src)
    rng = np.random.default_rng(3)
    w0, w1 = (rng.integers(1, 2**24, m, dtype=np.int32) for _ in range(2))
    fresh1 = gpu_core.Graph(topo.src, topo.dst, w1, topo.num_vertices, backend="gpu").minimum_spanning_forest()
    cpu1 = gpu_core.Graph(topo.src, topo.dst, w1, topo.num_vertices, backend="cpu").minimum_spanning_forest()
    print(scale, "fresh gpu == cpu:", np.array_equal(fresh1.edge_ids, cpu1.edge_ids))
    for prep_before, prep_after in ((False, False), (True, False), (True, True), (False, True)):
        g = gpu_core.Graph(topo.src, topo.dst, w0, topo.num_vertices, backend="gpu")
        if prep_before:
            g.prepare()
        g.minimum_spanning_forest()
        g.set_weights(w1)
        if prep_after:
            g.prepare()
        a = g.minimum_spanning_forest().edge_ids
        b = g.minimum_spanning_forest().edge_ids
        impl = g._impl
        fresh = gpu_core.Graph(topo.src, topo.dst, w1, topo.num_vertices, backend="gpu")._impl
        same_rank = bool((impl.rank_to_id == fresh.rank_to_id).all())
        same_split = bool((impl.split == fresh.split).all())
        print(f"  prep {prep_before},{prep_after}: first {np.array_equal(a, cpu1.edge_ids)} second "
              f"{np.array_equal(b, cpu1.edge_ids)} rank_to_id {same_rank} split {same_split}")
        sys.stdout.flush()
topo = rmat_topology(22, 8)
w = cp.asarray(np.random.default_rng(1).integers(1, 2**24, len(topo.src), dtype=np.int32))
for _ in range(3):
    cp.cuda.runtime.deviceSynchronize()
    t = time.perf_counter()
    order = edge_order(cp, w, "min")
    cp.cuda.runtime.deviceSynchronize()
    print(f"argsort of {len(topo.src)} int32 weights: {(time.perf_counter() - t) * 1e3:.2f} ms")
