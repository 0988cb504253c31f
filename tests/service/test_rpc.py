"""The fronts' RPC (``service.runtime.rpc``) and a front whose runtime process cannot be reached."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.api.front import Front
from service.errors import QueueFullError, RuntimeUnreachableError, ServiceError
from service.runtime.fronts import RunPaths, bind_unix
from service.runtime.rpc import RpcClient, RpcServer
from service.settings import Settings


class Unpicklable(Exception):
    def __init__(self) -> None:
        super().__init__("no")
        self.handle = lambda: None  # a lambda does not pickle


def handlers(release: asyncio.Event) -> dict[str, Any]:
    async def echo(value: Any) -> Any:
        return value

    async def slow(value: Any) -> Any:
        await release.wait()
        return value

    async def full() -> None:
        raise QueueFullError("the queue is full.", field="x")

    async def odd() -> None:
        raise Unpicklable()

    async def forever() -> None:
        await asyncio.Event().wait()

    return {"echo": echo, "slow": slow, "full": full, "odd": odd, "forever": forever}


def test_calls_interleave_and_errors_travel_back(tmp_path: Path) -> None:
    async def main() -> None:
        release = asyncio.Event()
        server = RpcServer(tmp_path / "r.sock", handlers(release))
        await server.start()
        assert stat.S_IMODE((tmp_path / "r.sock").stat().st_mode) == 0o600
        client = RpcClient(tmp_path / "r.sock")
        try:
            slow = asyncio.ensure_future(client.call("slow", "late"))
            fast = await asyncio.gather(*(client.call("echo", i) for i in range(100)))
            assert fast == list(range(100)) and not slow.done()  # one connection, calls out of order
            release.set()
            assert await slow == "late"
            with pytest.raises(QueueFullError) as caught:
                await client.call("full")
            assert caught.value.field == "x" and caught.value.headers() == {"Retry-After": "1"}
            with pytest.raises(RuntimeError, match="Unpicklable"):
                await client.call("odd")
            with pytest.raises(RuntimeUnreachableError, match=r"within 0\.2 s"):
                await client.call("forever", timeout=0.2)
            pending = asyncio.ensure_future(client.call("forever"))
            await asyncio.sleep(0.05)
            await server.close()
            with pytest.raises(RuntimeUnreachableError):
                await asyncio.wait_for(pending, 5)  # the lost connection fails the call: no hang
            with pytest.raises(RuntimeUnreachableError):
                await client.call("echo", 1)  # nobody listens now
            server = RpcServer(tmp_path / "r.sock", handlers(release))
            await server.start()
            assert await client.call("echo", {"again": [1]}) == {"again": [1]}  # connects anew
        finally:
            await client.close()
            await server.close()

    asyncio.run(main())


def test_a_front_without_its_runtime_answers_503_with_retry_after(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "d", backend="cpu")
    paths = RunPaths.make(settings)
    assert stat.S_IMODE(paths.folder.stat().st_mode) == 0o700
    dead = bind_unix(paths.api)  # a socket nobody accepts on: the relay must not hang on it either
    dead.close()

    async def main() -> None:
        front = Front(settings, paths.rpc, paths.api)
        transport = httpx.ASGITransport(app=front)
        async with httpx.AsyncClient(transport=transport, base_url="http://front") as http:
            for method, path, body in (
                ("GET", "/v1/jobs/j_0123456789abcdef0123456789abcdef", None),
                ("POST", "/v1/graphs/g_0123456789abcdef0123456789abcdef/mst", None),
                ("POST", "/v1/mst", b"0 1 1\n"),
                ("POST", "/v1/graphs", b"{}"),
                ("GET", "/readyz", None),
            ):
                headers = {"content-type": "application/json"} if body else {}
                response = await asyncio.wait_for(
                    http.request(method, path, content=body, headers=headers), 10
                )
                assert response.status_code == 503, (path, response.text)
                assert response.headers["retry-after"] == "1"
                assert response.headers["content-type"] == "application/problem+json"
                assert response.json()["code"] == "runtime_unreachable"
                assert response.json()["instance"] == path
            assert (await http.get("/healthz")).json() == {"status": "ok"}
        await front.rpc.close()
        await front.relay.close()

    asyncio.run(main())


def test_the_setting_is_validated() -> None:
    assert Settings().api_processes == 1
    assert Settings(api_processes=4).api_processes == 4
    with pytest.raises(ValueError, match="api_processes"):
        Settings(api_processes=0)


def test_service_errors_survive_the_frame(tmp_path: Path) -> None:
    from service.runtime.rpc import frame, read_frame

    async def main() -> Any:
        reader = asyncio.StreamReader()
        reader.feed_data(frame((7, False, RuntimeUnreachableError("gone"))))
        reader.feed_eof()
        return await read_frame(reader)

    call_id, ok, value = asyncio.run(main())
    assert (call_id, ok) == (7, False)
    assert isinstance(value, ServiceError) and value.status == 503 and value.message == "gone"
