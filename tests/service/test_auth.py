"""API keys against a live server: 401s on every route but the probes, ownership of graphs and jobs.

Keys A and B come from ``MST_API_KEYS``; C1 and C2 from ``MST_API_KEYS_FILE`` (as hashes) under one
owner name, so they share their graphs; D from the file without a name.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service import openapi_export
from service.api.auth import KeyRing
from service.app import create_app
from service.client import Client, ClientError, main
from service.errors import UnauthorizedError
from service.settings import Settings

from .conftest import SHARED_ENV
from .live import LiveServer, npz_body

KEY_A = "key-a-0123456789abcdef"
KEY_B = "key-b-fedcba9876543210"
KEY_C1 = "key-c1-4a8f0e6b2c9d1357"
KEY_C2 = "key-c2-7d3b9e1f5a0c2468"
KEY_D = "key-d-5e6f7a8b9c0d1e2f"
OCTET = "application/octet-stream"
SLOW = {"lane": "fastapi"}  # a query the routes ignore: sends a hot-path request past the fast lane

#: routes of the app that the OpenAPI document does not list
UNDOCUMENTED = ["/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json", "/no/such/route"]


def sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("auth")
    keys_file = root / "keys"
    keys_file.write_text(
        "# team C rotates its key: both hashes act as owner team-c\n"
        f"{sha256(KEY_C1)} team-c\n"
        f"  {sha256(KEY_C2).upper()}   team-c   # old key, until Friday\n"
        "\n"
        f"{sha256(KEY_D)}\n"
    )
    env = {**SHARED_ENV, "MST_API_KEYS": f"{KEY_A},{KEY_B}", "MST_API_KEYS_FILE": str(keys_file)}
    live = LiveServer(root / "data", env, root / "server.log").start()
    yield live
    live.stop()


def client(server: LiveServer, key: str | None) -> httpx.Client:
    headers = {} if key is None else {"authorization": f"Bearer {key}"}
    return httpx.Client(base_url=server.url, headers=headers, timeout=60)


@pytest.fixture(scope="module")
def a(server: LiveServer) -> Iterator[httpx.Client]:
    with client(server, KEY_A) as http:
        yield http


@pytest.fixture(scope="module")
def b(server: LiveServer) -> Iterator[httpx.Client]:
    with client(server, KEY_B) as http:
        yield http


def upload(http: httpx.Client, src: list[int], dst: list[int], weight: list[int]) -> dict[str, Any]:
    response = http.post("/v1/graphs", content=npz_body(src, dst, weight), headers={"content-type": OCTET})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def documented_requests(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(method, path) of every operation of the OpenAPI document, path parameters filled in."""
    found = []
    for path, operations in spec["paths"].items():
        for method in operations:
            found.append((method.upper(), re.sub(r"\{[^}]+\}", "x_0123", path)))
    return found


