"""Admission of jobs, one-shot computations and predictions: each owner's quota, and the workers' queues.

Every job queued or running, one-shot computations and predictions included, counts against its
API key's ``MST_QUOTA_QUEUED_JOBS`` (429 above): a token taken and checked in one transaction of
the store (:meth:`~service.storage.job_table.JobTable.take_token`), so requests landing on
different API processes never pass the quota together; a job's worker releases it with the job's
final record. Every request queued on the workers, whoever's, counts against
``MST_MAX_QUEUED_JOBS`` (503 with ``Retry-After``), read from the board. Both are checked before
anything is read or queued.
"""

from __future__ import annotations

from ..errors import QueueFullError, QuotaExceededError
from ..settings import Settings
from ..storage.store import Store
from .links.fleet import Fleet


class Admission:
    """The checks against the limits (see the module's docstring)."""

    def __init__(self, settings: Settings, store: Store, fleet: Fleet) -> None:
        self._settings = settings
        self._store = store
        self._fleet = fleet
        #: this API process's holder name for the tokens it releases itself (a dead one's are freed)
        self.holder = f"api-{fleet.slot}"

    def admit(self, owner: str, token: str, holder: str | None = None) -> bool:
        """Refuse one more job (one-shot, prediction) of ``owner``: over MST_QUOTA_QUEUED_JOBS (429)
        or MST_MAX_QUEUED_JOBS (503). Whether a quota token was taken (then :meth:`release` it,
        or its worker does with a job's final record)."""
        self.check_queue()
        quota = self._settings.quota_queued_jobs
        if not quota:
            return False
        active = self._store.take_token(token, owner, holder or self.holder, quota)
        if active:
            raise QuotaExceededError(
                f"this API key has {active} queued or running job(s), its quota MST_QUOTA_QUEUED_JOBS "
                f"is {quota}; retry when one has finished.",
                quota="MST_QUOTA_QUEUED_JOBS",
                limit=quota,
                used=active,
            )
        return True

    def release(self, token: str) -> None:
        if self._settings.quota_queued_jobs:
            self._store.release_token(token)

    def check_queue(self) -> None:
        """Refuse one more request on the workers' queues over MST_MAX_QUEUED_JOBS (503, Retry-After)."""
        queued = self._fleet.queued()
        if queued >= self._settings.max_queued_jobs:
            raise QueueFullError(
                f"{queued} jobs are queued, the most the service takes (MST_MAX_QUEUED_JOBS); "
                "retry after the Retry-After seconds."
            )
