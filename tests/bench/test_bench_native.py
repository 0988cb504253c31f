"""bench.native without a GPU: the .egr it writes is the symmetric CSR the reference reads, the CUDA 13
fix replaces exactly the one device-info line, and a missing reference source is named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.generators import rmat
from bench.native import build_native, cuda13_source, write_egr
from gpu_core.formats import read_egr

PRINTF = (
    '  printf("GPU: %s with %d SMs and %d mTpSM (%.1f MHz and %.1f MHz)\\n\\n", deviceProp.name, SMs, mTpSM, '
    "deviceProp.clockRate * 0.001, deviceProp.memoryClockRate * 0.001);  fflush(stdout);"
)


def test_egr_holds_every_edge_in_both_rows(tmp_path: Path) -> None:
    edges = rmat(8, 8, weights="int", seed=3)
    path = tmp_path / "g.egr"
    write_egr(edges, path)
    header = np.fromfile(path, dtype=np.int32, count=2)
    assert header.tolist() == [edges.num_vertices, 2 * edges.num_edges]
    back = read_egr(path.read_bytes())  # the engine's own reader: one edge per pair of entries
    assert back.num_vertices == edges.num_vertices
    got = sorted(zip(back.src.tolist(), back.dst.tolist(), back.weight.tolist(), strict=True))
    src, dst, weight, _ = edges  # simple graph, src < dst
    assert got == sorted(zip(src.tolist(), dst.tolist(), weight.tolist(), strict=True))
    index = np.fromfile(path, dtype=np.int32, count=edges.num_vertices + 3)[2:]
    degree = np.bincount(np.concatenate([src, dst]), minlength=edges.num_vertices)
    assert np.array_equal(np.diff(index), degree)


def test_egr_refuses_weights_the_reference_cannot_read(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="int32"):
        write_egr(rmat(6, 4, weights="float", seed=0), tmp_path / "g.egr")


def test_cuda13_fix_replaces_only_the_clock_line() -> None:
    text = f"int a;\n{PRINTF}\nint b;\n"
    fixed = cuda13_source(text)
    assert fixed.splitlines()[0] == "int a;" and fixed.splitlines()[2] == "int b;"
    assert "clockRate" not in fixed and "deviceProp.name, SMs, mTpSM" in fixed
    with pytest.raises(RuntimeError, match="found 0"):
        cuda13_source("int a;\n")


def test_a_missing_reference_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"ECL-MST_10\.cu, ECLgraph\.h"):
        build_native(tmp_path)
