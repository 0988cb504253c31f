"""Hostile input against a real server: every case a 4xx problem naming it, nothing half-stored.

Each case checks, besides its answer: no file left in the spool's tmp folder, no graph recorded,
no 5xx in the server's metrics and no traceback in its log; and at the end a normal upload and
MST job still work.
"""

from __future__ import annotations

import gzip
import io
import json
import socket
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from .conftest import SHARED_ENV
from .live import OCTET, LiveServer, npz_body, settled
from .test_schemathesis import answers_by_status, still_serves

MiB = 1 << 20
JSON = {"content-type": "application/json"}
BINARY = {"content-type": OCTET}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server of this module's own: 64 MiB inflation cap, default ratio and vertex limit."""
    root = tmp_path_factory.mktemp("hostile")
    env = {**SHARED_ENV, "MST_MAX_INFLATED_BYTES": str(64 * MiB)}
    live = LiveServer(root / "data", env, root / "server.log").start()
    yield live
    live.stop()


def leftovers(server: LiveServer) -> list[str]:
    tmp = server.data_dir / "spool" / "tmp"
    return settled(lambda: sorted(p.name for p in tmp.iterdir()))


def graph_ids(server: LiveServer) -> set[str]:
    return {g["id"] for g in server.client.get("/v1/graphs").json()["graphs"]}


