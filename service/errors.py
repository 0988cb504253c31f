"""Errors of the service: one tree, whose classes say what went wrong and what to do.

Each class fixes its HTTP status, a short machine-readable ``code`` and a title::

    ServiceError                         500 internal_error
    ├── InvalidRequestError              400 invalid_request
    │   ├── InvalidUploadError           422 invalid_upload      (names field and index)
    │   ├── InvalidParamsError           422 invalid_params      (a job's task parameters)
    │   ├── IncompleteBodyError          400 incomplete_body
    │   ├── UnsupportedMediaTypeError    415 unsupported_media_type
    │   └── NotAcceptableError           406 not_acceptable
    ├── UnauthorizedError                401 unauthorized        (WWW-Authenticate)
    ├── NotFoundError                    404 not_found
    │   ├── GraphNotFoundError           404 graph_not_found
    │   ├── PointSetNotFoundError        404 point_set_not_found
    │   ├── ModelNotFoundError           404 model_not_found
    │   └── JobNotFoundError             404 job_not_found
    ├── ConflictError                    409 conflict
    │   ├── JobNotFinishedError          409 job_not_finished
    │   ├── JobNotCancellableError       409 job_not_cancellable
    │   ├── ShardedGraphError            409 graph_sharded
    │   └── ModelOutdatedError           409 model_outdated
    ├── ResultGoneError                  410 result_gone
    ├── PayloadTooLargeError             413 payload_too_large
    │   └── GraphExceedsWorkerError      413 graph_exceeds_worker_memory
    │       └── PointSetExceedsWorkerError  413 point_set_exceeds_worker_memory
    ├── InsufficientMemoryError          507 insufficient_memory
    ├── StorageFullError                 507 storage_full
    ├── QuotaExceededError               429 quota_exceeded      (names quota, limit, used; Retry-After)
    │   └── DeviceQuotaExceededError     413 quota_exceeded
    ├── ServiceUnavailableError          503 service_unavailable
    │   ├── StorageUnavailableError      503 storage_unavailable
    │   ├── WorkerLostError              503 worker_lost
    │   └── QueueFullError               503 queue_full          (Retry-After)
    └── WorkerInternalError              500 worker_internal_error

They are plain exceptions that pickle with their fields (they cross from a
worker process to the API process) and import nothing of HTTP, so the worker
and the runtime raise them without loading a web framework. Routes raise them
too; their one mapping to RFC 9457 ``application/problem+json`` responses, and
that of :mod:`gpu_core`'s errors (a malformed graph is a 422 naming the field
and edge index, a graph over the engine's limits a 413), is
:mod:`service.api.problems`.
"""

from __future__ import annotations

import errno
import sqlite3
from typing import Any, ClassVar

from gpu_core import errors as core_errors


class ServiceError(Exception):
    """Base class of the service's errors; a bug on our side unless a subclass says otherwise."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    title: ClassVar[str] = "Internal server error"
    #: what the request made that the client has not heard of yet (a job submitted with ``?wait=``
    #: whose result could not be sent): the answer's ``Location`` names it
    location: str | None = None

    def __init__(self, message: str, *, field: str | None = None, index: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: the request field at fault, when one is
        self.field = field
        #: the 0-based position of the offending element of that field, when one is
        self.index = index

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.__dict__.copy()))

    def members(self) -> dict[str, Any]:
        """Extra members of the problem body (those that are None are left out)."""
        return {"field": self.field, "index": self.index}

    def headers(self) -> dict[str, str]:
        """Extra response headers (``WWW-Authenticate``, ``Retry-After``)."""
        return {}

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[ServiceError], state: dict[str, Any]) -> ServiceError:
    err = cls.__new__(cls)
    Exception.__init__(err, state.get("message", ""))
    err.__dict__.update(state)
    return err


class InvalidRequestError(ServiceError):
    """The request is malformed; fix it as the message says and send it again."""

    status = 400
    code = "invalid_request"
    title = "Invalid request"


class InvalidUploadError(InvalidRequestError):
    """The uploaded edge lists are not usable; the message names the field and the edge index."""

    status = 422
    code = "invalid_upload"
    title = "Invalid graph upload"


class InvalidParamsError(InvalidRequestError):
    """A job's task or parameters are not usable; the message names the parameter (and index)."""

    status = 422
    code = "invalid_params"
    title = "Invalid job parameters"


class IncompleteBodyError(InvalidRequestError):
    """The client closed the connection before sending the whole body its Content-Length announced."""

    code = "incomplete_body"
    title = "Incomplete body"


