"""The client's kept connection for binary answers (service.client.direct): the same requests and
answers as httpx, one connection for many jobs, and failures raised as httpx's exceptions."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import numpy as np
import pytest

from service.client import OCTET, Client, ClientError
from service.client.direct import DirectConnection

from .live import LiveServer


def test_forests_and_results_come_over_one_kept_connection(live: LiveServer) -> None:
    n = 30_001
    weights = np.random.default_rng(11).random(n - 1)
    with Client(live.url) as mst:
        graph = mst.upload_arrays(np.arange(n - 1), np.arange(1, n), weights)
        forests = [mst.forest(graph["id"], wait=60) for _ in range(3)]
        job = mst.submit(graph["id"], wait=60)
        fetched, arrays = mst.result(job["id"]), mst.result_arrays(job["id"])
        for forest in [*forests, fetched]:
            assert forest.edge_ids.tolist() == list(range(n - 1))
            assert np.array_equal(forest.weights, weights) and forest.num_components == 1
        assert np.array_equal(arrays["weights"], weights)
        with httpx.Client(base_url=live.url) as http:  # httpx's own reader, byte for byte
            expected = http.get(f"/v1/jobs/{job['id']}/result", headers={"accept": OCTET}).content
        _, body = mst._read("GET", f"/v1/jobs/{job['id']}/result", headers={"accept": OCTET})
        assert bytes(body) == expected
        with pytest.raises(ClientError) as info:  # an error's answer, read whole, on the same connection
            mst.result("j_nope")
        assert info.value.status == 404 and info.value.problem["code"] == "job_not_found"
        assert mst.forest(graph["id"], wait=60).edge_ids.size == n - 1
        assert mst._direct.opened == 1


@contextmanager
def scripted_server(
    answers: list[bytes], close_after_each: bool = False
) -> Iterator[tuple[str, list[bytes]]]:
    """A server that answers the requests it gets with ``answers`` in turn (an empty answer: say
    nothing, and close); its URL and the request heads it received."""
    listener = socket.create_server(("127.0.0.1", 0))
    heads: list[bytes] = []
    script = iter(answers)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                pending = b""
                while True:
                    while b"\r\n\r\n" not in pending:
                        data = conn.recv(65536)
                        if not data:
                            break
                        pending += data
                    if b"\r\n\r\n" not in pending:
                        break
                    head, pending = pending.split(b"\r\n\r\n", 1)
                    heads.append(head)
                    answer = next(script, b"")
                    if not answer:
                        break
                    conn.sendall(answer)
                    if close_after_each:
                        break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", heads
    finally:
        listener.close()


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: %d\r\n%s\r\n%s" % (
        len(body),
        extra,
        body,
    )


def test_the_request_says_what_httpx_would_say() -> None:
    body = bytes(range(256)) * 300
    with scripted_server([ok(body), ok(b"second")]) as (url, heads), Client(url, api_key="k-1") as mst:
        response, got = mst._read("POST", "/v1/graphs/g_1/mst", params={"wait": 5}, headers={"accept": OCTET})
        assert response.status_code == 200 and bytes(got) == body
        assert response.headers["content-type"] == OCTET and isinstance(got, memoryview)
        assert bytes(mst._read("GET", "/v1/jobs/j_1/result")[1]) == b"second"
        assert mst._direct.opened == 1
    lines = heads[0].split(b"\r\n")
    assert lines[0] == b"POST /v1/graphs/g_1/mst?wait=5 HTTP/1.1"
    fields = {name.lower(): value.strip() for name, value in (line.split(b":", 1) for line in lines[1:])}
    assert fields[b"host"] == url.removeprefix("http://").encode()
    assert fields[b"authorization"] == b"Bearer k-1" and fields[b"accept"] == OCTET.encode()
    assert b"accept-encoding" not in fields  # bodies come as sent: nothing here would decode them
    assert heads[1].startswith(b"GET /v1/jobs/j_1/result HTTP/1.1\r\n")


def test_a_connection_the_server_closed_is_replaced() -> None:
    # the server closes each connection once it answered (as an idle keep-alive ends): the next
    # request opens a new one instead of failing on the closed one
    with (
        scripted_server([ok(b"a"), ok(b"b"), ok(b"c", b"connection: close\r\n")], close_after_each=True) as (
            url,
            _,
        ),
        Client(url) as mst,
    ):
        for expected in (b"a", b"b", b"c"):
            assert bytes(mst._read("GET", "/x")[1]) == expected
            threading.Event().wait(0.05)  # the close reaches this end
        assert mst._direct.opened == 3


def test_a_body_cut_short_is_an_error_and_the_next_request_starts_afresh() -> None:
    cut = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % (1 << 20) + b"x" * 100_000
    with scripted_server([cut, ok(b"whole")], close_after_each=True) as (url, _), Client(url) as mst:
        with pytest.raises(httpx.RemoteProtocolError):
            mst._read("GET", "/x")
        assert bytes(mst._read("GET", "/x")[1]) == b"whole" and mst._direct.opened == 2


def test_no_answer_in_time_is_a_read_timeout_and_no_server_a_connect_error() -> None:
    # the scripted server closes without a word: a protocol error, not an empty answer
    with (
        scripted_server([b""]) as (url, _),
        Client(url, timeout=0.5) as mst,
        pytest.raises(httpx.RemoteProtocolError),
    ):
        mst._read("GET", "/x")
    listener = socket.create_server(("127.0.0.1", 0))  # accepts into its backlog, never answers
    with (
        Client(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout=0.5) as mst,
        pytest.raises(httpx.ReadTimeout),
    ):
        mst._read("GET", "/x")
    port = listener.getsockname()[1]
    listener.close()
    with Client(f"http://127.0.0.1:{port}") as mst, pytest.raises(httpx.ConnectError):
        mst._read("GET", "/x")


def test_requests_it_does_not_serve_go_through_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    with httpx.Client(base_url="http://svc.internal:8000") as http:
        assert DirectConnection(http).serves({"params": {}, "headers": {}})
        assert not DirectConnection(http).serves({"content": b"x"})  # a body to send
        monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
        assert not DirectConnection(http).serves({})  # httpx would go through the proxy
        monkeypatch.setenv("NO_PROXY", "svc.internal")
        assert DirectConnection(http).serves({})
    with httpx.Client(base_url="https://svc.internal") as http:
        assert not DirectConnection(http).serves({})  # TLS: httpx's
