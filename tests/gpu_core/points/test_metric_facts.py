"""A point set's facts (``point_facts``) answer what each metric's check of those points raises
(``refusal``), as ``Metric.prepare`` raises it on the points themselves: the service refuses a
metric at submission from the facts alone, so the two must never disagree."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu_core._points.metrics import point_facts, refusal, resolve_metric

METRICS = [
    ("euclidean", None),
    ("manhattan", None),
    ("chebyshev", None),
    ("minkowski", {"p": 3}),
    ("minkowski", {"p": 40}),
    ("cosine", None),
    ("haversine", None),
]


def _sets() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    plain = rng.normal(size=(50, 3))
    zero = plain.copy()
    zero[[7, 30]] = 0.0
    tiny = plain.copy()
    tiny[11] = 1e-170  # its squares underflow: cosine's norm is zero, though no coordinate is
    lat_lon = np.column_stack((rng.uniform(-1.5, 1.5, 40), rng.uniform(-3, 3, 40)))
    bad_lat = lat_lon.copy()
    bad_lat[9, 0] = 48.85
    bad_lon = lat_lon.copy()
    bad_lon[4, 1] = -2 * math.pi - 1e-9
    edge = lat_lon.copy()
    edge[0] = (math.pi / 2, 2 * math.pi)  # on the bounds: accepted
    zero_2d = lat_lon.copy()
    zero_2d[3] = 0.0
    return [
        ("plain", plain),
        ("zero rows", zero),
        ("underflowing row", tiny),
        ("latitude, longitude", lat_lon),
        ("latitude out of range", bad_lat),
        ("longitude out of range", bad_lon),
        ("on the bounds", edge),
        ("a zero row of two columns", zero_2d),
        ("huge span", plain * 1e120),
        ("one point", plain[:1]),
        ("one column", plain[:, :1] * 1e30),
    ]


@pytest.mark.parametrize(("name", "coords"), _sets(), ids=[name for name, _ in _sets()])
@pytest.mark.parametrize(("metric", "params"), METRICS, ids=[f"{m}{p or ''}" for m, p in METRICS])
def test_refusal_from_the_facts_is_what_prepare_raises(
    name: str, coords: np.ndarray, metric: str, params: dict[str, float] | None
) -> None:
    resolved = resolve_metric(metric, params)
    try:
        resolved.prepare(coords)
    except ValueError as exc:
        raised: str | None = str(exc)
    else:
        raised = None
    error = refusal(resolved, point_facts(coords))
    assert (None if error is None else str(error)) == raised, name


def test_the_cases_cover_every_refusal() -> None:
    """The sets above make each metric's check refuse at least once (the test cannot pass vacuously)."""
    refused = {
        (m, str(p))
        for name, coords in _sets()
        for m, p in METRICS
        if refusal(resolve_metric(m, p), point_facts(coords))
    }
    assert {("cosine", "None"), ("haversine", "None"), ("minkowski", "{'p': 3}")} <= refused