def refused(server: LiveServer, response: httpx.Response, status: int, *fragments: str) -> dict[str, Any]:
    """Check a refusal: its status, a problem+json body whose detail holds every fragment."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json", response.headers
    problem: dict[str, Any] = response.json()
    assert problem["status"] == status and problem["detail"], problem
    for fragment in fragments:
        assert fragment in problem["detail"], problem
    return problem


@pytest.fixture(autouse=True)
def nothing_half_stored(server: LiveServer) -> Iterator[None]:
    """Around every test: the same graphs before and after, no tmp file left, no 5xx, no traceback."""
    graphs, before = graph_ids(server), answers_by_status(server)
    yield
    assert leftovers(server) == []
    after = answers_by_status(server)
    assert not {s: n - before.get(s, 0) for s, n in after.items() if s >= 500 and n > before.get(s, 0)}
    assert "Traceback" not in server.log(), server.log()[-5000:]
    new = graph_ids(server) - graphs
    for graph_id in new:  # the valid-input tests' graphs: deleted again
        assert server.client.delete(f"/v1/graphs/{graph_id}").status_code == 204


# -- JSON ---------------------------------------------------------------------------------------


def edges(**fields: Any) -> str:
    return json.dumps({"src": [0, 1], "dst": [1, 2], "weight": [1, 2], **fields})


JSON_CASES = {
    # name: (body, status, fragments of the detail)
    "id >= n": (edges(num_vertices=2), 422, ["'dst[1]' = 2 is outside [0, 2)"]),
    "negative id": (edges(src=[0, -1]), 422, ["'src[1]' = -1"]),
    "float id": (edges(src=[0, 1.5]), 422, ["'src[1]'", "integer"]),
    "integral float id": (edges(dst=[1.0, 2]), 422, ["'dst[0]'", "integer"]),
    "boolean id": (edges(src=[True, 1]), 422, ["'src[0]'", "integer"]),
    "string id": (edges(dst=[1, "2"]), 422, ["'dst[1]'", "integer"]),
    "null id": (edges(src=[None, 1]), 422, ["'src[0]'"]),
    "NaN weight": ('{"src": [0], "dst": [1], "weight": [NaN]}', 422, ["'weight[0]' is nan"]),
    "Infinity weight": ('{"src": [0], "dst": [1], "weight": [Infinity]}', 422, ["'weight[0]' is inf"]),
    "-Infinity weight": ('{"src": [0], "dst": [1], "weight": [-Infinity]}', 422, ["'weight[0]' is -inf"]),
    "1e999 weight": ('{"src": [0], "dst": [1], "weight": [1e999]}', 422, ["'weight[0]' is inf"]),
    "float32 overflow": (edges(weight=[1, 1e39], weight_dtype="float32"), 422, ["'weight[1]' is inf"]),
    "string weight": (edges(weight=[1, "2"]), 422, ["'weight[1]'"]),
    "lengths differ": (edges(src=[0, 1, 2]), 422, ["same length", "3, 2 and 2"]),
    "missing field": ('{"src": [0], "dst": [1]}', 422, ["'weight' is required"]),
    "unknown field": (edges(colour="red"), 422, ["'colour'", "extra"]),
    "bad weight_dtype": (edges(weight_dtype="int8"), 422, ["'weight_dtype'"]),
    "empty body": ("", 400, ["not valid JSON"]),
    "not JSON": ("{src: [0]}", 400, ["not valid JSON"]),
    "array body": ("[1, 2, 3]", 422, ["object"]),
    "null body": ("null", 422, ["object"]),
    "num_vertices 2^31": (edges(num_vertices=2**31), 413, ["2147483648 vertices", "MST_MAX_VERTICES"]),
    "num_vertices 2^40": (edges(num_vertices=2**40), 413, ["1099511627776 vertices", "2147483647"]),
    "num_vertices 2^70": (edges(num_vertices=2**70), 413, [str(2**70), "MST_MAX_VERTICES"]),
    "negative num_vertices": (edges(num_vertices=-1), 422, ["'num_vertices'"]),
    "float num_vertices": (edges(num_vertices=2.5), 422, ["'num_vertices'"]),
    # found by test_hostile_fuzz: num_vertices was lax (true -> 1, "3" -> 3, 2.0 -> 2), unlike the ids
    "boolean num_vertices": (edges(num_vertices=True), 422, ["'num_vertices'", "integer"]),
    "string num_vertices": (edges(num_vertices="3"), 422, ["'num_vertices'", "integer"]),
    "integral float num_vertices": (edges(num_vertices=3.0), 422, ["'num_vertices'", "integer"]),
    "exponent num_vertices": (
        '{"num_vertices": 1e2, "src": [0], "dst": [1], "weight": [1]}',
        422,
        ["integer"],
    ),
    "id overflows int64": (edges(src=[0, 2**63]), 422, ["'src[1]' = 9223372036854775808"]),
    "id far past int64": (edges(dst=[1, -(2**80)]), 422, ["'dst[1]'"]),
    "weight overflows int64": (edges(weight=[1, 2**64]), 422, ["'weight[1]'"]),
    "10,000-digit id": ('{"src": [' + "9" * 10_000 + '], "dst": [1], "weight": [1]}', 400, ["JSON"]),
    "10,000-digit weight": ('{"src": [0], "dst": [1], "weight": [' + "7" * 10_000 + "]}", 400, ["JSON"]),
    "deeply nested": ('{"src": ' + "[" * 100_000 + "]" * 100_000 + "}", 400, ["JSON"]),
    "deeply nested object": ('{"a": ' * 50_000 + "1" + "}" * 50_000, 400, ["JSON"]),
    "lone surrogate": ('{"\\ud800": 1, "src": [0], "dst": [1], "weight": [1]}', 400, ["not valid JSON"]),
}


@pytest.mark.parametrize("name", list(JSON_CASES))
@pytest.mark.parametrize("route", ["/v1/graphs", "/v1/mst"])
def test_hostile_json_is_refused(server: LiveServer, route: str, name: str) -> None:
    body, status, fragments = JSON_CASES[name]
    refused(server, server.client.post(route, content=body, headers=JSON), status, *fragments)


def test_json_ids_past_the_engine_limit_are_too_large(server: LiveServer) -> None:
    response = server.client.post("/v1/graphs", content=edges(dst=[1, 2**40]), headers=JSON)
    refused(server, response, 413, "1099511627777 vertices", "2147483647")


def test_the_vertex_limit_is_a_setting(server_factory: Any) -> None:
    small = server_factory(MST_MAX_VERTICES="100")
    for body, headers, route in [
        (edges(num_vertices=101), JSON, "/v1/graphs"),
        (edges(dst=[1, 100]), JSON, "/v1/graphs"),  # implied by the largest id
        (npz_body([0], [1], [1.0], 101), BINARY, "/v1/graphs"),
        (npz_body([0], [100], [1.0]), BINARY, "/v1/mst"),
        (
            b"%%MatrixMarket matrix coordinate integer general\n500 2 1\n1 2 3\n",
            BINARY,
            "/v1/graphs?format=mtx",
        ),
    ]:
        response = small.client.post(route, content=body, headers=headers)
        refused(small, response, 413, "vertices, more than this service's limit of 100 (MST_MAX_VERTICES)")
    assert small.upload_npz([0], [99], [1.0], 100)["num_vertices"] == 100


# -- binary bodies ------------------------------------------------------------------------------


def npz_of(members: dict[str, np.ndarray[Any, Any]], compressed: bool = True, pickle: bool = False) -> bytes:
    buf = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, array in members.items():
            with z.open(f"{name}.npy", "w") as f:
                np.lib.format.write_array(f, array, allow_pickle=pickle)
    return buf.getvalue()


ONE = np.array([1], dtype=np.int64)


def zeros_bomb(inflated: int) -> bytes:
    zeros = np.zeros(inflated // 8 // 3, dtype=np.int64)
    return npz_of({"src": zeros, "dst": zeros, "weight": zeros})


def test_a_zip_bomb_is_refused_at_once_by_its_ratio(server: LiveServer) -> None:
    body = zeros_bomb(48 * MiB)  # under the 64 MiB cap, but about 1000 times its size
    assert len(body) < MiB
    started = time.monotonic()
    response = server.client.post("/v1/graphs", content=body, headers=BINARY)
    refused(server, response, 413, "MST_MAX_COMPRESSION_RATIO", "nothing was inflated")
    assert time.monotonic() - started < 10  # generous: the point is it is not inflated first


def test_a_parquet_bomb_is_refused(server: LiveServer) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    zeros = np.zeros(2_000_000, dtype=np.int64)  # 48 MB of columns in a few tens of kB
    buf = io.BytesIO()
    pq.write_table(pa.table({"src": zeros, "dst": zeros, "weight": zeros}), buf, compression="zstd")
    response = server.client.post("/v1/graphs?format=parquet", content=buf.getvalue(), headers=BINARY)
    refused(server, response, 413, "parquet file", "100 times its size")


def test_an_archive_inflating_past_the_cap_is_refused(server: LiveServer) -> None:
    """100 MiB of zeros (deflated) next to 1.5 MB of random bytes (stored): a ratio under 100, but
    past the 64 MiB cap."""
    zeros = npz_of({"src": np.zeros(100 * MiB // 8, dtype=np.int64)})
    noise = npz_of({"dst": np.random.default_rng(9).integers(0, 2**63, 190_000), "weight": ONE}, False)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for part in (zeros, noise):
            with zipfile.ZipFile(io.BytesIO(part)) as p:
                for info in p.infolist():
                    z.writestr(info, p.read(info), compress_type=info.compress_type)
    body = buf.getvalue()
    assert len(body) < int(SHARED_ENV["MST_MAX_UPLOAD_BYTES"]) and 100 * MiB < 100 * len(body)
    response = server.client.post("/v1/mst", content=body, headers=BINARY)
    refused(server, response, 413, "MST_MAX_INFLATED_BYTES", str(64 * MiB))


@pytest.mark.parametrize(
    ("members", "status", "fragment"),
    [
        ({"src": ONE, "dst": ONE}, 422, "missing array(s) weight"),
        ({"src": np.array(["a"]), "dst": ONE, "weight": ONE}, 422, "'src' must hold integer vertex ids"),
        ({"src": np.array([[0]]), "dst": ONE, "weight": ONE}, 422, "'src' must be one-dimensional"),
        ({"src": ONE, "dst": ONE, "weight": np.array([1], dtype=np.complex128)}, 422, "'weight' has dtype"),
        (
            {"src": ONE, "dst": ONE, "weight": ONE, "num_vertices": ONE},
            422,
            "'num_vertices' must be an integer",
        ),
        ({"src": ONE, "dst": ONE, "weight": ONE, "num_vertices": np.int64(2**40)}, 413, "MST_MAX_VERTICES"),
        ({"src": ONE, "dst": ONE, "weight": np.array([np.nan])}, 422, "'weight[0]' is nan"),
    ],
)
@pytest.mark.parametrize("compressed", [False, True], ids=["stored", "deflated"])
def test_malformed_npz_is_refused(
    server: LiveServer, members: dict[str, Any], status: int, fragment: str, compressed: bool
) -> None:
    response = server.client.post("/v1/graphs", content=npz_of(members, compressed), headers=BINARY)
    refused(server, response, status, fragment)


def test_object_arrays_are_refused_never_unpickled(server: LiveServer) -> None:
    objects = np.array([{"src": 0}], dtype=object)
    for compressed in (False, True):
        body = npz_of({"src": objects, "dst": ONE, "weight": ONE}, compressed, pickle=True)
        response = server.client.post("/v1/graphs", content=body, headers=BINARY)
        refused(server, response, 422, "never unpickled")


@pytest.mark.parametrize(
    ("fmt", "body", "status", "fragment"),
    [
        ("egr", np.array([10**9, 10**9], dtype="<i4").tobytes(), 422, "does not match the file size"),
        ("egr", np.array([-5, -1], dtype="<i4").tobytes(), 422, "does not match the file size"),
        (
            "mtx",
            b"%%MatrixMarket matrix coordinate integer general\n1000000000000 2 1\n1 2 3\n",
            413,
            "vertices",
        ),
        (
            "mtx",
            b"%%MatrixMarket matrix coordinate integer general\n3 3 1000000000000\n1 2 3\n",
            422,
            "announces",
        ),
        (
            "mtx",
            b"%%MatrixMarket matrix coordinate integer general\n-3 -3 -1\n1 2 3\n",
            422,
            "negative count",
        ),
        ("dimacs", b"p sp 1000000000000 1\na 1 2 3\n", 413, "1000000000000 vertices"),
        ("dimacs", b"p sp -4 -1\na 1 2 3\n", 422, "cannot be negative"),
        ("edgelist", b"0 1099511627776 1\n", 413, "1099511627777 vertices"),
        ("edgelist", b"0 1 nan\n", 422, "'weight[0]' is nan"),
        ("edgelist", b"0 1 -inf\n", 422, "'weight[0]' is -inf"),
        ("edgelist", b"0 " + b"9" * 10_000 + b" 1\n", 422, "within int64"),
        ("npz", b"\x93NUMPY\x01\x00" + b" " * 100, 422, "single .npy array"),
        ("npz", b"PK\x05\x06" + bytes(18), 422, "missing array(s)"),
        ("npz", b"garbage", 422, "not a valid npz graph"),
    ],
)
def test_lying_files_are_refused(
    server: LiveServer, fmt: str, body: bytes, status: int, fragment: str
) -> None:
    response = server.client.post(f"/v1/graphs?format={fmt}", content=body, headers=BINARY)
    refused(server, response, status, fragment)


def test_content_encoding_is_refused_by_name(server: LiveServer) -> None:
    for route, body, headers in [
        ("/v1/graphs", gzip.compress(edges().encode()), JSON),
        ("/v1/mst", gzip.compress(npz_body([0], [1], [1.0])), BINARY),
        ("/v1/graphs", npz_body([0], [1], [1.0]), BINARY),
    ]:
        for encoding in ("gzip", "br", "deflate, gzip"):
            response = server.client.post(
                route, content=body, headers={**headers, "content-encoding": encoding}
            )
            refused(server, response, 415, f"Content-Encoding {encoding!r}")
    ok = server.client.post("/v1/mst", content=edges(), headers={**JSON, "content-encoding": "identity"})
    assert ok.status_code == 200, ok.text


def test_a_chunked_body_over_the_cap_stops_at_the_cap(server: LiveServer) -> None:
    limit = int(SHARED_ENV["MST_MAX_UPLOAD_BYTES"])
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        for _ in range(200):  # 20 MB offered, ten times the cap
            sent += 100_000
            yield bytes(100_000)

    response = server.client.post("/v1/graphs", content=chunks(), headers=BINARY)
    refused(server, response, 413, f"limit of {limit} bytes")
    json_limit = int(SHARED_ENV["MST_MAX_JSON_BYTES"])
    response = server.client.post("/v1/mst", content=(b" " * 100_000 for _ in range(50)), headers=JSON)
    refused(server, response, 413, f"limit of {json_limit} bytes")


def raw_post(server: LiveServer, kind: str, declared: int, body: bytes) -> bytes:
    """POST with a Content-Length of one's choosing; the client then closes its side. The answer."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        head = f"POST /v1/graphs HTTP/1.1\r\nHost: x\r\nContent-Type: {kind}\r\n"
        head += f"Content-Length: {declared}\r\n\r\n"
        sock.sendall(head.encode() + body)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_text_bodies_have_their_own_smaller_cap(server_factory: Any) -> None:
    """Text takes about 60 times its size in memory to parse: its cap is MST_MAX_TEXT_BYTES."""
    small = server_factory(MST_MAX_TEXT_BYTES="100000")
    text = b"0 1 1\n" * 20_000  # 120 kB
    for fmt in ("edgelist", "mtx", "dimacs"):
        for body in (text, (text[i : i + 10_000] for i in range(0, len(text), 10_000))):  # sized, chunked
            response = small.client.post(f"/v1/graphs?format={fmt}", content=body, headers=BINARY)
            refused(small, response, 413, "limit of 100000 bytes (MST_MAX_TEXT_BYTES")
    assert (
        small.client.post("/v1/graphs?format=edgelist", content=text[:60_000], headers=BINARY).status_code
        == 201
    )
    npz = npz_body(np.zeros(20_000, dtype=np.int64), np.ones(20_000, dtype=np.int64), np.ones(20_000))
    assert len(npz) > 100_000
    assert small.client.post("/v1/graphs", content=npz, headers=BINARY).status_code == 201