class UnsupportedMediaTypeError(InvalidRequestError):
    """The body's Content-Type is not one the route reads; send JSON or application/octet-stream."""

    status = 415
    code = "unsupported_media_type"
    title = "Unsupported media type"


class NotAcceptableError(InvalidRequestError):
    """No representation the route offers is acceptable by the Accept header; ask for one it names."""

    status = 406
    code = "not_acceptable"
    title = "Not acceptable"


class UnauthorizedError(ServiceError):
    """The request has no valid API key; send one as ``Authorization: Bearer <key>``."""

    status = 401
    code = "unauthorized"
    title = "Unauthorized"

    def __init__(self, message: str, *, challenge: str = 'Bearer realm="mst"') -> None:
        super().__init__(message)
        #: the ``WWW-Authenticate`` challenge (RFC 6750), with ``error=`` when a key was presented
        self.challenge = challenge

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": self.challenge}


class NotFoundError(ServiceError):
    """Nothing is stored under that id; list the resource to see the ids that exist."""

    status = 404
    code = "not_found"
    title = "Not found"


class GraphNotFoundError(NotFoundError):
    """No graph has that id (it never existed or was deleted); upload it again."""

    code = "graph_not_found"
    title = "Graph not found"


class PointSetNotFoundError(NotFoundError):
    """No point set has that id (it never existed or was deleted); upload it again."""

    code = "point_set_not_found"
    title = "Point set not found"


class ModelNotFoundError(NotFoundError):
    """No model of that point set has that id (it never existed, was deleted, or its point set
    was); fit one with POST /v1/points/{points_id}/models."""

    code = "model_not_found"
    title = "Model not found"


class JobNotFoundError(NotFoundError):
    """No job has that id; submit one with POST /v1/graphs/{id}/mst."""

    code = "job_not_found"
    title = "Job not found"


class ConflictError(ServiceError):
    """The resource is not in a state that allows the request; check its status and retry."""

    status = 409
    code = "conflict"
    title = "Conflict"


class JobNotFinishedError(ConflictError):
    """The job has no result yet (or failed); poll GET /v1/jobs/{id} until it has succeeded."""

    code = "job_not_finished"
    title = "Job not finished"


class JobNotCancellableError(ConflictError):
    """Only queued jobs can be cancelled; a running or finished job cannot be."""

    code = "job_not_cancellable"
    title = "Job cannot be cancelled"


class ShardedGraphError(ConflictError):
    """The graph is sharded across several workers and the request is one that sharded graphs do
    not support (a weight update); upload the graph again with the new weights instead."""

    code = "graph_sharded"
    title = "Not supported on a sharded graph"


class ModelOutdatedError(ConflictError):
    """The point set a model was fitted on no longer holds the points it held then (its stored
    file was replaced), so the model would answer for other data; fit a new model."""

    code = "model_outdated"
    title = "Model outdated"


class PayloadTooLargeError(ServiceError):
    """The upload is over a configured limit; send a smaller graph or raise the limit."""

    status = 413
    code = "payload_too_large"
    title = "Content too large"


class QuotaExceededError(ServiceError):
    """The API key is at one of its quotas (``quota`` names it); finish or delete something first."""

    status = 429
    code = "quota_exceeded"
    title = "Quota exceeded"

    def __init__(self, message: str, *, quota: str, limit: int, used: int, retry_after: int = 1) -> None:
        super().__init__(message)
        #: the setting of the quota, e.g. ``MST_QUOTA_QUEUED_JOBS``
        self.quota = quota
        self.limit = limit
        #: the key's use of the quota when the request came (without the request itself)
        self.used = used
        self.retry_after = retry_after

    def members(self) -> dict[str, Any]:
        return {**super().members(), "quota": self.quota, "limit": self.limit, "used": self.used}

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class DeviceQuotaExceededError(QuotaExceededError):
    """The graph would take the API key's graphs over its device-bytes quota; delete graphs first."""

    status = 413
    title = "Device memory quota exceeded"

    def headers(self) -> dict[str, str]:
        return {}  # waiting does not help: only deleting graphs does


class ResultGoneError(ServiceError):
    """The job's result file was lost and its graph has been deleted since, so it cannot be computed
    again; upload the graph again and submit a new job."""

    status = 410
    code = "result_gone"
    title = "Result gone"


