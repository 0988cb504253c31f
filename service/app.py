"""The FastAPI application: :func:`create_app` builds it; its lifespan connects it to the workers.

With one API process (``MST_API_WORKERS=1``) the app's lifespan also starts the supervisor
(:mod:`service.runtime.supervisor`): the workers are this process's children. With several,
the supervisor is a process of its own, which spawns each API process with :func:`serve_api`
on the one listening socket and hands it the board and the run folder (:class:`Hosted`).
"""

from __future__ import annotations

import gc
import json
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
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
from .metrics import Metrics, WorkerGauges
from .models import GraphUpload, PointsBody, PointsUpload, Problem, WeightsPatch, WeightsUpload
from .runtime.admission import Admission
from .runtime.board import Board
from .runtime.catalog import Catalog
from .runtime.jobs import Jobs
from .runtime.links.fleet import Fleet
from .runtime.links.link import WorkerLink
from .runtime.models import Models
from .runtime.oneshots import OneShots
from .runtime.supervisor.supervisor import Supervisor, read_facts
from .settings import Settings
from .storage.store import Store

log = logging.getLogger("service")


@dataclass(frozen=True)
class Hosted:
    """What an API process spawned by the supervisor process is given: its slot, the board, the run
    folder (the workers' sockets) and how many workers there are."""

    slot: int
    board: Board
    run_dir: Path
    workers: int


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
    hosted: Hosted | None = app.state.hosted
    supervisor: Supervisor | None = None
    if hosted is None:  # one API process: it supervises the workers itself
        supervisor = app.state.supervisor or Supervisor(settings, api_slots=1)
        app.state.supervisor = None  # taken once: a second lifespan (tests) starts its own
        try:
            supervisor.begin()
            await supervisor.start()
        except BaseException:
            await supervisor.stop()
            raise
        assert supervisor.store is not None
        store = supervisor.store
        hosted = Hosted(0, supervisor.board, supervisor.run_dir, supervisor.workers)
    else:
        store = Store(settings.data_dir, checkpoint=False, result_dir=settings.results_dir)
    links: list[WorkerLink] | None = None
    if settings.worker_pool == "ray" and supervisor is not None:
        from .runtime.links.ray_link import RayLink

        links = [RayLink(slot, hosted.board, settings.worker_start_timeout_s) for slot in supervisor.slots]  # type: ignore[arg-type]
    fleet = Fleet(settings, hosted.board, hosted.run_dir, hosted.slot, hosted.workers, links)
    fleet.open()
    admission = Admission(settings, store, fleet)
    jobs_ = Jobs(store, fleet, metrics, admission)
    catalog = Catalog(settings, store, fleet, admission, metrics)
    models_ = Models(settings, store, fleet, catalog, admission)
    oneshots = OneShots(store, fleet, admission, metrics)
    try:
        jobs_.sharded.resume()
        metrics.workers = lambda: [_gauges(n) for n in fleet.numbers()]
        app.state.services = Services(settings, store, fleet, jobs_, oneshots, catalog, metrics, models_)
        # Everything imported and built so far lives as long as the process: keep it out of the
        # cyclic collector's full passes, which otherwise walk it on requests' paths (p99).
        gc.freeze()
        yield
    finally:
        app.state.services = None
        await fleet.close()
        if supervisor is not None:
            await supervisor.stop()  # closes its store
        else:
            store.close()


def _gauges(n: Any) -> WorkerGauges:
    return WorkerGauges(
        index=n.index,
        up=n.accepting,
        queue_depth=n.queue_depth,
        datasets=n.datasets,
        device_bytes=n.held_bytes,
        free_bytes=n.free_bytes,
        restarts=n.restarts,
        requests_lost=n.lost,
        requests_resent=n.resent,
    )


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


def create_app(
    settings: Settings | None = None, supervisor: Supervisor | None = None, hosted: Hosted | None = None
) -> FastAPI:
    """The service's app; it connects to the workers when its lifespan starts (uvicorn, or
    ``TestClient`` as a context). ``supervisor``: one begun already (``python -m service`` spawns
    worker 0 before the app is built), which the first lifespan starts and stops; ``hosted``: the
    app is one of several API processes of a supervisor process (:func:`serve_api`).
    """
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
    app.state.supervisor = supervisor
    app.state.hosted = hosted
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
    app.add_middleware(
        MetricsMiddleware, metrics=app.state.metrics, process=0 if hosted is None else hosted.slot
    )
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def serve_api(
    settings: Settings, slot: int, board: Board, run_dir: Path, sockets: list[socket.socket]
) -> None:
    """An API process of a supervisor process: uvicorn serving the app on the shared listening socket."""
    import uvicorn

    logging.basicConfig(
        level=settings.log_level.upper(), format=f"%(asctime)s %(levelname)s api-{slot} %(name)s: %(message)s"
    )
    workers = len(read_facts(run_dir).get("workers", []))
    app = create_app(settings, hosted=Hosted(slot, board, run_dir, workers))
    from .one_write import OneWriteProtocol

    config = uvicorn.Config(
        app,
        http=OneWriteProtocol,
        log_level=settings.log_level,
        access_log=settings.log_level == "debug",
        timeout_graceful_shutdown=10,
    )
    uvicorn.Server(config).run(sockets=sockets)