def app_routes(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(method, path template) of every route of an app, those of included routers too."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:  # FastAPI 0.165 keeps included routers as such
            yield from app_routes(included.routes, prefix + route.include_context.prefix)
        else:
            for method in getattr(route, "methods", None) or {"GET"}:
                yield method, prefix + route.path


def assert_unauthorized(response: httpx.Response, error: str | None) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "unauthorized"
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith('Bearer realm="mst"')
    assert (f'error="{error}"' in challenge) if error else ("error=" not in challenge)


def test_every_route_but_the_probes_needs_a_key(server: LiveServer, a: httpx.Client) -> None:
    spec = a.get("/openapi.json").json()
    assert spec == json.loads(openapi_export.render())  # the served document is the committed one
    requests = documented_requests(spec) + [("GET", path) for path in UNDOCUMENTED]
    for method, path in app_routes(create_app(Settings()).routes):  # the app's own list: none escapes
        if method != "HEAD":
            assert (method, re.sub(r"\{[^}]+\}", "x_0123", path)) in requests
    assert ("POST", "/v1/graphs") in requests and ("GET", "/metrics") in requests
    open_routes = {("GET", "/healthz"), ("GET", "/readyz")}
    with client(server, None) as anonymous, client(server, "key-x-0000000000000000") as wrong:
        for method, path in requests:
            if (method, path) in open_routes:
                assert anonymous.request(method, path).status_code == 200
                assert wrong.request(method, path).status_code == 200
                continue
            body = b"0 1 1\n" if method == "POST" else None
            assert_unauthorized(anonymous.request(method, path, content=body), None)
            assert_unauthorized(wrong.request(method, path, content=body), "invalid_token")
            for header in ("Basic a2V5LWEtMDEyMzQ1Njc4OWFiY2RlZg==", "Bearer", KEY_A, f"Token {KEY_A}"):
                refused = anonymous.request(method, path, headers={"authorization": header})
                assert_unauthorized(refused, "invalid_request")
    assert {(m, p) for m, p in requests if p in ("/healthz", "/readyz")} == open_routes


def test_the_openapi_document_declares_the_bearer_scheme() -> None:
    spec = json.loads(openapi_export.render())
    assert spec["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    for path, operations in spec["paths"].items():
        for operation in operations.values():
            if path in ("/healthz", "/readyz"):
                assert "security" not in operation and "401" not in operation["responses"]
            else:
                assert operation["security"] == [{"bearerAuth": []}]
                assert "401" in operation["responses"]


def test_the_scheme_is_case_insensitive_and_keys_work_on_every_lane(server: LiveServer) -> None:
    graph_id = None
    for scheme in ("Bearer", "bearer", "BEARER"):
        with httpx.Client(base_url=server.url, headers={"authorization": f"{scheme} {KEY_A}"}) as http:
            graph_id = graph_id or upload(http, [0, 1], [1, 2], [3, 4])["id"]
            job = http.post(f"/v1/graphs/{graph_id}/mst", params={"wait": 30})
            assert job.status_code == 200 and job.json()["status"] == "succeeded"
            assert http.get(f"/v1/jobs/{job.json()['id']}/result").json()["edge_ids"] == [0, 1]
            assert http.get("/metrics").status_code == 200
            assert http.get("/docs").status_code == 200


def test_401s_are_the_same_through_both_lanes(server: LiveServer) -> None:
    with client(server, None) as anonymous:
        for method, path in (
            ("POST", "/v1/graphs/g_x/mst"),
            ("GET", "/v1/jobs/j_x"),
            ("GET", "/v1/jobs/j_x/result"),
        ):
            fast = anonymous.request(method, path)
            slow = anonymous.request(method, path, params=SLOW)
            assert fast.status_code == slow.status_code == 401
            assert fast.content == slow.content
            assert fast.headers["www-authenticate"] == slow.headers["www-authenticate"]


def same_as_unknown(
    foreign: httpx.Response, unknown: httpx.Response, foreign_id: str, unknown_id: str
) -> None:
    """A request for another key's record gets the very answer of one for an id that never existed."""
    assert foreign.status_code == unknown.status_code == 404
    assert foreign.headers["content-type"] == unknown.headers["content-type"] == "application/problem+json"
    assert foreign.content.replace(foreign_id.encode(), unknown_id.encode()) == unknown.content


def test_a_key_cannot_see_or_touch_another_keys_graphs_and_jobs(a: httpx.Client, b: httpx.Client) -> None:
    graph = upload(a, [0, 1, 2], [1, 2, 0], [5, 1, 2])
    done = a.post(f"/v1/graphs/{graph['id']}/mst", params={"wait": 30}).json()
    assert done["status"] == "succeeded"
    g, j = graph["id"], done["id"]
    g_unknown, j_unknown = "g_" + "0" * 32, "j_" + "0" * 32
    components = {"task": "components", "params": {}}
    for method, path, params, body in (
        ("GET", "/v1/graphs/{g}", None, None),
        ("POST", "/v1/graphs/{g}/mst", None, None),
        ("POST", "/v1/graphs/{g}/mst", {"wait": "5"}, None),
        ("POST", "/v1/graphs/{g}/mst", {"cache": "true"}, None),  # A's identical job is not B's
        ("POST", "/v1/graphs/{g}/mst", SLOW, None),
        ("POST", "/v1/graphs/{g}/jobs", None, components),
        ("POST", "/v1/graphs/{g}/jobs", {"wait": "5"}, {"task": "mst", "params": {"exclude": [0]}}),
        ("PUT", "/v1/graphs/{g}/weights", None, {"weight": [1, 1, 1]}),
        ("PATCH", "/v1/graphs/{g}/weights", None, {"edge_ids": [0], "weights": [9]}),
        ("GET", "/v1/jobs/{j}", None, None),
        ("GET", "/v1/jobs/{j}", SLOW, None),
        ("GET", "/v1/jobs/{j}/result", None, None),
        ("GET", "/v1/jobs/{j}/result", SLOW, None),
        ("DELETE", "/v1/jobs/{j}", None, None),
        ("DELETE", "/v1/graphs/{g}", None, None),
    ):
        foreign = b.request(method, path.format(g=g, j=j), params=params, json=body)
        unknown = b.request(method, path.format(g=g_unknown, j=j_unknown), params=params, json=body)
        target, stand_in = (g, g_unknown) if "{g}" in path else (j, j_unknown)
        same_as_unknown(foreign, unknown, target, stand_in)
    foreign_npz = b.get(f"/v1/jobs/{j}/result", headers={"accept": OCTET})
    assert foreign_npz.status_code == 404
    # nothing of A's was changed
    assert a.get(f"/v1/graphs/{g}").json()["weights_version"] == 0
    assert a.post(f"/v1/graphs/{g}/mst", params={"cache": "true"}).json()["result"]["cached"] is True
    assert a.get(f"/v1/jobs/{j}").json() == done
    assert a.get(f"/v1/jobs/{j}/result").json()["edge_ids"] == [1, 2]


def test_lists_show_only_the_callers_graphs(server: LiveServer, a: httpx.Client, b: httpx.Client) -> None:
    mine = upload(a, [0], [1], [1])["id"]
    theirs = upload(b, [0], [1], [2])["id"]
    listed_a = {g["id"] for g in a.get("/v1/graphs").json()["graphs"]}
    listed_b = {g["id"] for g in b.get("/v1/graphs").json()["graphs"]}
    assert mine in listed_a and theirs in listed_b
    assert not listed_a & listed_b
    with client(server, KEY_D) as d:
        assert d.get("/v1/graphs").json() == {"graphs": []}


def test_keys_of_the_file_act_as_their_owner(server: LiveServer) -> None:
    with client(server, KEY_C1) as c1, client(server, KEY_C2) as c2, client(server, KEY_D) as d:
        graph = upload(c1, [0, 1], [1, 2], [1, 1])["id"]
        assert [g["id"] for g in c2.get("/v1/graphs").json()["graphs"]] == [graph]  # one owner
        job = c2.post(f"/v1/graphs/{graph}/mst", params={"wait": 30}).json()
        assert c1.get(f"/v1/jobs/{job['id']}").json()["status"] == "succeeded"
        assert d.get(f"/v1/graphs/{graph}").status_code == 404
        assert c1.delete(f"/v1/graphs/{graph}").status_code == 204


def test_the_bundled_client_sends_its_key(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with Client(server.url, api_key=KEY_A) as mst:
        graph = mst.upload_arrays([0, 1], [1, 2], [2, 3])
        assert graph["id"] in [g["id"] for g in mst.graphs()]
        assert mst.submit(graph["id"], wait=30)["status"] == "succeeded"
        assert mst.one_shot(b"0 1 3\n1 2 4\n", "edgelist").total_weight == 7
    with Client(server.url) as anonymous, pytest.raises(ClientError) as info:
        anonymous.graphs()
    assert info.value.status == 401 and info.value.problem["code"] == "unauthorized"

    monkeypatch.setenv("MST_API_KEY", KEY_A)
    assert main(["--url", server.url, "list"]) == 0
    assert graph["id"] in capsys.readouterr().out
    monkeypatch.delenv("MST_API_KEY")
    assert main(["--url", server.url, "list"]) == 1
    assert "unauthorized" in capsys.readouterr().err
    assert main(["--url", server.url, "--api-key", KEY_B, "list"]) == 0
    assert graph["id"] not in capsys.readouterr().out


def test_keys_never_reach_the_log(server: LiveServer, a: httpx.Client) -> None:
    a.get("/v1/graphs/g_nope")
    log = server.log()
    for key in (KEY_A, KEY_B, KEY_C1, KEY_C2, KEY_D):
        assert key not in log


def test_without_keys_the_service_is_open_and_ignores_authorization(live: LiveServer) -> None:
    graph = live.upload_npz([0], [1], [1])
    for headers in ({}, {"authorization": "Bearer whatever-it-is-0000"}, {"authorization": "Basic eA=="}):
        response = live.client.get(f"/v1/graphs/{graph['id']}", headers=headers)
        assert response.status_code == 200 and "www-authenticate" not in response.headers


def test_a_presented_key_is_compared_with_every_configured_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    ring = KeyRing.of([(hashlib.sha256(k.encode()).digest(), None) for k in (KEY_A, KEY_B, KEY_D)])
    compared: list[bytes] = []
    real = hmac.compare_digest

    def counting(x: bytes, y: bytes) -> bool:
        compared.append(y)
        return real(x, y)

    monkeypatch.setattr(hmac, "compare_digest", counting)  # service.api.auth looks it up at each call
    for key in (KEY_A, KEY_D, "key-x-0000000000000000"):
        compared.clear()
        with contextlib.suppress(UnauthorizedError):
            ring.owner(f"Bearer {key}")
        assert compared == [digest for digest, _ in ring.entries]  # all of them, match or not
    assert ring.owner(f"Bearer {KEY_A}") == "k:" + sha256(KEY_A)[:16]
    assert KeyRing.of([]).owner(None) == ""  # no keys: everyone is the one owner ""
