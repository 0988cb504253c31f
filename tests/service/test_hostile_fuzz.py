"""Hypothesis fuzzing of the JSON upload routes: random junk is a 201/200 or a 4xx problem, never a 5xx.

Bodies are drawn from near-miss graphs (the right keys holding wrong values: huge, negative, float,
boolean, string, nested, NaN and infinite numbers, columns of different lengths) and from arbitrary
JSON. ``MST_FUZZ_EXAMPLES`` sets the number of bodies per route (150 by default), derandomized
unless ``MST_FUZZ_SEED=random``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import SHARED_ENV
from .live import LiveServer
from .test_schemathesis import answers_by_status, still_serves

EXAMPLES = int(os.environ.get("MST_FUZZ_EXAMPLES", "150"))
KEYS = ["num_vertices", "src", "dst", "weight", "weight_dtype"]

numbers = st.one_of(
    st.integers(min_value=-5, max_value=20),
    st.integers(),
    st.sampled_from([2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.5, -0.0, 1e308, 1e-320, 3.4e38, 3.5e38]),
)
scalars = st.one_of(numbers, st.booleans(), st.none(), st.text(max_size=8))
junk = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
columns = st.one_of(st.lists(numbers, max_size=8), junk)
near_graphs = st.fixed_dictionaries(
    {"src": columns, "dst": columns, "weight": columns},
    optional={
        "num_vertices": st.one_of(numbers, junk),
        "weight_dtype": st.one_of(st.sampled_from(["int32", "int64", "float32", "float64", "int8"]), junk),
        "extra": junk,
    },
)
consistent_graphs = st.integers(min_value=0, max_value=8).flatmap(
    lambda m: st.fixed_dictionaries(
        {
            "src": st.lists(numbers, min_size=m, max_size=m),
            "dst": st.lists(numbers, min_size=m, max_size=m),
            "weight": st.lists(numbers, min_size=m, max_size=m),
        },
        optional={"num_vertices": numbers},
    )
)
bodies = st.one_of(near_graphs, consistent_graphs, junk.map(lambda v: v))


def encode(body: Any) -> bytes:
    """JSON text, NaN and Infinity literals included (the service must cope with them too)."""
    return json.dumps(body, allow_nan=True).encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("fuzz")
    live = LiveServer(root / "data", dict(SHARED_ENV), root / "server.log").start()
    yield live
    live.stop()


@pytest.mark.timeout(120 + EXAMPLES // 5)  # longer QA runs take their time
@pytest.mark.parametrize("route", ["/v1/graphs", "/v1/mst"])
def test_random_json_is_never_a_server_error(server: LiveServer, route: str) -> None:
    before = answers_by_status(server)
    seen: dict[int, int] = {}

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=os.environ.get("MST_FUZZ_SEED") != "random",
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(body=bodies)
    def check(body: Any) -> None:
        response = server.client.post(
            route, content=encode(body), headers={"content-type": "application/json"}
        )
        seen[response.status_code] = seen.get(response.status_code, 0) + 1
        if response.status_code in (200, 201):
            assert isinstance(body, dict) and all(
                isinstance(v, int) and not isinstance(v, bool) for v in (*body["src"], *body["dst"])
            )
            assert all(isinstance(w, (int, float)) and math.isfinite(w) for w in body["weight"])
            if route == "/v1/graphs":
                assert server.client.delete(f"/v1/graphs/{response.json()['id']}").status_code == 204
            return
        assert 400 <= response.status_code < 500, (response.status_code, response.text, body)
        assert response.headers["content-type"] == "application/problem+json", response.headers
        problem = response.json()
        assert problem["status"] == response.status_code and problem["detail"], problem

    check()
    after = answers_by_status(server)
    assert not {s for s, n in after.items() if s >= 500 and n > before.get(s, 0)}, after
    assert sum(seen.values()) == EXAMPLES and len(seen) > 1, seen  # it ran, and not only one answer
    assert "Traceback" not in server.log(), server.log()[-5000:]
    tmp = server.data_dir / "spool" / "tmp"
    assert not list(tmp.iterdir())
    still_serves(server)
