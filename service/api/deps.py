"""Dependencies of the routers as ``Annotated`` aliases (``StoreDep``, ``JobsDep``, ...).

They are ``async def`` on purpose: FastAPI runs plain ``def`` dependencies in a thread pool,
a thread hop per dependency per request. The routes on a job's hot path (submit, status,
result) call :func:`services_of` instead: each dependency FastAPI solves adds to every job's
latency.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from ..errors import (
    GraphNotFoundError,
    JobNotFoundError,
    ModelNotFoundError,
    PointSetNotFoundError,
    ServiceUnavailableError,
)
from ..metrics import Metrics
from ..runtime.catalog import Catalog
from ..runtime.jobs import Jobs
from ..runtime.links.fleet import Fleet
from ..runtime.models import Models
from ..runtime.oneshots import OneShots
from ..settings import Settings
from ..storage.records import is_id
from ..storage.store import Store
from .auth import owner_of


@dataclass(frozen=True)
class Services:
    """Everything the lifespan started, shared by the routes through ``app.state.services``."""

    settings: Settings
    store: Store
    fleet: Fleet
    jobs: Jobs
    oneshots: OneShots
    catalog: Catalog
    metrics: Metrics
    models: Models


def services_of(request: Request) -> Services:
    """The running services (503 while the service starts or stops)."""
    services: Services | None = getattr(request.app.state, "services", None)
    if services is None:
        raise ServiceUnavailableError("the service is starting or stopping; retry shortly.")
    return services


def _shown(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:40] + "...")


def checked_graph_id(graph_id: str) -> str:
    """``graph_id`` when it has the shape of a graph id; else 404 before anything is looked up."""
    if not is_id(graph_id, "g"):
        raise GraphNotFoundError(
            f"no graph has id {_shown(graph_id)}; graph ids look like g_<32 hex digits>."
        )
    return graph_id


def checked_points_id(points_id: str) -> str:
    """``points_id`` when it has the shape of a point-set id; else 404 before anything is looked up."""
    if not is_id(points_id, "p"):
        raise PointSetNotFoundError(
            f"no point set has id {_shown(points_id)}; point-set ids look like p_<32 hex digits>."
        )
    return points_id


def checked_model_id(model_id: str) -> str:
    """``model_id`` when it has the shape of a model id; else 404 before anything is looked up."""
    if not is_id(model_id, "m"):
        raise ModelNotFoundError(
            f"no model has id {_shown(model_id)}; model ids look like m_<32 hex digits>."
        )
    return model_id


def checked_job_id(job_id: str) -> str:
    """``job_id`` when it has the shape of a job id; else 404 before anything is looked up."""
    if not is_id(job_id, "j"):
        raise JobNotFoundError(f"no job has id {_shown(job_id)}; job ids look like j_<32 hex digits>.")
    return job_id


async def get_services(request: Request) -> Services:
    return services_of(request)


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_owner(request: Request) -> str:
    """The caller's owner id (``""`` without API keys), as :mod:`service.api.auth` resolved it."""
    return owner_of(request.scope)


async def get_store(services: Annotated[Services, Depends(get_services)]) -> Store:
    return services.store


async def get_jobs(services: Annotated[Services, Depends(get_services)]) -> Jobs:
    return services.jobs


async def get_catalog(services: Annotated[Services, Depends(get_services)]) -> Catalog:
    return services.catalog


ServicesDep = Annotated[Services, Depends(get_services)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
OwnerDep = Annotated[str, Depends(get_owner)]
StoreDep = Annotated[Store, Depends(get_store)]
JobsDep = Annotated[Jobs, Depends(get_jobs)]
CatalogDep = Annotated[Catalog, Depends(get_catalog)]
