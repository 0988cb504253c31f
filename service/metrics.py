"""Prometheus metrics of one app: HTTP requests, jobs, queue depth, resident graphs, device bytes.

Each app owns a :class:`prometheus_client.CollectorRegistry`, so several apps
(tests) never collide. Gauges that describe the workers are computed when
scraped, from the supervisor's state, rather than kept up to date by hand.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from .runtime.supervisor import Supervisor
    from .storage.store import JobRecord

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class _WorkerCollector(Collector):
    def __init__(self, supervisor: Callable[[], Supervisor | None]) -> None:
        self._supervisor = supervisor

    def collect(self) -> Iterator[GaugeMetricFamily]:
        supervisor = self._supervisor()
        workers = [] if supervisor is None else supervisor.workers
        families = {
            "up": GaugeMetricFamily(
                "mst_worker_up", "1 when the worker accepts requests.", labels=["worker"]
            ),
            "queue": GaugeMetricFamily(
                "mst_queue_depth", "Jobs queued on the worker, not yet started.", labels=["worker"]
            ),
            "graphs": GaugeMetricFamily(
                "mst_resident_graphs", "Graphs and point sets placed on the worker.", labels=["worker"]
            ),
            "bytes": GaugeMetricFamily(
                "mst_device_bytes",
                "Bytes the worker's resident graphs hold on its device.",
                labels=["worker"],
            ),
            "free": GaugeMetricFamily(
                "mst_device_free_bytes", "Free bytes on the worker's device.", labels=["worker"]
            ),
            "restarts": GaugeMetricFamily(
                "mst_worker_restarts", "Times the worker was restarted.", labels=["worker"]
            ),
            "lost": GaugeMetricFamily(
                "mst_worker_requests_lost",
                "Requests failed worker_lost because the worker died while running them.",
                labels=["worker"],
            ),
            "resent": GaugeMetricFamily(
                "mst_worker_requests_resent",
                "Requests a dead worker had not started (or ran with others), sent to its next process.",
                labels=["worker"],
            ),
        }
        for w in workers:
            label = [str(w.index)]
            families["up"].add_metric(label, 1.0 if w.accepting else 0.0)
            families["queue"].add_metric(label, float(w.queue_depth))
            families["graphs"].add_metric(label, float(len(w.graphs)))
            families["bytes"].add_metric(label, float(sum(r.device_bytes for r in w.graphs.values())))
            families["free"].add_metric(label, float(w.free_bytes))
            families["restarts"].add_metric(label, float(w.restarts))
            families["lost"].add_metric(label, float(w.requests_lost))
            families["resent"].add_metric(label, float(w.requests_resent))
        yield from families.values()


class Metrics:
    """The registry and the instruments the service updates."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.supervisor: Supervisor | None = None
        self.requests = Counter(
            "mst_http_requests",
            "HTTP requests answered.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "mst_http_request_duration_seconds",
            "Time to answer an HTTP request (until the response starts).",
            ["method", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.jobs_submitted = Counter("mst_jobs_submitted", "MST jobs submitted.", registry=self.registry)
        self.jobs_finished = Counter(
            "mst_jobs_finished", "MST jobs finished, by final status.", ["status"], registry=self.registry
        )
        self.job_seconds = Histogram(
            "mst_job_duration_seconds",
            "Time from submission to the end of a succeeded job (queueing included).",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.compute_seconds = Histogram(
            "mst_job_compute_seconds",
            "Device time of the MST computation of succeeded jobs (compute_ms).",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.oneshot_batch_members = Histogram(
            "mst_oneshot_batch_members",
            "One-shot computations (POST /v1/mst) that shared the engine run of each one-shot "
            "(1: it ran alone; see MST_ONESHOT_BATCH_EDGES).",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=self.registry,
        )
        self.registry.register(_WorkerCollector(lambda: self.supervisor))

    def job_finished(self, job: JobRecord) -> None:
        self.jobs_finished.labels(job.status).inc()
        if job.status == "succeeded" and job.finished_at is not None:
            self.job_seconds.observe(max(job.finished_at - job.created_at, 0.0))
            if job.compute_ms is not None:
                self.compute_seconds.observe(job.compute_ms / 1e3)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Pure ASGI middleware counting requests by route template (not raw path: ids would explode labels)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

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
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except BaseException:
            self._observe(scope, status, start)
            raise

    def _observe(self, scope: Scope, status: int, start: float) -> None:
        route = route_template(scope)
        method = str(scope.get("method", ""))
        self.metrics.requests.labels(method, route, str(status)).inc()
        self.metrics.request_seconds.labels(method, route).observe(time.perf_counter() - start)


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
