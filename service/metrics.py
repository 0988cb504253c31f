"""Prometheus metrics of the service: HTTP requests, jobs, queue depth, resident graphs, device bytes.

Each app owns a :class:`prometheus_client.CollectorRegistry`, so several apps (tests) never
collide. The instruments live here, below the API and the runtime, so each updates its own
without knowing the other: the API's middleware counts requests
(:mod:`service.api.request_metrics`), the runtime counts jobs. Gauges that describe the workers
are computed when scraped, from :attr:`Metrics.workers` (the board's numbers), rather than kept
up to date by hand.

With several API processes the counters and histograms live in Prometheus' multiprocess mode:
the supervisor sets ``PROMETHEUS_MULTIPROC_DIR`` (a folder of its private run folder) before it
spawns them, each process writes its values to files there, and a scrape of any of them sums
every process's (:meth:`Metrics.exposition`), so every scrape says the same.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


@dataclass(frozen=True)
class WorkerGauges:
    """What one worker reports when the metrics are scraped."""

    index: int
    #: whether it accepts requests
    up: bool
    queue_depth: int
    #: graphs and point sets placed on it, and the bytes they hold on its device
    datasets: int
    device_bytes: int
    free_bytes: int
    restarts: int
    requests_lost: int
    requests_resent: int


class _WorkerCollector(Collector):
    def __init__(self, workers: Callable[[], Iterable[WorkerGauges]]) -> None:
        self._workers = workers

    def collect(self) -> Iterator[GaugeMetricFamily]:
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
        for w in self._workers():
            label = [str(w.index)]
            families["up"].add_metric(label, 1.0 if w.up else 0.0)
            families["queue"].add_metric(label, float(w.queue_depth))
            families["graphs"].add_metric(label, float(w.datasets))
            families["bytes"].add_metric(label, float(w.device_bytes))
            families["free"].add_metric(label, float(w.free_bytes))
            families["restarts"].add_metric(label, float(w.restarts))
            families["lost"].add_metric(label, float(w.requests_lost))
            families["resent"].add_metric(label, float(w.requests_resent))
        yield from families.values()


class Metrics:
    """The registry and the instruments the service updates."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        #: the workers' gauges when scraped (none until the app's workers run)
        self.workers: Callable[[], Iterable[WorkerGauges]] = tuple
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
        self.registry.register(_WorkerCollector(lambda: self.workers()))

    def job_finished(self, status: str, seconds: float | None, compute_ms: float | None) -> None:
        """A job ended in ``status``; a succeeded one took ``seconds`` from its submission,
        ``compute_ms`` of them computing."""
        self.jobs_finished.labels(status).inc()
        if status == "succeeded" and seconds is not None:
            self.job_seconds.observe(max(seconds, 0.0))
            if compute_ms is not None:
                self.compute_seconds.observe(compute_ms / 1e3)

    def exposition(self) -> bytes:
        if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            return generate_latest(self.registry)
        from prometheus_client import multiprocess

        registry = CollectorRegistry(auto_describe=True)
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # every process's, summed
        registry.register(_WorkerCollector(lambda: self.workers()))
        return generate_latest(registry)
