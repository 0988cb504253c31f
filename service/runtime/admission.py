"""Admission of jobs and one-shot computations: each owner's quota, and the workers' queues.

Every job queued or running, one-shot computations included, counts against its API key's
``MST_QUOTA_QUEUED_JOBS`` (429 above); every task waiting on a worker's queue, whoever's,
against ``MST_MAX_QUEUED_JOBS`` (503 with ``Retry-After``). Both are checked before anything is
read or queued.
"""

from __future__ import annotations

from collections import Counter

from ..errors import QueueFullError, QuotaExceededError
from .supervisor import Supervisor


class Admission:
    """The jobs queued or running per owner, and the checks against the limits."""

    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor
        #: queued and running jobs (one-shot computations included) per owner
        self._active: Counter[str] = Counter()

    def admit(self, owner: str) -> None:
        """Refuse one more job of ``owner``: over MST_QUOTA_QUEUED_JOBS (429) or MST_MAX_QUEUED_JOBS (503)."""
        settings = self._supervisor.settings
        quota = settings.quota_queued_jobs
        if quota and self._active[owner] >= quota:
            active = self._active[owner]
            raise QuotaExceededError(
                f"this API key has {active} queued or running job(s), its quota MST_QUOTA_QUEUED_JOBS "
                f"is {quota}; retry when one has finished.",
                quota="MST_QUOTA_QUEUED_JOBS",
                limit=quota,
                used=active,
            )
        self.check_queue()

    def check_queue(self) -> None:
        """Refuse one more task on the workers' queues over MST_MAX_QUEUED_JOBS (503, Retry-After)."""
        queued = sum(w.queue_depth for w in self._supervisor.workers)
        if queued >= self._supervisor.settings.max_queued_jobs:
            raise QueueFullError(
                f"{queued} jobs are queued, the most the service takes (MST_MAX_QUEUED_JOBS); "
                "retry after the Retry-After seconds."
            )

    def started(self, owner: str) -> None:
        """One more queued or running job of ``owner``."""
        self._active[owner] += 1

    def finished(self, owner: str) -> None:
        """One queued or running job of ``owner`` has finished."""
        self._active[owner] -= 1
        if self._active[owner] <= 0:
            del self._active[owner]
