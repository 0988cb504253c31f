"""Binary results: a mapped spool file sent as it is, small or large, whole or by Range."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI, Request, Response

from service.api import encoders

SUMMARY = {"num_edges": 3, "total_weight": 7, "num_components": 2, "compute_ms": 0.5}


def app_for(path: Path, delete_after: bool = False) -> FastAPI:
    app = FastAPI()

    @app.get("/r")
    async def result(request: Request) -> Response:
        return await encoders.npz_response(
            path, SUMMARY, "r.npz", delete_after=delete_after, byte_range=request.headers.get("range")
        )

    return app


def get(app: FastAPI, **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.get("/r", **kwargs)

    return asyncio.run(go())


@pytest.mark.parametrize("edges", [3, 1_000_000])  # below and above SMALL_RESULT_BYTES
def test_npz_result_is_the_file(tmp_path: Path, edges: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encoders._MappedResponse, "chunk_size", 1 << 20)  # several pieces
    path = tmp_path / "r.npz"
    np.savez(path, edge_ids=np.arange(edges), weights=np.ones(edges, np.float32))
    assert (path.stat().st_size > encoders.SMALL_RESULT_BYTES) == (edges > 3)
    app = app_for(path)
    r = get(app)
    assert r.status_code == 200 and r.content == path.read_bytes()
    assert r.headers["content-length"] == str(path.stat().st_size)
    assert r.headers["x-mst-num-edges"] == "3" and "r.npz" in r.headers["content-disposition"]
    with np.load(io.BytesIO(r.content)) as npz:
        assert npz["edge_ids"].shape == (edges,)
    part = get(app, headers={"range": "bytes=0-9"})
    assert part.status_code == 206 and part.content == path.read_bytes()[:10]


def test_one_shot_result_file_is_removed(tmp_path: Path) -> None:
    path = tmp_path / "o.npz"
    np.savez(path, edge_ids=np.arange(5), weights=np.ones(5))
    body = path.read_bytes()
    r = get(app_for(path, delete_after=True))
    assert r.content == body and not path.exists()