@pytest.mark.parametrize("kind", ["application/json", OCTET])
def test_a_declared_length_over_the_cap_is_refused_before_reading(server: LiveServer, kind: str) -> None:
    answer = raw_post(server, kind, 10**12, b"{")
    assert answer.startswith(b"HTTP/1.1 413 "), answer
    assert b"application/problem+json" in answer and b"1000000000000 bytes" in answer, answer


@pytest.mark.parametrize("kind", ["application/json", OCTET])
def test_a_body_shorter_than_its_content_length_leaves_nothing(server: LiveServer, kind: str) -> None:
    before = answers_by_status(server)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        head = (
            f"POST /v1/graphs HTTP/1.1\r\nHost: x\r\nContent-Type: {kind}\r\nContent-Length: 100000\r\n\r\n"
        )
        sock.sendall(head.encode() + b"{" * 1000)  # then the client is gone with 99 kB still owed
    # counted as the client's fault (without waiting for the connection's keep-alive timeout)
    deadline = time.monotonic() + 10
    while (after := answers_by_status(server)).get(400, 0) == before.get(
        400, 0
    ) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert after.get(400, 0) == before.get(400, 0) + 1, (before, after)
    time.sleep(0.1)  # and nothing more: no second answer, no 5xx (each /metrics read is a 200 itself)
    final = answers_by_status(server)
    assert final.get(400, 0) == after[400] and all(final[c] == before.get(c, 0) for c in final if c >= 500)


