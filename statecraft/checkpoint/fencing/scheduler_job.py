"""What the batch scheduler says about this process's job: :class:`SchedulerJob`, read from the
environment by :func:`scheduler_job` (Slurm: ``SLURM_JOB_ID`` and ``SLURM_RESTART_COUNT``).

The object lease records it, so a job the scheduler requeued on another node after a node
failure (same job id, a higher restart count) takes its own lease over at once instead of
waiting out ``lease_ttl_s`` (:func:`~statecraft.checkpoint.fencing.object_lease_acquire.
acquire_object_lease`). Any other owner, on any host, is still refused while its lease is live.
The takeover is safe even if the old incarnation still runs somewhere (a partitioned node): its
next renewal, check or fenced ``latest`` write fails its ``If-Match`` and it commits nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import attrs

__all__ = ["SchedulerJob", "scheduler_job"]


@attrs.frozen
class SchedulerJob:
    """One incarnation of a scheduler job.

    Attributes:
        key: ``<scheduler>:<job id>`` (``slurm:12345``): the same across requeues.
        restart_count: how often the scheduler restarted it (0 for the first run).
    """

    key: str
    restart_count: int

    def requeue_of(self, job: str | None, restart_count: int | None) -> bool:
        """True when this incarnation is a later restart of the job a lease records (the
        same ``key``, a strictly higher restart count); a lease without a job never is."""
        return job == self.key and restart_count is not None and self.restart_count > restart_count

    def describe(self) -> str:
        return f"{self.key} restart {self.restart_count}"


def scheduler_job(environ: Mapping[str, str] | None = None) -> SchedulerJob | None:
    """The scheduler job of this process (``None`` outside a scheduler, or when its variables
    are not what Slurm sets: a restart count that is not a non-negative integer is ignored
    rather than trusted, so the lease fails closed)."""
    env = os.environ if environ is None else environ
    job_id = env.get("SLURM_JOB_ID", "").strip()
    if not job_id:
        return None
    count = env.get("SLURM_RESTART_COUNT", "0").strip() or "0"
    if not count.isdigit():
        return None
    return SchedulerJob(f"slurm:{job_id}", int(count))
