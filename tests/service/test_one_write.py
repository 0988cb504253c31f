"""The API's HTTP protocol sends a response's head and body in one write (``service/one_write.py``).

Unit tests of the transport wrapper against a recording transport (the order and the bytes of
every write kept, small writes joined with the next one, everything out by the end of the loop's
turn, nothing held past a close), and one over a real socket: a real uvicorn server's answers
arrive whole and in order on one keep-alive connection.
"""

from __future__ import annotations

import asyncio
from typing import Any

from service.one_write import HELD_BYTES, OneWriteTransport

from .live import LiveServer


class Recording:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.closing = False

    def write(self, data: Any) -> None:
        self.calls.append(("write", bytes(data)))

    def writelines(self, pieces: Any) -> None:
        self.calls.append(("writelines", [bytes(p) for p in pieces]))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True
        self.calls.append(("close", None))

    def abort(self) -> None:
        self.calls.append(("abort", None))

    def get_extra_info(self, name: str) -> str:
        return f"extra {name}"

    def sent(self) -> bytes:
        out = b""
        for kind, data in self.calls:
            if kind == "write":
                out += data
            elif kind == "writelines":
                out += b"".join(data)
        return out


def _run(body: Any) -> Recording:
    async def main() -> Recording:
        recording = Recording()
        transport = OneWriteTransport(recording, asyncio.get_running_loop())  # type: ignore[arg-type]
        body(transport, recording)
        await asyncio.sleep(0)  # the end of the turn
        return recording

    return asyncio.run(main())


def test_a_head_and_its_body_go_out_in_one_writelines() -> None:
    def body(transport: OneWriteTransport, recording: Recording) -> None:
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        assert recording.calls == []  # held
        transport.write(memoryview(b"x" * 1000))

    recording = _run(body)
    assert recording.calls == [("writelines", [b"HTTP/1.1 200 OK\r\n\r\n", b"x" * 1000])]


def test_a_lone_small_write_goes_out_by_the_end_of_the_turn() -> None:
    def body(transport: OneWriteTransport, recording: Recording) -> None:
        transport.write(b"HTTP/1.1 204 No Content\r\n\r\n")

    assert _run(body).calls == [("write", b"HTTP/1.1 204 No Content\r\n\r\n")]


def test_every_byte_in_order_whatever_the_sizes() -> None:
    pieces = [b"a" * 10, b"b" * (HELD_BYTES + 1), b"c" * 5, b"d" * 7, b"e" * 3, b"f" * (200 << 10)]

    def body(transport: OneWriteTransport, recording: Recording) -> None:
        for piece in pieces:
            transport.write(piece)

    recording = _run(body)
    assert recording.sent() == b"".join(pieces)
    assert len(recording.calls) < len(pieces)  # some were joined


def test_close_sends_what_is_held_first_and_abort_drops_it() -> None:
    def closing(transport: OneWriteTransport, recording: Recording) -> None:
        transport.write(b"head")
        transport.close()

    assert _run(closing).calls == [("write", b"head"), ("close", None)]

    def aborting(transport: OneWriteTransport, recording: Recording) -> None:
        transport.write(b"head")
        transport.abort()

    assert _run(aborting).calls == [("abort", None)]


def test_other_calls_reach_the_socket_transport() -> None:
    def body(transport: OneWriteTransport, recording: Recording) -> None:
        assert transport.get_extra_info("peername") == "extra peername"

    _run(body)


def test_answers_arrive_whole_on_one_keep_alive_connection(live: LiveServer) -> None:
    """Small (JSON), empty (204-like health) and large answers, one after another on one connection."""
    for _ in range(3):
        health = live.client.get("/healthz")
        assert health.status_code == 200 and health.json()
        spec = live.client.get("/openapi.json")
        assert spec.status_code == 200 and len(spec.content) > HELD_BYTES and spec.json()["paths"]
        missing = live.client.get("/v1/graphs/g_0000000000000000")
        assert missing.status_code in (404, 422) and missing.json()["detail"]