# -- query parameters and ids -------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph_id(server: LiveServer) -> str:
    return str(server.upload_npz([0, 1], [1, 2], [1.0, 2.0])["id"])


@pytest.mark.parametrize("wait", ["-1", "-0.5", "NaN", "nan", "inf", "-inf", "Infinity", "1e309", "x", ""])
def test_bad_waits_are_422_on_both_lanes(server: LiveServer, graph_id: str, wait: str) -> None:
    """Plain (the fast lane's shape) and with another parameter (FastAPI's only): both refuse."""
    for url in (f"/v1/graphs/{graph_id}/mst?wait={wait}", f"/v1/graphs/{graph_id}/mst?wait={wait}&x=1"):
        response = server.client.post(url)
        problem = refused(server, response, 422, "wait")
        assert problem["field"] == "wait", problem


@pytest.mark.parametrize("wait", ["0", "0.5", "1e-3", "-0", "10"])
def test_good_waits_are_taken_on_both_lanes(server: LiveServer, graph_id: str, wait: str) -> None:
    for url in (f"/v1/graphs/{graph_id}/mst?wait={wait}", f"/v1/graphs/{graph_id}/mst?wait={wait}&x=1"):
        response = server.client.post(url)
        assert response.status_code in (200, 202), response.text


FOREIGN_IDS = [
    "..%2F..%2Fetc%2Fpasswd",
    "%2e%2e",
    "g_" + "0" * 31,
    "g_" + "0" * 33,
    "g_" + "A" * 32,
    "j_" + "0" * 32,
    "g_" + "0" * 32 + "%00",
    "g_%2F" + "0" * 29,
    "x" * 10_000,
    "%F0%9F%92%A5",
    "g_0000000000000000000000000000000%0A",
    "nope",
]


