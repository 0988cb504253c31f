"""CUDA graphs with loops on the device (``gpu_core._backend.device_loops``), and ECL-MST's runs on them.

The loop tests count on the device what a WHILE node ran: a wrong node layout, a handle whose
default is not set again at each launch, or a body that is not the loop's would show as other
counts. The engine tests hold the run to the oracle with device loops and on the host loop that
drivers without them take.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gpu_core

from ...utils.graphs import EdgeGraph, random_graph, rmat_graph
from ..graphs.test_queries import kruskal

pytestmark = pytest.mark.gpu

_COUNT_DOWN = r"""
typedef unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __attribute__((cudart_builtin))
void cudaGraphSetConditional(cudaGraphConditionalHandle, unsigned);
extern "C" __global__ void count_down(unsigned* left, unsigned* passes, cudaGraphConditionalHandle loop,
                                      int in_loop) {
  left[0] -= 1;
  passes[0] += 1;
  if (in_loop) cudaGraphSetConditional(loop, left[0] != 0u);
}
"""


def test_a_while_loop_runs_its_body_until_a_kernel_stops_it_at_every_launch() -> None:
    cp = pytest.importorskip("cupy")
    from gpu_core._backend import device_loops

    if not device_loops.loops_supported():
        pytest.skip("this driver has no conditional graph nodes")
    count_down = cp.RawKernel(_COUNT_DOWN, "count_down")
    stream = cp.cuda.Stream(non_blocking=True)
    left = cp.zeros(1, dtype=cp.uint32)
    passes = cp.zeros(1, dtype=cp.uint32)
    run = device_loops.LoopGraph()
    run.append(device_loops.capture(stream, lambda: count_down((1,), (1,), (left, passes, np.uint64(0), 0))))
    loop = run.append_while()
    handle = np.uint64(loop.handle)
    loop.body(device_loops.capture(stream, lambda: count_down((1,), (1,), (left, passes, handle, 1))))
    executable = run.instantiate()
    assert int(passes[0]) == 0  # captured, not run
    for start in (7, 2, 7):  # the handle starts at 1 again at each launch
        left[...] = start
        passes[...] = 0
        cp.cuda.Device().synchronize()
        executable.launch(stream)
        stream.synchronize()
        assert (int(left[0]), int(passes[0])) == (0, start)  # 1 before the loop, start - 1 in it


def test_a_driver_error_names_the_call() -> None:
    pytest.importorskip("cupy")
    from gpu_core._backend import device_loops

    with pytest.raises(device_loops.DriverError, match="cuGraphDestroy failed"):
        device_loops._call("cuGraphDestroy", None)


def _graphs(dtype: Any) -> list[EdgeGraph]:
    return [
        rmat_graph(11, 8, seed=5, dtype=dtype),  # filtered: phase 1, then the rounds of phase 2
        random_graph(2, 300, 900, dtype=dtype, num_weights=4, components=3, isolated=7),
        random_graph(3, 40, 60, dtype=dtype, self_loops=0.3),
    ]


@pytest.mark.parametrize("device_loops_on", [True, False], ids=["device-loops", "host-loop"])
@pytest.mark.parametrize("dtype", [np.int32, np.float64], ids=str)
def test_runs_on_device_loops_and_on_the_host_loop_equal_kruskal(
    device_loops_on: bool, dtype: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("cupy")
    from gpu_core._backend import device_loops

    if device_loops_on and not device_loops.loops_supported():
        pytest.skip("this driver has no conditional graph nodes")
    if not device_loops_on:  # as on a driver older than CUDA 12.4
        monkeypatch.setattr(device_loops, "loops_supported", lambda: False)
    for graph in _graphs(dtype):
        g = gpu_core.Graph(*graph.arrays, graph.num_vertices, backend="gpu")
        assert (g._impl._run is not None) == device_loops_on  # type: ignore[attr-defined]
        for _ in range(3):  # the first run as every later one
            assert g.minimum_spanning_forest().edge_ids.tolist() == kruskal(graph)
        assert g.maximum_spanning_forest().edge_ids.tolist() == kruskal(graph, objective="max")
        assert g.minimum_spanning_forest().edge_ids.tolist() == kruskal(graph)


@pytest.mark.parametrize("device_loops_on", [True, False], ids=["device-loops", "host-loop"])
def test_only_runs_on_device_loops_load_the_build_that_ends_them(
    device_loops_on: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build of ecl_mst.cu that names ``cudaGraphSetConditional`` fails to load on drivers before
    CUDA 12.4, so a graph there (host loop: builds, runs, what-ifs, the other order) must never ask
    for it, and a graph on device loops must take its loops' ``link_lightest`` from it (the plain
    one never ends a loop: the run would not stop)."""
    pytest.importorskip("cupy")
    from gpu_core._backend import device_loops, kernels

    if device_loops_on and not device_loops.loops_supported():
        pytest.skip("this driver has no conditional graph nodes")
    if not device_loops_on:
        monkeypatch.setattr(device_loops, "loops_supported", lambda: False)
    asked: list[tuple[str, bool]] = []
    original = kernels._module

    def recording(
        device_id: int, file: str = kernels.KERNEL_FILE, loops: bool = False, variant: str = ""
    ) -> Any:
        asked.append((file, loops))
        return original(device_id, file, loops, variant)

    monkeypatch.setattr(kernels, "_module", recording)
    graph = rmat_graph(11, 8, seed=5, dtype=np.int32)
    g = gpu_core.Graph(*graph.arrays, graph.num_vertices, backend="gpu")
    assert g.minimum_spanning_forest().edge_ids.tolist() == kruskal(graph)
    assert g.maximum_spanning_forest().edge_ids.tolist() == kruskal(graph, objective="max")
    g.minimum_spanning_forest(exclude=np.arange(0, graph.num_edges, 3))
    assert ((kernels.KERNEL_FILE, True) in asked) == device_loops_on
