"""``/healthz`` (liveness), ``/readyz`` (a worker answers), ``/metrics`` (Prometheus)."""

from __future__ import annotations

import os

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from ..metrics import Metrics
from ..models import Health, Readiness

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="healthz", response_model=Health, summary="Liveness")
async def healthz(request: Request) -> Health:
    """200 while the API process serves requests; which one it is (several may serve the port)."""
    hosted = getattr(request.app.state, "hosted", None)
    return Health(status="ok", api_process=0 if hosted is None else hosted.slot, pid=os.getpid())


@router.get(
    "/readyz",
    operation_id="readyz",
    response_model=Readiness,
    summary="Readiness",
    responses={503: {"model": Readiness, "description": "No worker is ready (starting, restarting)."}},
)
async def readyz(request: Request) -> JSONResponse:
    """200 when a worker is up, warmed up, has computed a probe graph and beats; else 503."""
    services = getattr(request.app.state, "services", None)
    workers = [] if services is None else services.fleet.describe()
    ready = services is not None and services.fleet.ready
    body = Readiness(status="ready" if ready else "not_ready", workers=workers)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


@router.get(
    "/metrics",
    operation_id="metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}}}},
)
async def metrics(request: Request) -> Response:
    """Requests, job durations, queue depth, resident graphs and device bytes (text format)."""
    registry: Metrics = request.app.state.metrics
    return Response(registry.exposition(), media_type=CONTENT_TYPE_LATEST)
