"""The managed-jobs loop's brain: one pure function from a :class:`JobSnapshot` to the actions of
one step, testable without a cloud, a DB or processes.

How a job moves (``gpulease.state.JobStatus``; every move is table-checked, with history):

==============  ==========================================================================
status          rules
==============  ==========================================================================
PENDING         start the first attempt → STARTING (no target at all → FAILED; the spot
                policy waiting for spot → RECOVERING)
STARTING        attempt RUNNING → RUNNING; SUCCEEDED → SUCCEEDED; failed → see below
RUNNING         as STARTING; a node LOST (N heartbeats missed) counts as preempted;
                on-demand while the spot policy wants spot, or the spot price above the
                limit → ask the task to checkpoint and stop (``migrate`` / ``price``);
                spend about to pass the budget → the same, then FAILED (``budget``)
RECOVERING      the old attempt torn down, the backoff waited out → the next attempt
                (mode from the strategy or the spot policy; idle = wait for spot)
CANCELLING      the attempt cluster terminated (confirmed by the provider) → CANCELLED
==============  ==========================================================================

An attempt that fails ``infra`` (preempted, node lost) → RECOVERING, its spot zone blocked for
``zone_cooldown``; ``task`` (the user's code) → RECOVERING while restarts are left, else FAILED;
``launch`` (no target could start) → RECOVERING with backoff, the spot policy deciding whether to
wait for spot or go on-demand. A cancel wins over everything, at any moment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from gpulease.controller.job_document import JobDocument
from gpulease.state import ClusterStatus, JobStatus, LaunchTarget, NodeState
from gpulease.state.machines import Timeout, timeout_of

_J = JobStatus
_C = ClusterStatus
BILLED = frozenset({_C.PROVISIONING, _C.SETTING_UP, _C.RUNNING, _C.STOPPING, _C.STARTING})
ENDED = frozenset({_C.SUCCEEDED, _C.FAILED, _C.TERMINATING, _C.TERMINATED})
FINAL_JOB = frozenset({_J.SUCCEEDED, _J.FAILED, _J.CANCELLED})


@dataclass(frozen=True, slots=True)
class AttemptView:
    """The job's current attempt cluster."""

    id: int
    name: str
    status: ClusterStatus
    failure: str | None
    target: LaunchTarget
    node_states: tuple[NodeState, ...] = ()
    reason: str = ""

    @property
    def lost_node(self) -> str | None:
        """Why a node of the attempt is gone or going, if one is."""
        if NodeState.PREEMPTED in self.node_states:
            return "a node was preempted by the provider"
        if NodeState.LOST in self.node_states:
            return "a node stopped answering (heartbeats missed)"
        return None


@dataclass(frozen=True, slots=True)
class JobView:
    id: int
    name: str
    status: JobStatus
    status_changed_at: float
    doc: JobDocument
    attempt: int
    pricing: str | None
    recoveries: int
    restarts: int
    cost_usd: float
    run_s: float
    started_at_job: float
    next_attempt_at: float | None
    cancel_requested: bool
    pending_stop: str | None
    blocked: tuple[dict[str, object], ...] = ()
    events: tuple[dict[str, object], ...] = ()


@dataclass(frozen=True, slots=True)
class JobSnapshot:
    now: float  # server clock (backoff)
    now_job: float  # the job's clock (deadline, cost, cool-down)
    job: JobView
    attempt: AttemptView | None
    others_live: bool = False  # an earlier attempt cluster is not confirmed gone yet
    wanted_mode: str | None = None  # the spot policy's mode now: spot | on_demand | idle
    spot_price: float | None = None  # where the attempt runs, when the provider tells
    spot_limit: float | None = None


@dataclass(frozen=True, slots=True)
class SetJob:
    status: JobStatus
    reason: str
    failure: str | None = None


@dataclass(frozen=True, slots=True)
class StartAttempt:
    """Create the next attempt cluster (in ``pricing`` mode, else the mode the strategy picks)."""

    pricing: str | None = None


@dataclass(frozen=True, slots=True)
class EndAttempt:
    """Terminate the attempt cluster (``down``): the cluster loop confirms it gone."""

    reason: str