@pytest.mark.parametrize("foreign", FOREIGN_IDS)
def test_foreign_ids_are_404(server: LiveServer, foreign: str) -> None:
    job_like = foreign.replace("g_", "j_", 1) if foreign.startswith("g_") else foreign
    for method, url in [
        ("GET", f"/v1/graphs/{foreign}"),
        ("DELETE", f"/v1/graphs/{foreign}"),
        ("POST", f"/v1/graphs/{foreign}/mst"),
        ("POST", f"/v1/graphs/{foreign}/mst?wait=1"),
        ("GET", f"/v1/jobs/{job_like}"),
        ("GET", f"/v1/jobs/{job_like}/result"),
        ("DELETE", f"/v1/jobs/{job_like}"),
    ]:
        response = server.client.request(method, url)
        problem = refused(server, response, 404)
        assert problem["code"] in ("graph_not_found", "job_not_found", "not_found"), problem
        assert len(problem["detail"]) < 300, problem  # a long id is not echoed whole


def test_ids_of_the_right_shape_that_do_not_exist_are_404(server: LiveServer) -> None:
    refused(server, server.client.get("/v1/graphs/g_" + "0" * 32), 404, "no graph has id")
    refused(server, server.client.get("/v1/jobs/j_" + "0" * 32), 404, "no job has id")
    refused(server, server.client.get("/v1/jobs/j_" + "0" * 32 + "/result"), 404, "no job has id")


