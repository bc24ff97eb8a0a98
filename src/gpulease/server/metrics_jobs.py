"""The managed jobs' and the providers' families of ``GET /metrics`` (docs/metrics.md).

Owns :class:`JobMetricInputs` (what these families read besides the DB: the server's clock,
the jobs' clocks, the checkpoint sync times the agents report, the provider call counts) and
:func:`job_families`, called by :class:`~gpulease.server.metrics.ControlPlaneCollector` inside
its scrape session:

- ``gpulease_recovery_seconds``: one observation per interval in the jobs' status history
  from a job's move to ``recovering`` (the loop saw its attempt lost: a preemption, a lost node,
  a failed launch, the task's failure with restarts left) to its next ``running``; a job that
  recovers again before it runs keeps the first loss as the start. From ``status_changes``,
  never deleted, so the histogram only grows.
- ``gpulease_job_deadline_timestamp_seconds``: the job's launch time on its clock plus
  ``deadline_hours``, mapped to Unix time at the job clock's current offset.
- ``gpulease_job_expected_finish_timestamp_seconds``: now + what the spot policy sees left:
  ``job_s`` (the expected run time) − ``run_s`` (the run time so far, plus the time since the
  loop last accrued it when the task runs now), plus the policy's ``changeover_s`` when the job
  is not running (an attempt must start before progress resumes). Only with an expected run
  time.
- ``gpulease_job_checkpoint_interval_seconds``: the job's ``checkpoint.sync_s`` (the agent's
  default, 300 s, when unset), for a job with a checkpoint store.
- ``gpulease_checkpoint_sync_age_seconds``: now − the last successful sync the job's agents
  reported; before any, for a running job, the time since it started running.
- ``gpulease_provider_api_calls_total`` / ``gpulease_provider_api_errors_total``: the
  :class:`~gpulease.server.provider_calls.ProviderCalls` counts.

Reads only; moves no states.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.clock import Clock, SystemClock
from gpulease.server.ckpt_syncs import CheckpointSyncs
from gpulease.server.provider_calls import ProviderCalls
from gpulease.state.machines import JobStatus
from gpulease.state.models import Job, StatusChange

#: the agent's checkpoint sync interval when the task sets none (agent.ckpt_sync.DEFAULT_SYNC_S)
DEFAULT_SYNC_S = 300.0
RECOVERY_BUCKETS = (1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0)
_JOB_DONE = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)
_SYSTEM = SystemClock()


@dataclass(frozen=True)
class JobMetricInputs:
    """``clock``: the server's (Unix time); ``job_clock``: the clock a job's ``clock`` column
    names (``JobReconciler.job_clock``; the server's when not given)."""

    clock: Clock = field(default_factory=SystemClock)
    job_clock: Callable[[str], Clock] | None = None
    syncs: CheckpointSyncs | None = None
    provider_calls: ProviderCalls | None = None

    def now_job(self, name: str) -> float:
        clock = self.job_clock(name) if self.job_clock is not None else self.clock
        return clock.now()


def job_families(session: Session, inputs: JobMetricInputs) -> list[Metric]:
    """Every family of this module, read in ``session``."""
    return [
        _recoveries(session),
        *_job_gauges(session, inputs),
        *_provider_calls(inputs.provider_calls),
    ]


def recovery_intervals(changes: Iterable[tuple[int, str, float]]) -> Iterator[float]:
    """Seconds from each loss (``recovering``) to the next ``running`` of the same job, from
    ``(job id, to_status, at)`` rows ordered by job then time."""
    lost: dict[int, float] = {}
    for job_id, status, at in changes:
        if status == JobStatus.RECOVERING.value:
            lost.setdefault(job_id, at)
        elif status == JobStatus.RUNNING.value and job_id in lost:
            yield max(0.0, at - lost.pop(job_id))


def _recoveries(session: Session) -> HistogramMetricFamily:
    rows = session.execute(
        select(StatusChange.entity_id, StatusChange.to_status, StatusChange.at)
        .where(StatusChange.entity_kind == "job")
        .where(StatusChange.to_status.in_([JobStatus.RECOVERING.value, JobStatus.RUNNING.value]))
        .order_by(StatusChange.entity_id, StatusChange.id)
    )
    counts = [0] * (len(RECOVERY_BUCKETS) + 1)
    total = 0.0
    for seconds in recovery_intervals((int(j), str(s), float(t)) for j, s, t in rows):
        total += seconds
        index = next((i for i, b in enumerate(RECOVERY_BUCKETS) if seconds <= b), -1)
        counts[index] += 1
    buckets, cumulative = [], 0
    for bound, n in zip([*(repr(b) for b in RECOVERY_BUCKETS), "+Inf"], counts, strict=True):
        cumulative += n
        buckets.append((bound, float(cumulative)))
    return HistogramMetricFamily(
        "gpulease_recovery_seconds",
        "from losing a managed job's attempt to its task running again",
        buckets=buckets,
        sum_value=total,
    )


def _gauge(name: str, doc: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=["job_id"])


def _job_gauges(session: Session, inputs: JobMetricInputs) -> list[Metric]:
    deadline = _gauge(
        "gpulease_job_deadline_timestamp_seconds", "the managed job's deadline (Unix time)"
    )
    finish = _gauge(
        "gpulease_job_expected_finish_timestamp_seconds",
        "when the job should finish at its current rate (Unix time)",
    )
    interval = _gauge(
        "gpulease_job_checkpoint_interval_seconds", "the job's checkpoint sync interval"
    )
    age = _gauge("gpulease_checkpoint_sync_age_seconds", "age of the job's last synced checkpoint")
    now = inputs.clock.now()
    jobs = session.scalars(select(Job).where(Job.status.not_in(_JOB_DONE)).order_by(Job.id))
    for job in jobs:
        label = [str(job.id)]
        now_job = inputs.now_job(job.clock)
        policy: Mapping[str, Any] = (job.task or {}).get("policy") or {}
        if (deadline_s := _number(policy.get("deadline_s"))) is not None:
            deadline.add_metric(label, now + (job.started_at_job + deadline_s - now_job))
        if (left := _time_left(job, policy, now_job)) is not None:
            finish.add_metric(label, now + left)
        checkpoint: Mapping[str, Any] = (job.task or {}).get("checkpoint") or {}
        if not checkpoint.get("store"):
            continue
        interval.add_metric(label, _number(checkpoint.get("sync_s")) or DEFAULT_SYNC_S)
        if (synced := _last_sync(job, inputs)) is not None:
            age.add_metric(label, max(0.0, now - synced))
    return [deadline, finish, interval, age]  # fmt: skip


def _time_left(job: Job, policy: Mapping[str, Any], now_job: float) -> float | None:
    """What the spot policy sees left of the job's run time (plus a changeover when it does
    not run now), in seconds of its clock; None without an expected run time."""
    job_s = _number(policy.get("job_s"))
    if not job_s:
        return None
    run_s = job.run_s
    running = job.status is JobStatus.RUNNING
    if running and job.mark_at_job is not None:
        run_s += max(0.0, now_job - job.mark_at_job)
    changeover = 0.0 if running else (_number(policy.get("changeover_s")) or 0.0)
    return changeover + max(0.0, job_s - run_s)


def _last_sync(job: Job, inputs: JobMetricInputs) -> float | None:
    task_id = (job.task or {}).get("task_id")
    synced = inputs.syncs.last(str(task_id)) if inputs.syncs and task_id else None
    if synced is None and job.status is JobStatus.RUNNING:
        return job.status_changed_at
    return synced


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _provider_calls(calls: ProviderCalls | None) -> list[Metric]:
    made = CounterMetricFamily(
        "gpulease_provider_api_calls",
        "the server's provider API calls",
        labels=["provider", "operation"],
    )
    failed = CounterMetricFamily("gpulease_provider_api_errors",
                                 "provider API calls that raised, by error code",
                                 labels=["provider", "operation", "code"])  # fmt: skip
    if calls is not None:
        for (provider, operation), n in sorted(calls.calls().items()):
            made.add_metric([provider, operation], float(n))
        for (provider, operation, code), n in sorted(calls.errors().items()):
            failed.add_metric([provider, operation, code], float(n))
    return [made, failed]
