"""Managed-job rows: creating a job (PENDING, with its history row), reading them, and the
bookkeeping columns the job loop writes besides the status (attempt, cluster, spend, events).

Moves one state: a new job starts PENDING (:func:`create_job`). Every other status change goes
through :func:`gpulease.state.status.set_status` (table-checked compare-and-set with history).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.state.machines import JobStatus
from gpulease.state.models import Cluster, Job
from gpulease.state.status import record_created

MAX_EVENTS = 200  # a job's event list is a report, not a log: keep the newest


def create_job(
    session: Session,
    *,
    name: str,
    task: Mapping[str, Any],
    owner: str,
    actor: str,
    now: float,
    clock: str = "system",
    started_at_job: float | None = None,
) -> Job:
    """Write a PENDING job (its launch document in ``task``) and its creation history row."""
    job = Job(
        name=name,
        owner=owner,
        status=JobStatus.PENDING,
        status_changed_at=now,
        task=dict(task),
        clock=clock,
        attempt=0,
        cluster_id=None,
        pricing=None,
        recoveries=0,
        restarts=0,
        blocked=[],
        events=[],
        cost_usd=0.0,
        run_s=0.0,
        mark_at_job=None,
        started_at_job=now if started_at_job is None else started_at_job,
        next_attempt_at=None,
        cancel_requested=False,
        pending_stop=None,
        failure=None,
        last_error=None,
        created_at=now,
        updated_at=now,
    )
    session.add(job)
    session.flush()
    record_created(session, job, actor=actor, reason="launched")
    return job


def get_job(session: Session, job_id: int) -> Job | None:
    return session.get(Job, job_id)


def list_jobs(session: Session, *, include_done: bool = True) -> Sequence[Job]:
    stmt = select(Job).order_by(Job.id)
    if not include_done:
        stmt = stmt.where(
            Job.status.not_in([JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED])
        )
    return list(session.scalars(stmt))


def job_clusters(session: Session, job_id: int) -> Sequence[Cluster]:
    """Every attempt cluster of the job, oldest first."""
    return list(
        session.scalars(select(Cluster).where(Cluster.job_id == job_id).order_by(Cluster.id))
    )


def add_event(job: Job, event: Mapping[str, Any]) -> None:
    """Append to the job's event list (a new list, so the JSON column is written)."""
    job.events = [*job.events, dict(event)][-MAX_EVENTS:]