def test_foreign_ids_never_reach_the_store(tmp_path: Path) -> None:
    """The shape check comes before any lookup: the catalog and jobs are never asked."""
    from service.api import deps
    from service.errors import GraphNotFoundError, JobNotFoundError

    for foreign in ["../../etc/passwd", "g_../../x", "g_" + "0" * 32 + "/", "G_" + "0" * 32, ""]:
        with pytest.raises(GraphNotFoundError, match="graph ids look like"):
            deps.checked_graph_id(foreign)
        with pytest.raises(JobNotFoundError, match="job ids look like"):
            deps.checked_job_id(foreign.replace("g_", "j_"))
    assert deps.checked_graph_id("g_" + "0a" * 16) == "g_" + "0a" * 16
    assert deps.checked_job_id("j_" + "f" * 32) == "j_" + "f" * 32


# -- valid edge cases stay valid ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "graph", "num_edges", "total", "components"),
    [
        ("empty", {"src": [], "dst": [], "weight": []}, 0, 0, 0),
        ("isolated vertices only", {"num_vertices": 5, "src": [], "dst": [], "weight": []}, 0, 0, 5),
        ("self-loops only", {"src": [0, 1, 1], "dst": [0, 1, 1], "weight": [1, 2, 3]}, 0, 0, 2),
        ("parallel edges", {"src": [0, 0, 1, 0], "dst": [1, 1, 0, 1], "weight": [5, 3, 3, 9]}, 1, 3, 1),
        (
            "disconnected",
            {"num_vertices": 6, "src": [0, 3, 1], "dst": [1, 4, 2], "weight": [1, 1, 2]},
            3,
            4,
            3,
        ),
        ("negative weights", {"src": [0, 1, 0], "dst": [1, 2, 2], "weight": [-5, -1, -2]}, 2, -7, 1),
    ],
)
def test_unusual_but_valid_graphs_are_computed(
    server: LiveServer, name: str, graph: dict[str, Any], num_edges: int, total: int, components: int
) -> None:
    response = server.client.post("/v1/graphs", json=graph)
    assert response.status_code == 201, response.text
    job = server.submit(response.json()["id"], wait=30).json()
    assert job["status"] == "succeeded", job
    assert job["result"]["num_edges"] == num_edges
    assert job["result"]["total_weight"] == total
    assert job["result"]["num_components"] == components
    oneshot = server.client.post("/v1/mst", json=graph)
    assert oneshot.status_code == 200 and oneshot.json()["num_edges"] == num_edges, oneshot.text