@dataclass(frozen=True, slots=True)
class RequestStop:
    """Deliver a preemption notice to the task (it checkpoints and exits 75), remembering why."""

    why: str  # migrate | price | budget
    detail: str


@dataclass(frozen=True, slots=True)
class Recover:
    """The attempt is lost: count it (``preemption`` or ``restart``), block its spot zone when
    ``block``, back off, move to RECOVERING."""

    kind: str  # preemption | restart | launch | migrate | price
    reason: str
    block: bool = False


JobAction: TypeAlias = SetJob | StartAttempt | EndAttempt | RequestStop | Recover


@dataclass(frozen=True, slots=True)
class JobConfig:
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 60.0
    stop_grace_s: float = 60.0


def decide_job(snap: JobSnapshot) -> list[JobAction]:
    """The actions of one step for the snapshot's job (possibly none)."""
    job = snap.job
    if job.status in FINAL_JOB:
        return _final(snap)
    if job.cancel_requested and job.status is not _J.CANCELLING:
        return [SetJob(_J.CANCELLING, "cancel requested"), *_end(snap, "job cancelled")]
    timeout = timeout_of(job.status)
    if timeout and snap.now - job.status_changed_at >= timeout.seconds and not _arrived(snap):
        return _timed_out(snap, timeout)
    return _RULES[job.status](snap)


def _arrived(snap: JobSnapshot) -> bool:
    """A STARTING job whose attempt already runs or ended: its next step is no timeout."""
    attempt = snap.attempt
    return (
        snap.job.status is _J.STARTING
        and attempt is not None
        and (attempt.status is _C.RUNNING or attempt.status in ENDED)
    )


def _timed_out(snap: JobSnapshot, rule: Timeout) -> list[JobAction]:
    """The exit ``TRANSIENT_TIMEOUTS[JobStatus]`` gives the job's status: a self-loop re-issues
    the teardown (CANCELLING); RECOVERING recovers elsewhere (the attempt never ran); FAILED ends
    the job. The attempt cluster is taken down first."""
    status = snap.job.status
    why = f"timed out: {rule.why}"
    if rule.exit is status:
        return [SetJob(status, why), *_cancelling(snap)]
    if rule.exit is _J.RECOVERING:
        return [*_end(snap, why), Recover("launch", why)]
    assert isinstance(rule.exit, JobStatus)
    return [*_end(snap, why), SetJob(rule.exit, why, "timeout")]


def _final(snap: JobSnapshot) -> list[JobAction]:
    """A finished job leaves nothing running: its attempt cluster is taken down."""
    attempt = snap.attempt
    if attempt is not None and attempt.status not in (_C.TERMINATING, _C.TERMINATED):
        return [EndAttempt(f"job {snap.job.status.value}")]
    return []


def _end(snap: JobSnapshot, reason: str) -> list[JobAction]:
    attempt = snap.attempt
    if attempt is None or attempt.status in (_C.TERMINATING, _C.TERMINATED):
        return []
    return [EndAttempt(reason)]


def _pending(snap: JobSnapshot) -> list[JobAction]:
    if not snap.job.doc.spot and not snap.job.doc.on_demand:
        return [SetJob(_J.FAILED, "no launchable offer", "no_offer")]
    if snap.wanted_mode == "idle":
        return [SetJob(_J.RECOVERING, "the spot policy waits for spot capacity")]
    return [StartAttempt(snap.wanted_mode)]


def _watch(snap: JobSnapshot) -> list[JobAction]:
    """STARTING and RUNNING: follow the attempt cluster."""
    attempt = snap.attempt
    job = snap.job
    if attempt is None:  # the attempt's row is gone: start another
        return [Recover("launch", "the attempt cluster disappeared")]
    if attempt.status in ENDED:
        return _attempt_ended(snap, attempt)
    if attempt.lost_node:
        return _lost(snap, attempt, attempt.lost_node)
    if attempt.status is not _C.RUNNING:
        return []
    if job.status is _J.STARTING:
        return [SetJob(_J.RUNNING, "the task runs on every node")]
    return _running_checks(snap, attempt) if job.pending_stop is None else []


def _lost(snap: JobSnapshot, attempt: AttemptView, reason: str) -> list[JobAction]:
    return [
        *_end(snap, reason),
        Recover("preemption", reason, block=attempt.target.pricing == "spot"),
    ]


