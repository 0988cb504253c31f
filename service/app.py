"""The FastAPI application: :func:`create_app` builds it, its lifespan starts and stops the workers."""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from . import __version__
from .api import graphs, health, jobs, mst, point_models, points
from .api.auth import OPEN_PATHS, AuthMiddleware, KeyRing
from .api.deps import Services
from .api.media_types import PROBLEM_JSON
from .api.problems import install_handlers
from .api.request_metrics import MetricsMiddleware
from .metrics import Metrics
from .models import GraphUpload, PointsBody, PointsUpload, Problem, WeightsPatch, WeightsUpload
from .runtime.admission import Admission
from .runtime.catalog import Catalog
from .runtime.jobs import Jobs
from .runtime.models import Models
from .runtime.oneshots import OneShots
from .runtime.pool.head_start import HeadStart
from .runtime.pool.residency import GraphSource
from .runtime.supervisor import Supervisor
from .settings import Settings
from .storage.store import Store

log = logging.getLogger("service")

DESCRIPTION = """\
Minimum spanning forests of large graphs, computed on NVIDIA GPUs with ECL-MST
(a NumPy backend where there is no GPU). Uploaded graphs stay resident in a
worker's device memory; jobs pay only for the computation.

Errors are `application/problem+json` (RFC 9457).

When the service runs with API keys (`MST_API_KEYS`, `MST_API_KEYS_FILE`), every route
but `/healthz` and `/readyz` needs `Authorization: Bearer <key>`, and graphs and jobs
are visible only to the key that made them.
"""

#: the security scheme of the OpenAPI document (required only when API keys are configured)
BEARER_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "An API key of the service (MST_API_KEYS, MST_API_KEYS_FILE); "
    "not needed when the service runs without keys.",
}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    metrics: Metrics = app.state.metrics
    head_start: HeadStart | None = app.state.head_start
    app.state.head_start = None  # taken once: a second lifespan (tests) starts its own
    try:
        store = Store(settings.data_dir)
    except BaseException:
        if head_start is not None:
            head_start.abandon()
        raise
    queued, failed = store.recover("The service stopped while the job was running.")
    if failed:
        log.warning("%d job(s) were running when the service stopped; marked failed (worker_lost)", failed)
    catalog_ref: list[Catalog] = []

    def source(graph_id: str) -> GraphSource | None:
        return catalog_ref[0].source(graph_id)

    supervisor = Supervisor(settings, source, head_start=head_start)
    admission = Admission(supervisor)
    jobs_ = Jobs(store, supervisor, metrics, settings.max_result_bytes, admission)
    oneshots = OneShots(store, supervisor, admission, metrics)
    catalog = Catalog(store, supervisor, jobs_)
    catalog_ref.append(catalog)
    models_ = Models(store, supervisor, catalog, admission)
    try:
        await supervisor.start()
        catalog.restore()
        jobs_.requeue(queued)
        metrics.workers = lambda: [w.gauges() for w in supervisor.workers]
        app.state.services = Services(settings, store, supervisor, jobs_, oneshots, catalog, metrics, models_)
        # Everything imported and built so far lives as long as the process: keep it out of the
        # cyclic collector's full passes, which otherwise walk it on requests' paths (p99).
        gc.freeze()
        yield
    finally:
        app.state.services = None
        await supervisor.stop()
        store.close()


def _openapi(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is not None:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
        tags=app.openapi_tags,
    )
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in (
        GraphUpload,
        WeightsUpload,
        WeightsPatch,
        PointsUpload,
        PointsBody,
    ):  # bodies the routes read themselves
        components[model.__name__] = model.model_json_schema(ref_template="#/components/schemas/{model}")
    problem_ref = {"$ref": "#/components/schemas/Problem"}
    schema["components"]["securitySchemes"] = {"bearerAuth": BEARER_SCHEME}
    for route, path in schema.get("paths", {}).items():
        for operation in path.values():
            if route not in OPEN_PATHS:
                operation["security"] = [{"bearerAuth": []}]
                operation["responses"]["401"] = {
                    "description": "No valid API key (when the service runs with keys).",
                    "content": {PROBLEM_JSON: {"schema": problem_ref}},
                }
            for code, response in operation.get("responses", {}).items():
                content = response.get("content", {})
                body = str(content.get("application/json"))
                if code == "422" and "HTTPValidationError" in body:
                    response["description"] = "Invalid input; the problem names the field (and edge index)."
                    content.pop("application/json")
                    content[PROBLEM_JSON] = {"schema": problem_ref}
                elif code.isdigit() and int(code) >= 400 and "/Problem" in body:
                    content[PROBLEM_JSON] = content.pop("application/json")
    if "HTTPValidationError" not in json.dumps(schema["paths"]):
        for name in ("HTTPValidationError", "ValidationError"):
            components.pop(name, None)
    if "Problem" not in components:
        components["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    app.openapi_schema = schema
    return schema


def create_app(settings: Settings | None = None, head_start: HeadStart | None = None) -> FastAPI:
    """The service's app; workers start when its lifespan starts (uvicorn, or ``TestClient`` as a
    context). ``head_start``: worker 0 and the GPU probe, spawned before the app was built
    (``python -m service``: :func:`service.runtime.pool.head_start.begin`); its first lifespan
    takes them."""
    app = FastAPI(
        title="MST service",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        openapi_tags=[
            {"name": "graphs", "description": "Upload graphs that stay resident on a worker's device."},
            {"name": "points", "description": "Point sets: Euclidean MST, HDBSCAN*, single linkage."},
            {"name": "models", "description": "HDBSCAN* models resident with their point sets; predictions."},
            {"name": "jobs", "description": "MST jobs on resident graphs and their results."},
            {"name": "mst", "description": "One-shot computations."},
            {"name": "health", "description": "Liveness, readiness and metrics."},
        ],
    )
    app.state.settings = settings if settings is not None else Settings()
    app.state.metrics = Metrics()
    app.state.services = None
    app.state.head_start = head_start
    install_handlers(app)
    # The routers' routes join the app's own list rather than being included: FastAPI 0.165 keeps an
    # included router as a nested router whose routes are matched again, through scope bookkeeping,
    # on every request (a quarter of the Python calls of a job's two requests). Each router carries
    # its full paths (its prefix) and nothing else to pass on (no tags, dependencies or responses
    # given at inclusion), so the routes, their order and the OpenAPI document are the same.
    for router in (graphs.router, points.router, point_models.router, jobs.router, mst.router, health.router):
        app.router.routes.extend(router.routes)
    # before the routes: nothing answers a request it refuses, so no route can escape it
    app.add_middleware(AuthMiddleware, keys=KeyRing.from_settings(app.state.settings))
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app