def test_the_service_still_serves_after_all_that(server: LiveServer) -> None:
    still_serves(server)


# -- weights updates (PUT/PATCH /v1/graphs/{id}/weights) -----------------------------------------


def test_hostile_weights_updates_are_refused(server: LiveServer) -> None:
    graph = server.upload_npz([0, 1, 2], [1, 2, 0], [1, 2, 3])
    url = f"/v1/graphs/{graph['id']}/weights"
    buf = io.BytesIO()  # a member whose header announces 2**40 weights (8 TiB) over 16 bytes of data
    np.lib.format.write_array_header_1_0(buf, {"descr": "<i8", "fortran_order": False, "shape": (1 << 40,)})
    lying = io.BytesIO()
    with zipfile.ZipFile(lying, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("edge_ids.npy", buf.getvalue() + bytes(16))
        z.writestr("weights.npy", buf.getvalue() + bytes(16))
    objects = npz_of({"weight": np.array([{"a": 1}] * 3, dtype=object)}, pickle=True)
    octet = {"content-type": OCTET}
    for method, query, body, headers, status, fragment in [
        ("PUT", "?format=npz", zeros_bomb(48 * MiB), octet, 413, "MST_MAX_COMPRESSION_RATIO"),
        ("PATCH", "", zeros_bomb(48 * MiB), octet, 413, "MST_MAX_COMPRESSION_RATIO"),
        ("PATCH", "", lying.getvalue(), octet, 422, "does not match"),
        ("PUT", "?format=npz", objects, octet, 422, "never unpickled"),
        (
            "PUT",
            "",
            gzip.compress(b'{"weights": [1, 2, 3]}'),
            {**JSON, "content-encoding": "gzip"},
            415,
            "gzip",
        ),
        ("PUT", "", b'{"weights": [1, NaN, 3]}', JSON, 422, ""),
    ]:
        response = server.client.request(method, url + query, content=body, headers=headers)
        refused(server, response, status, fragment)
    for foreign in ("../../etc/passwd", "g_" + "0" * 31, "x" * 5000):
        response = server.client.put(f"/v1/graphs/{foreign}/weights", json={"weights": [1, 2, 3]})
        refused(server, response, 404)
    job = server.submit(graph["id"], wait=30).json()  # the weights are the uploaded ones still
    assert job["status"] == "succeeded" and job["result"]["total_weight"] == 3, job


def test_a_job_body_that_is_not_json_is_a_documented_400(server: LiveServer, graph_id: str) -> None:
    """Found by schemathesis: FastAPI's 400 for an unparsable body was missing from submitJob's
    documented answers (and came as code http_400)."""
    response = server.client.post(f"/v1/graphs/{graph_id}/jobs", content=b"\xff\xfe{", headers=JSON)
    problem = refused(server, response, 400)
    assert problem["code"] == "invalid_request", problem
    for body in (b"{", b'{"task": "mst"'):  # JSON that does not parse: FastAPI's 422
        response = server.client.post(f"/v1/graphs/{graph_id}/jobs", content=body, headers=JSON)
        refused(server, response, 422, "JSON")
    document = json.loads((Path(__file__).parents[2] / "openapi" / "openapi.json").read_text())
    assert "400" in document["paths"]["/v1/graphs/{graph_id}/jobs"]["post"]["responses"]


def test_405_names_every_method_of_the_path(server: LiveServer) -> None:
    """Found by schemathesis: Allow listed only the first route's method (FastAPI makes one route
    per method), e.g. 'Allow: GET' on /v1/graphs/{id}, which also serves DELETE."""
    for path, allowed in [
        ("/v1/graphs", "GET, POST"),
        ("/v1/graphs/g_" + "0" * 32, "DELETE, GET"),
        ("/v1/jobs/j_" + "0" * 32, "DELETE, GET"),
        ("/v1/graphs/g_" + "0" * 32 + "/weights", "PATCH, PUT"),
        ("/healthz", "GET"),
    ]:
        response = server.client.request("OPTIONS", path)
        refused(server, response, 405)
        assert response.headers["allow"] == allowed, (path, response.headers)
