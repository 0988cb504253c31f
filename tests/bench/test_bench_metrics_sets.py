"""bench.metrics' --sets: the peer sets it keeps, resized, and a clear refusal of an unknown one."""

from __future__ import annotations

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
