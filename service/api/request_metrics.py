"""The HTTP requests in the app's metrics: counted and timed by route template, by a pure ASGI middleware."""

from __future__ import annotations

import time
from typing import Any

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..metrics import Metrics


class MetricsMiddleware:
    """Pure ASGI middleware counting requests by route template (not raw path: ids would explode labels).

    Every answer also says which API process gave it (``X-MST-API-Process``: its slot), for an
    operator reading a log, or a test sending related requests through different processes."""

    def __init__(self, app: ASGIApp, metrics: Metrics, process: int = 0) -> None:
        self.app = app
        self.metrics = metrics
        self._process_header = (b"x-mst-api-process", str(process).encode())
        #: the counter's and the histogram's children by (method, route, status): ``labels()`` takes a
        #: lock and builds its key on every call; these few are looked up once
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                self._observe(scope, status, start)
                message["headers"] = [*message.get("headers", ()), self._process_header]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except BaseException:
            self._observe(scope, status, start)
            raise

    def _observe(self, scope: Scope, status: int, start: float) -> None:
        route = route_template(scope)
        method = str(scope.get("method", ""))
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:
            children = (
                self.metrics.requests.labels(method, route, str(status)),
                self.metrics.request_seconds.labels(method, route),
            )
            self._children[key] = children
        children[0].inc()
        children[1].observe(time.perf_counter() - start)


def route_template(scope: Scope) -> str:
    """The route template of a request (its metrics label): a router's, else matched on the app's routes."""
    route: Any = scope.get("route")
    if route is not None and hasattr(route, "path"):
        return str(route.path)
    app: Any = scope.get("app")
    router = getattr(app, "router", None)
    for candidate in getattr(router, "routes", []):
        match, _ = candidate.matches(scope)
        if match == Match.FULL and hasattr(candidate, "path"):  # FastAPI 0.165's included routers have none
            return str(candidate.path)
    return "unmatched"
