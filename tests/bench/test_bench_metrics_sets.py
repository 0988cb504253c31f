"""bench.metrics' --sets: the peer sets it keeps, resized, and a clear refusal of an unknown one."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.metrics import PEER_SETS, chosen_sets


def test_chosen_sets_keep_the_named_metrics_resized_in_order() -> None:
    chosen = chosen_sets(PEER_SETS, "precomputed=45000, cosine=6e4")
    assert [(m, k, n) for m, _, k, n in chosen] == [
        ("cosine", "embeddings", 60_000),
        ("precomputed", "matrix", 45_000),
    ]


def test_an_unknown_metric_is_refused_by_name() -> None:
    with pytest.raises(SystemExit, match="bogus"):
        chosen_sets(PEER_SETS, "bogus=10")


def test_a_peer_that_dies_is_recorded_with_its_exit_code_not_raised() -> None:
    import multiprocessing

    from bench.metrics import collect_peer

    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_die, args=(theirs,))
    proc.start()
    theirs.close()
    found = collect_peer(proc, mine, time.perf_counter(), 60.0)
    assert found == {"seconds": None, "finished": False, "exitcode": 3}


def _die(conn: object) -> None:
    import os

    os._exit(3)


def test_serial_peers_answer_each_set_in_order(tmp_path: Path) -> None:
    import json

    from bench.metrics import main

    assert main(["--peers-only", "--serial", "--smoke", "--sets", "manhattan=300,chebyshev=200",
                 "--peer-timeout", "60", "--out", str(tmp_path)]) == 0  # fmt: skip
    found = json.loads((tmp_path / "sklearn.json").read_text())
    assert [f["finished"] for f in found] == [True, True]
    assert all(f["seconds"] > 0 for f in found)


def test_serial_without_peers_only_is_refused() -> None:
    from bench.metrics import main

    with pytest.raises(SystemExit):
        main(["--serial", "--smoke"])
