"""The ASGI app of a front process (``MST_API_PROCESSES`` > 1): the hot routes' HTTP, the rest relayed.

With several API processes, one **runtime process** holds the state (workers,
jobs, SQLite, the spool) and N fronts share the public port (``SO_REUSEPORT``).
A front answers itself what :func:`service.api.fastpath.match` takes (job
submit with ``wait=``/``cache=``, job status, job result without ``Range``),
plus the plain one-shot ``POST /v1/mst`` and ``/healthz``: it does the HTTP and
the files (result encoding, one-shot uploads into the shared spool), reads job
status polls from the SQLite file itself (:class:`~service.storage.store.JobReader`),
and asks the runtime for the rest of the state over :mod:`service.runtime.rpc`
(:mod:`service.api.runtime_calls` is the other side). Errors raised there come
back and are rendered here by the same handlers, so every answer is the one
the single-process service gives, byte for byte. Every other request is
relayed, streaming, to the runtime's own HTTP listener (:mod:`service.api.relay`).

Authentication runs here with the same :class:`~service.api.auth.AuthMiddleware`
(the runtime checks relayed requests again). The requests a front answers are
counted in the runtime's ``/metrics``: each front sends its observations there
as it answers (in batches under load, one call in flight at most).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any, get_args

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import JobNotFoundError, error_response
from ..metrics import RouteLabel, route_template
from ..models import GraphFormat
from ..runtime.rpc import RpcClient
from ..runtime.worker import PARSED
from ..settings import Settings
from ..storage.npzio import GraphLayout, graph_layout
from ..storage.store import JobReader, Spool
from .auth import AuthMiddleware, KeyRing, owner_of
from .deps import checked_job_id
from .encoders import job_response, negotiate
from .fastpath import JOB_ROUTE, RESULT_ROUTE, SUBMIT_ROUTE, HotRequest, header, match
from .jobs import result_body
from .mst import one_shot_body
from .relay import Relay
from .uploads import receive_graph

log = logging.getLogger("service.front")

ONE_SHOT_ROUTE = "/v1/mst"
_FORMATS = {f"format={name}".encode(): name for name in get_args(GraphFormat)}
#: a status or admission call answers in milliseconds; this long means the runtime is stuck
CALL_TIMEOUT_S = 30.0
#: scope key set on requests a front relays (the runtime counts those itself)
RELAYED = "mst.relayed"


class RawResponse(Response):
    """A response the runtime built (status, raw headers, body), sent as it is."""

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status_code = status
        self.raw_headers = headers
        self.body = body
        self.background = None


def _one_shot(scope: Scope) -> tuple[str | None] | None:
    """``(format or None,)`` of a plain one-shot request; None for anything else."""
    if scope["method"] != "POST" or scope["path"] != ONE_SHOT_ROUTE or scope.get("root_path"):
        return None
    query: bytes = scope["query_string"]
    if not query:
        return (None,)
    fmt = _FORMATS.get(query)
    return None if fmt is None else (fmt,)


class FrontRoutes:
    """Answers the hot routes through the runtime's RPC, relays the rest."""

    def __init__(self, settings: Settings, rpc: RpcClient, relay: Relay) -> None:
        self.settings = settings
        self.rpc = rpc
        self.relay = relay
        self.spool = Spool(settings.data_dir)
        self.jobs = JobReader(settings.data_dir)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        hot = match(scope)
        one_shot = _one_shot(scope) if hot is None else None
        if hot is None and one_shot is None:
            if scope["method"] == "GET" and scope["path"] == "/healthz":
                await JSONResponse({"status": "ok"})(scope, receive, send)
                return
            scope[RELAYED] = True
            await self.relay(scope, receive, send)
            return
        scope["route"] = RouteLabel(hot.route if hot is not None else ONE_SHOT_ROUTE)
        request = Request(scope, receive)
        try:
            if hot is not None:
                response = await self._hot(hot, owner_of(scope))
            else:
                assert one_shot is not None
                response = await self._one_shot(request, one_shot[0], owner_of(scope))
        except Exception as exc:
            response = await error_response(request, exc)
        await response(scope, receive, send)

    async def _hot(self, hot: HotRequest, owner: str) -> Response:
        if hot.route == SUBMIT_ROUTE:
            timeout = min(hot.wait, self.settings.max_wait_s) + CALL_TIMEOUT_S
            return RawResponse(
                *await self.rpc.call("submit", hot.target, hot.wait, owner, hot.cache, timeout=timeout)
            )
        if hot.route == JOB_ROUTE:
            try:
                return self._job(hot.target, owner)
            except sqlite3.Error:  # the store is not readable from here (yet): ask the runtime
                return RawResponse(*await self.rpc.call("job", hot.target, owner, timeout=CALL_TIMEOUT_S))
        assert hot.route == RESULT_ROUTE
        representation = negotiate(hot.accept)  # 406 before anything is looked up
        job_id, graph_id, summary, path = await self.rpc.call("result", hot.target, owner)
        return await result_body(representation, Path(path), summary, job_id, graph_id)

    def _job(self, job_id: str, owner: str) -> Response:
        """A status poll, from the SQLite file: no round trip to the runtime, whose event loop may be
        busy with uploads (p99 of the polls under load); the same answer as ``Jobs.get``."""
        job = self.jobs.get_job(checked_job_id(job_id))
        if job is None or job.owner != owner:
            raise JobNotFoundError(f"no job has id {job_id!r}.")
        return job_response(job)

    async def _one_shot(self, request: Request, fmt: str | None, owner: str) -> Response:
        representation = negotiate(header(request.scope, b"accept"))  # 406 before the upload is read
        await self.rpc.call("admit", owner, timeout=CALL_TIMEOUT_S)  # a full queue: before the body
        upload = await receive_graph(request, self.spool, self.settings, fmt, durable=False)
        try:
            # a plain npz is parsed here, in parallel with the other fronts, and where its arrays lie
            # in the upload is sent on (a few hundred bytes, not the edges through two pipes): the
            # worker (one per GPU) maps them and only checks and computes them; anything else goes
            # as a file, for the worker's readers to decide and word their errors
            layout = graph_layout(upload.path) if upload.format == "npz" else None
            source: str | GraphLayout = str(upload.path) if layout is None else layout
            fmt_sent = upload.format if layout is None else PARSED
            summary, result = await self.rpc.call("one_shot", source, fmt_sent, upload.size, owner)
        finally:
            upload.discard()
        return await one_shot_body(
            representation, Path(result) if isinstance(result, str) else result, summary
        )


