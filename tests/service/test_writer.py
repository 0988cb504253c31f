"""The worker's result writer (service/runtime/worker/writer.py): files written behind the loop, in
order, each job's STORED note sent once its file is in place, and the GIL handed over sooner while
it writes."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from service.runtime.worker.protocol import STORED, unframed
from service.runtime.worker.server import Connection
from service.runtime.worker.writer import SWITCH_INTERVAL_S, writing


def _messages(sock: socket.socket) -> list[tuple[object, ...]]:
    data = bytearray()
    sock.settimeout(5.0)
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except TimeoutError:
            break
        if not chunk:
            break
        data += chunk
    return list(unframed(data))


def test_writing_hands_the_gil_over_sooner_and_restores_the_interval() -> None:
    before = sys.getswitchinterval()
    assert before != SWITCH_INTERVAL_S
    with writing():
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S)
    assert sys.getswitchinterval() == before


def test_each_note_follows_its_file_in_order(tmp_path: Path) -> None:
    mine, theirs = socket.socketpair()
    conn = Connection(mine)
    seen_when_noted: list[list[str]] = []
    with writing() as writer:
        for i in range(5):
            path = tmp_path / f"job-{i}.bin"

            def write(path: Path = path) -> None:
                path.write_bytes(b"x" * 100_000)
                seen_when_noted.append(sorted(p.name for p in tmp_path.iterdir()))

            writer.files([f"job-{i}"], write, [[(conn, 100 + i)]])
    mine.shutdown(socket.SHUT_WR)
    notes = _messages(theirs)
    mine.close()
    theirs.close()
    assert notes == [(STORED, 100 + i, None) for i in range(5)]
    assert seen_when_noted == [[f"job-{j}.bin" for j in range(i + 1)] for i in range(5)]
