"""service.client against a live server, and its CLI."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import service.client.transfer as client_module
from service.client import Client, ClientError, main

from .conftest import ServerFactory
from .live import LiveServer


def test_client_round_trip(live: LiveServer) -> None:
    with Client(live.url) as mst:
        assert mst.ready()
        graph = mst.upload_arrays([0, 1, 2], [1, 2, 0], np.array([1.5, 0.5, 2.5], dtype=np.float32))
        assert graph["weight_dtype"] == "float32" and graph["id"] in [g["id"] for g in mst.graphs()]
        job = mst.wait(mst.submit(graph["id"])["id"])
        forest = mst.result(job["id"])
        assert forest.edge_ids.tolist() == [0, 1] and forest.weights.dtype == np.float32
        assert forest.total_weight == 2.0 and forest.num_components == 1
        assert mst.result_json(job["id"])["edge_ids"] == [0, 1]
        assert mst.job(job["id"]) == job
        one = mst.one_shot(b"0 1 3\n1 2 4\n", "edgelist")
        assert one.total_weight == 7
        json_graph = mst.upload_json([0], [1], [5])
        assert mst.graph(json_graph["id"])["source_format"] == "json"
        mst.delete_graph(json_graph["id"])
        with pytest.raises(ClientError) as info:
            mst.graph(json_graph["id"])
        assert info.value.status == 404 and info.value.problem["code"] == "graph_not_found"


def test_client_queries(live: LiveServer) -> None:
    with Client(live.url) as mst:
        graph = mst.upload_arrays([0, 1, 2, 0], [1, 2, 3, 3], np.array([1.0, 2.0, 1.0, 5.0]))
        job = mst.submit(graph["id"], wait=30, objective="max")
        assert mst.result(job["id"]).edge_ids.tolist() == [0, 1, 3]
        job = mst.submit_task(graph["id"], "mst", {"exclude": [1]}, wait=30)
        assert mst.result_arrays(job["id"])["edge_ids"].tolist() == [0, 2, 3]
        job = mst.submit_task(graph["id"], "clusters", {"k": 2}, wait=30)
        assert mst.result_arrays(job["id"])["labels"].tolist() == [0, 0, 1, 1]
        job = mst.submit_task(graph["id"], "dendrogram", wait=30)
        assert mst.result_arrays(job["id"])["linkage"].shape == (3, 4)
        assert mst.set_weights(graph["id"], np.array([4, 1, 1, 1], dtype=np.int64))["weights_version"] == 1
        record = mst.update_weights(graph["id"], [0], [0])
        assert record["weights_version"] == 2 and record["weight_dtype"] == "int64"
        job = mst.submit(graph["id"], wait=30)
        assert job["weights_version"] == 2 and mst.result(job["id"]).edge_ids.tolist() == [0, 1, 2]
        cached = mst.submit(graph["id"], wait=30, cache=True)
        assert cached["result"]["cached"] is True


def test_cli(live: LiveServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edges = tmp_path / "g.txt"
    edges.write_text("0 1 2\n1 2 2\n0 2 1\n")
    assert main(["--url", live.url, "upload", str(edges)]) == 0
    graph = json.loads(capsys.readouterr().out)
    assert graph["source_format"] == "edgelist"
    assert main(["--url", live.url, "mst", graph["id"], "--wait", "30"]) == 0
    job = json.loads(capsys.readouterr().out)
    out = tmp_path / "forest.npz"
    assert main(["--url", live.url, "result", job["id"], "--out", str(out)]) == 0
    capsys.readouterr()
    with np.load(out) as npz:
        assert npz["edge_ids"].tolist() == [0, 2]
    assert main(["--url", live.url, "job", "j_nope"]) == 1
    assert "job_not_found" in capsys.readouterr().err


@pytest.mark.parametrize("huge_from", [1 << 40, 1 << 16], ids=["bytearray", "huge-page map"])
def test_large_result_read_in_pieces_and_errors_still_named(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch, huge_from: int
) -> None:
    # A path of 50k vertices: its forest is an 800 kB npz, read here in 64 KiB pieces, into a
    # bytearray or (as bodies of 8 MiB and more are) into a map advised to use huge pages.
    monkeypatch.setattr(client_module, "_READ_PIECE", 64 << 10)
    monkeypatch.setattr(client_module, "_HUGE_BODY", huge_from)
    n = 50_000
    src = np.arange(n - 1, dtype=np.int32)
    dst = src + 1
    weight = np.random.default_rng(3).random(n - 1)
    with Client(live.url) as mst:
        graph = mst.upload_arrays(src, dst, weight, num_vertices=n)
        job = mst.wait(mst.submit(graph["id"])["id"], timeout=120)
        forest = mst.result(job["id"])
        summary = mst.result_json(job["id"])
        assert forest.edge_ids.tolist() == summary["edge_ids"]
        assert forest.weights.tolist() == summary["weights"]
        assert len(forest.edge_ids) == n - forest.num_components
        with pytest.raises(ClientError) as info:
            mst.result("j_nope")
        assert info.value.status == 404 and info.value.problem["code"] == "job_not_found"


def test_downloads_read_the_socket_in_large_pieces(live: LiveServer) -> None:
    # httpcore reads 64 KiB per socket read unless told otherwise: the client reads 1 MiB
    from httpcore._sync.http11 import HTTP11Connection

    with httpx.Client(base_url=live.url) as http:
        response, body = client_module.read_response(http, "GET", "/openapi.json")
    assert response.status_code == 200 and len(body) > 0
    assert HTTP11Connection.READ_NUM_BYTES == client_module._READ_PIECE == 1 << 20


def test_large_downloads_are_read_off_the_socket_exactly(
    server_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a forest of 400,000 edges: an npz over _DIRECT_BODY, read straight off the socket
    live = server_factory(MST_MAX_UPLOAD_BYTES=str(20_000_000), MST_MAX_EDGES=str(1_000_000))
    n = 400_001
    rng = np.random.default_rng(5)
    weights = rng.random(n - 1)
    direct: list[int] = []  # where each direct read started
    receive = client_module._receive_into

    def spy(sock: Any, body: memoryview, filled: int, *rest: Any) -> int:
        direct.append(filled)
        return receive(sock, body, filled, *rest)

    monkeypatch.setattr(client_module, "_receive_into", spy)
    with Client(live.url) as mst:
        graph = mst.upload_arrays(np.arange(n - 1), np.arange(1, n), weights)
        job = mst.submit(graph["id"], wait=60)
        url = f"/v1/jobs/{job['id']}/result"
        headers = {**mst._http.headers, "accept": "application/octet-stream"}  # the npz
        with httpx.Client(base_url=live.url, headers=headers) as http:
            expected = http.get(url).content  # httpx's own reader
            assert len(expected) > client_module._DIRECT_BODY
            for _ in range(2):  # the second request opens a new connection (the first was closed)
                response, body = client_module.read_response(http, "GET", url)
                assert response.status_code == 200 and bytes(body) == expected
            assert http.get("/v1/graphs").status_code == 200
    assert len(direct) == 2 and all(0 < start < len(expected) for start in direct)
    forest = np.load(io.BytesIO(expected))
    assert forest["edge_ids"].tolist() == list(range(n - 1)) and np.array_equal(forest["weights"], weights)


def test_a_body_cut_short_is_an_error() -> None:
    # a server that promises 8 MiB, sends 5 and closes: the direct read must not pass it off as whole
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (8 << 20))
            conn.sendall(b"x" * (5 << 20))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with httpx.Client(base_url=f"http://127.0.0.1:{port}") as http, pytest.raises(httpx.RemoteProtocolError):
        client_module.read_response(http, "GET", "/")
    thread.join(5)
    listener.close()


@pytest.mark.parametrize("size", [0, 5, 8 << 20])
def test_receive_buffers_are_writable_and_exactly_sized(size: int) -> None:
    buffer = client_module.receive_buffer(size)
    assert len(buffer) == size and not buffer.readonly
    if size:
        buffer[-1] = 7
        assert bytes(buffer[-1:]) == b"\x07"


def test_npz_bodies_are_read_as_numpy_load_reads_them() -> None:
    """The client reads the service's stored archives where they lie and leaves anything else to
    numpy.load: the same arrays either way (aligned, writable), and numpy.load's errors."""
    import io
    import zipfile

    from service.client.client import _npz_arrays

    arrays: dict[str, Any] = {
        "edge_ids": np.arange(70_000, dtype=np.int64),
        "weights": np.linspace(0, 1, 70_000),
    }
    for save in (np.savez, np.savez_compressed):  # read where it lies; decompressed by numpy.load
        buf = io.BytesIO()
        save(buf, **arrays)
        got = _npz_arrays(memoryview(bytearray(buf.getvalue())))
        assert list(got) == list(arrays)
        for name, array in arrays.items():
            assert got[name].dtype == array.dtype and np.array_equal(got[name], array)
            assert got[name].flags.aligned and got[name].flags.writeable
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    damaged = bytearray(buf.getvalue())
    damaged[5000] ^= 0xFF  # inside edge_ids: its CRC-32 no longer checks
    with pytest.raises(zipfile.BadZipFile):
        _npz_arrays(bytes(damaged))
    with pytest.raises(ValueError, match="pickled"):  # not an archive: never unpickled
        _npz_arrays(b"not an archive")