class FrontMetrics:
    """Observes the requests the front answers itself and sends them to the runtime's metrics: at
    once when no send is in flight, else with the next one (one call in flight at most, so under
    load the observations go in batches)."""

    def __init__(self, app: ASGIApp, rpc: RpcClient, labels: Any) -> None:
        self.app = app
        self.rpc = rpc
        self.labels = labels  # an app whose routes name the templates (the runtime's, never started)
        self.observed: list[tuple[str, str, int, float]] = []
        self._sending: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()

        async def observing(message: Message) -> None:
            if message["type"] == "http.response.start" and not scope.get(RELAYED):
                route = (
                    scope["route"].path if "route" in scope else route_template({**scope, "app": self.labels})
                )
                self.observed.append(
                    (scope["method"], route, int(message["status"]), time.perf_counter() - start)
                )
                if self._sending is None:
                    self._sending = asyncio.ensure_future(self._send_all())
            await send(message)

        await self.app(scope, receive, observing)

    async def _send_all(self) -> None:
        try:
            while self.observed:
                await self.flush()
        finally:
            self._sending = None

    async def flush(self) -> None:
        if self.observed:
            batch, self.observed = self.observed, []
            with contextlib.suppress(Exception):  # the runtime is away: these counts are lost
                await self.rpc.call("observe", batch, timeout=CALL_TIMEOUT_S)


class Front:
    """The front's ASGI app: metrics, authentication, then :class:`FrontRoutes`; its lifespan
    ends the process when the runtime process that started it is gone."""

    def __init__(
        self, settings: Settings, rpc_path: Path, api_path: Path, runtime_pid: int | None = None
    ) -> None:
        from ..app import create_app  # for route templates only: its lifespan never runs here

        self.rpc = RpcClient(rpc_path)
        self.relay = Relay(api_path)
        routes = FrontRoutes(settings, self.rpc, self.relay)
        self.metrics = FrontMetrics(
            AuthMiddleware(routes, keys=KeyRing.from_settings(settings)), self.rpc, create_app(settings)
        )
        #: the runtime process that started this front (its parent while it lives)
        self.parent = os.getppid() if runtime_pid is None else runtime_pid

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        await self.metrics(scope, receive, send)

    async def _background(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            if os.getppid() != self.parent:  # the runtime process died: nothing to front for
                log.warning("the runtime process is gone; this front stops")
                os.kill(os.getpid(), signal.SIGTERM)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        task: asyncio.Task[None] | None = None
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                task = asyncio.ensure_future(self._background())
                gc.freeze()  # what lives as long as the process: out of the collector's full passes
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                await self.metrics.flush()
                await self.rpc.close()
                await self.relay.close()
                await send({"type": "lifespan.shutdown.complete"})
                return
