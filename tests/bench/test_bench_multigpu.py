"""``python -m bench.multigpu`` end to end on the GPUs there are (one shard per GPU, at least one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu


def test_sharded_over_the_gpus_gives_a_forest_that_passes_the_cycle_check(tmp_path: Path) -> None:
    cupy = pytest.importorskip("cupy")
    from bench import multigpu

    gpus = max(1, min(2, cupy.cuda.runtime.getDeviceCount()))
    assert multigpu.main(
        ["--log2-vertices", "14", "--edges", "2e6", "--gpus", str(gpus), "--check-samples", "50000",
         "--out", str(tmp_path)]
    ) == 0  # fmt: skip
    record = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert record["check"]["forest_is_msf_of_forest_plus_sample"] is True
    assert record["check"]["sampled_other_edges"] > 10_000
    assert record["forest_edges"] == (1 << 14) - record["components"]
    assert [s["edges"] for s in record["shards"]] == [2_000_000 // gpus] * gpus