class _MemoryNumbers:
    """Bytes a graph needs and a worker has, carried to the problem (``needed_bytes``, ...)."""

    needed_bytes: int | None
    available_bytes: int | None
    capacity_bytes: int | None

    def _numbers(self, needed: int | None, available: int | None, capacity: int | None) -> None:
        self.needed_bytes, self.available_bytes, self.capacity_bytes = needed, available, capacity

    def _members(self) -> dict[str, Any]:
        return {
            "needed_bytes": self.needed_bytes,
            "available_bytes": self.available_bytes,
            "capacity_bytes": self.capacity_bytes,
        }


class GraphExceedsWorkerError(_MemoryNumbers, PayloadTooLargeError):
    """The graph needs more memory than a worker has in all (or than MST_WORKER_MEMORY_BYTES allows),
    so it can never be loaded; split it, or run the service on a larger device."""

    code = "graph_exceeds_worker_memory"
    title = "Graph larger than a worker"

    def __init__(self, message: str, *, needed: int, capacity: int, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self._numbers(needed, None, capacity)

    def members(self) -> dict[str, Any]:
        return {**super().members(), **self._members()}


class PointSetExceedsWorkerError(GraphExceedsWorkerError):
    """The point set, a model fitted on it or a prediction needs more memory than a worker has in
    all (or than MST_WORKER_MEMORY_BYTES allows), so it can never run there; send fewer points,
    or run the service on a larger device."""

    code = "point_set_exceeds_worker_memory"
    title = "Larger than a worker"


class InsufficientMemoryError(_MemoryNumbers, ServiceError):
    """No worker has room for the graph now, even after evicting its idle graphs; retry later or
    delete graphs you no longer need."""

    status = 507
    code = "insufficient_memory"
    title = "Insufficient storage"

    def __init__(self, message: str, *, needed: int, available: int, capacity: int | None = None) -> None:
        super().__init__(message)
        self._numbers(needed, available, capacity)

    def members(self) -> dict[str, Any]:
        return {**super().members(), **self._members()}


class ServiceUnavailableError(ServiceError):
    """No worker can take the request right now (starting or restarting); retry shortly."""

    status = 503
    code = "service_unavailable"
    title = "Service unavailable"


class StorageFullError(ServiceError):
    """The data dir's file system is full, so nothing more can be stored; nothing stored before is
    lost. Delete graphs you no longer need, or ask the operator for room, and retry."""

    status = 507
    code = "storage_full"
    title = "Insufficient storage"


class StorageUnavailableError(ServiceUnavailableError):
    """The data dir cannot be written (read-only, permissions); the operator must fix it. Retry later."""

    code = "storage_unavailable"
    title = "Storage unavailable"


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


def storage_error(exc: BaseException) -> ServiceError | None:
    """The service error for a failure of the data dir's file system or SQLite (full, read-only),
    or None when ``exc`` is not one."""
    if isinstance(exc, OSError) and exc.errno in _FULL:
        return StorageFullError(f"the data dir is full: {exc.strerror or exc}; nothing was stored.")
    if isinstance(exc, OSError) and exc.errno in _UNWRITABLE:
        return StorageUnavailableError(f"the data dir cannot be written: {exc.strerror or exc}.")
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc).lower()
        if "full" in text:
            return StorageFullError(f"the database's disk is full ({exc}); nothing was stored.")
        if "readonly" in text or "read-only" in text or "unable to open" in text:
            return StorageUnavailableError(f"the database cannot be written ({exc}).")
    return None


class WorkerLostError(ServiceUnavailableError):
    """The worker process died while handling the request; it is being restarted, so retry."""

    code = "worker_lost"
    title = "Worker lost"


class QueueFullError(ServiceUnavailableError):
    """The job queues are full (``MST_MAX_QUEUED_JOBS``); retry after the ``Retry-After`` seconds."""

    code = "queue_full"
    title = "Job queue full"

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


class WorkerInternalError(ServiceError):
    """The worker failed in an unexpected way; this is a bug in the service, please report it."""

    code = "worker_internal_error"
    title = "Worker error"


def dataset_not_found(dataset_id: str) -> GraphNotFoundError | PointSetNotFoundError:
    """The 404 of a graph or a point set (their ids start ``g_`` and ``p_``)."""
    if dataset_id.startswith("p_"):
        return PointSetNotFoundError(f"no point set has id {dataset_id!r}.")
    return GraphNotFoundError(f"no graph has id {dataset_id!r}.")


def error_type(exc: BaseException) -> str:
    """The ``error.type`` a failed job records for an exception."""
    if isinstance(exc, (ServiceError, core_errors.MSTError)):
        return exc.code
    return "internal_error"