def _attempt_ended(snap: JobSnapshot, attempt: AttemptView) -> list[JobAction]:
    job = snap.job
    if attempt.status is _C.SUCCEEDED:
        return [SetJob(_J.SUCCEEDED, "the task succeeded"), EndAttempt("job succeeded")]
    why = attempt.reason or f"attempt {attempt.name} {attempt.status.value}"
    stop = job.pending_stop
    if stop == "budget":
        spent = f"${job.cost_usd:.2f}"
        budget = job.doc.policy.budget_usd
        if budget is None:  # an install budget (``budgets:``) stopped it: its words
            msg = f"{_stop_detail(job, 'stop:budget')}; stopped with a checkpoint"
        else:
            msg = f"budget: spent {spent} of ${budget:.2f}; stopped with a checkpoint"
        return [*_end(snap, "budget"), SetJob(_J.FAILED, msg, "budget")]
    if stop in ("migrate", "price"):
        return [*_end(snap, stop), Recover(stop, f"{stop}: {why}", block=stop == "price")]
    return _failed(snap, attempt, why)


def _stop_detail(job: JobView, kind: str) -> str:
    """The detail of the job's last ``kind`` event (why we asked the task to stop)."""
    details = [str(e.get("detail", "")) for e in job.events if e.get("kind") == kind]
    return details[-1] if details else "budget"


def _failed(snap: JobSnapshot, attempt: AttemptView, why: str) -> list[JobAction]:
    """An attempt that failed, or was taken down by someone else, without a stop we asked for."""
    failure = attempt.failure
    if attempt.status in (_C.TERMINATING, _C.TERMINATED) or failure == "infra":
        return _lost(snap, attempt, why)
    if failure == "launch":
        return [*_end(snap, why), Recover("launch", why)]
    if snap.job.restarts < snap.job.doc.policy.max_restarts_on_errors:
        return [*_end(snap, why), Recover("restart", why)]
    return [*_end(snap, why), SetJob(_J.FAILED, f"the task failed: {why}", "task")]


def _running_checks(snap: JobSnapshot, attempt: AttemptView) -> list[JobAction]:
    """Budget, spot price and the spot policy, while the task runs."""
    job = snap.job
    policy = job.doc.policy
    price = attempt.target.price_per_hour or 0.0
    if policy.budget_usd is not None:
        next_cost = job.cost_usd + price * policy.gap_s / 3600.0
        if next_cost > policy.budget_usd:
            detail = f"spend ${job.cost_usd:.2f} would pass the budget ${policy.budget_usd:.2f}"
            return [RequestStop("budget", detail)]
    spot_price, limit = snap.spot_price, snap.spot_limit
    on_spot = attempt.target.pricing == "spot"
    if on_spot and spot_price is not None and limit is not None and spot_price > limit:
        detail = f"spot price ${spot_price:.4f}/h passed the limit ${limit:.4f}/h"
        return [RequestStop("price", detail)]
    if attempt.target.pricing != "spot" and snap.wanted_mode == "spot" and job.doc.spot:
        return [RequestStop("migrate", "spot is available and the deadline allows it")]
    return []


def _recovering(snap: JobSnapshot) -> list[JobAction]:
    job = snap.job
    actions = _end(snap, "recovering")
    if snap.attempt is not None and snap.attempt.status not in (_C.TERMINATING, _C.TERMINATED):
        return actions  # the old attempt's teardown is requested first (its task is over)
    if job.next_attempt_at is not None and snap.now < job.next_attempt_at:
        return actions
    if snap.wanted_mode == "idle":
        return actions  # the spot policy waits for spot
    return [*actions, StartAttempt(snap.wanted_mode)]


def _cancelling(snap: JobSnapshot) -> list[JobAction]:
    attempt = snap.attempt
    if (attempt is None or attempt.status is _C.TERMINATED) and not snap.others_live:
        return [SetJob(_J.CANCELLED, "cancelled; the provider confirms nothing of it runs")]
    return _end(snap, "job cancelled")


_RULES = {
    _J.PENDING: _pending,
    _J.STARTING: _watch,
    _J.RUNNING: _watch,
    _J.RECOVERING: _recovering,
    _J.CANCELLING: _cancelling,
}
