"""The managed-jobs loop: which jobs are due, a snapshot of each (its row, its attempt cluster,
the spot market), one step of :func:`~gpulease.controller.job_rules.decide_job`, carried out.

A job runs on a sequence of *attempt clusters* (``<name>-<job id>-<attempt>``), each an ordinary
cluster the cluster loop provisions, sets up, runs and terminates; this loop only creates them,
watches them and takes them down. Creating an attempt writes the cluster row (with its launch
intent) and the job's ``attempt``/``cluster_id`` in one transaction, so a controller killed at
any line and restarted finds either both or neither — never a second cluster for one attempt,
and the cluster loop launches by intent, idempotently (no duplicate nodes). A job of a pool
(``resources.pool``) takes an idle node of the pool instead (:mod:`~gpulease.controller.pool_jobs`)
and gives it back when done with it, if the node is healthy
(:mod:`~gpulease.controller.pool_return`).

It also relays provider events: a preemption notice goes to the node's agent (the task gets
SIGTERM, checkpoints and exits 75; the agent uploads the checkpoint), a preemption marks the node
PREEMPTED. Run time accrues on the job's clock (the sim provider's scaled clock when the job
runs only there); spend is the cost ledger's sum for the job (:mod:`~gpulease.controller.accrual`
writes it on the same clock), copied into ``jobs.cost_usd``. States moved: job statuses
(through ``set_status``), attempt clusters → TERMINATING, nodes → PREEMPTED.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from gpulease.backoff import backoff_delay
from gpulease.clock import Clock
from gpulease.controller.document import LaunchDocument, task_id_of
from gpulease.controller.job_document import JobDocument, attempt_targets, blocked_now
from gpulease.controller.job_events import EventRelay
from gpulease.controller.job_rules import (
    BILLED,
    FINAL_JOB,
    AttemptView,
    EndAttempt,
    JobAction,
    JobConfig,
    JobSnapshot,
    JobView,
    Recover,
    RequestStop,
    SetJob,
    StartAttempt,
    decide_job,
)
from gpulease.controller.pool_jobs import release_node, take_node
from gpulease.controller.pool_return import Outcome, handback_of, settle
from gpulease.controller.ports import AgentConnector, NodeRef
from gpulease.controller.skeleton import ClaimedLoop, LoopSettings, StepOutcome, held_session
from gpulease.errors import GpuleaseError
from gpulease.providers.base import Provider, SupportsSpotMarket
from gpulease.spot import Mode, Observation
from gpulease.spot.gpulease_policy import GpuleasePolicy
from gpulease.spot.spot_model import DEFAULT_SPOT_RATIO
from gpulease.state import (
    Claim,
    Cluster,
    ClusterStatus,
    InvalidTransition,
    Job,
    JobStatus,
    LaunchTarget,
    LostRace,
    NodeState,
    add_event,
    claim,
    create_cluster,
    current_target,
    get_job,
    history,
    job_clusters,
    list_nodes,
    release,
    session_scope,
    set_status,
)
from gpulease.state.claims import Claimable
from gpulease.state.ledger import job_spend

log = logging.getLogger("gpulease.controller.jobs")

ACTOR = "jobs"
_C = ClusterStatus
_MODES = {Mode.IDLE: "idle", Mode.SPOT: "spot", Mode.ON_DEMAND: "on_demand"}


def attempt_name(job_name: str, job_id: int, attempt: int) -> str:
    """The attempt cluster's name: a valid cluster name (≤ 63 characters) for any job name."""
    suffix = f"-{job_id}-{attempt}"
    base = re.sub(r"[^A-Za-z0-9._-]", "-", job_name).strip("-._") or "job"
    return base[: 63 - len(suffix)] + suffix


def job_task_id(job_name: str, job_id: int) -> str:
    """``GPULEASE_TASK_ID`` of every attempt of a job."""
    return task_id_of(f"job-{job_name}", job_id)


@dataclass
class _PolicyState:
    policy: GpuleasePolicy
    tick: int
    mode: str


class JobReconciler(ClaimedLoop[JobSnapshot, JobAction]):
    """The managed-jobs loop: an :class:`~gpulease.controller.skeleton.EntityLoop` over job
    rows, driven by its :class:`~gpulease.controller.skeleton.Skeleton` (claims on ``jobs``)."""

    kind = "job"
    model: Claimable = Job

    def __init__(
        self,
        engine: Engine,
        providers: Mapping[str, Provider],
        agents: AgentConnector,
        *,
        clock: Clock,
        owner: str,
        config: JobConfig | None = None,
        settings: LoopSettings | None = None,
    ) -> None:
        super().__init__(engine, clock=clock, owner=owner, settings=settings)
        self.providers = providers
        self.agents = agents
        self.config = config or JobConfig()
        self._policies: dict[int, _PolicyState] = {}
        self.events = EventRelay(engine, providers, agents, clock=clock,
                                 grace_s=self.config.stop_grace_s)  # fmt: skip

    # ---- clocks and the market --------------------------------------------------------------

    def clock_name(self, providers: frozenset[str]) -> str:
        """The clock a job on ``providers`` follows: a provider's market clock when it is the
        only provider, else the server's."""
        if len(providers) == 1:
            (name,) = providers
            if isinstance(self.providers.get(name), SupportsSpotMarket):
                return name
        return "system"

    def job_clock(self, name: str) -> Clock:
        provider = self.providers.get(name)
        if isinstance(provider, SupportsSpotMarket):
            return provider.market_clock
        return self.clock

    def _spot_price(self, target: LaunchTarget) -> float | None:
        provider = self.providers.get(target.provider)
        if not isinstance(provider, SupportsSpotMarket) or target.price_per_hour is None:
            return None
        try:
            return provider.spot_price(
                target.region, target.zone, target.instance_type, target.price_per_hour
            )
        except GpuleaseError:
            return None

    def _spot_available(self, doc: JobDocument) -> bool:
        for target in doc.spot[:1]:
            provider = self.providers.get(target.provider)
            if isinstance(provider, SupportsSpotMarket):
                try:
                    known = provider.spot_available(target.region, target.zone, target.num_nodes)
                except GpuleaseError:
                    known = None
                if known is not None:
                    return known
        return bool(doc.spot)

    # ---- the loop ---------------------------------------------------------------------------

    def due(self) -> list[int]:
        """Jobs not finished, and finished ones whose attempt cluster is not torn down yet."""
        live = select(Job.id).where(Job.status.not_in(list(FINAL_JOB)))
        leftovers = (
            select(Job.id)
            .join(Cluster, Cluster.id == Job.cluster_id)
            .where(Job.status.in_(list(FINAL_JOB)), Cluster.job_id == Job.id)
            .where(Cluster.status.not_in([_C.TERMINATING, _C.TERMINATED]))
        )
        with session_scope(self.engine) as session:
            return sorted(set(session.scalars(live)) | set(session.scalars(leftovers)))

    def run_pass(self) -> bool:
        """Relay provider events, then one step for every due job; True when anything changed."""
        progress = self.relay_events()
        return self.skeleton.run_pass() | progress

    def relay_events(self) -> bool:
        """Preemption notices to the agents, preemptions onto the node rows."""
        return self.events.relay()

    def stop_for_budget(self, job_id: int, detail: str) -> bool:
        """Ask a RUNNING job's task to checkpoint and stop because an install budget
        (``budgets:``) ran out — the budget loop's call, carried out under the job's own claim
        like a step; the job then ends FAILED (``budget``) as with its own ``budget_usd``.
        False when the job is claimed elsewhere, not running, or already stopping."""
        now = self.clock.now()
        until = now + self.skeleton.settings.claim_ttl_s
        with session_scope(self.engine) as session:
            held = claim(session, job_id, self.worker, until=until, now=now, model=Job)
        if held is None:
            return False
        try:
            snap = self.snapshot(job_id)
            if snap is None or snap.job.status is not JobStatus.RUNNING or snap.job.pending_stop:
                return False
            self._held = held
            return self._request_stop(snap, RequestStop("budget", detail))
        finally:
            self._held = None
            with session_scope(self.engine) as session:
                release(session, held, now=self.clock.now())

    # ---- EntityLoop -------------------------------------------------------------------------

    def decide(self, snap: JobSnapshot) -> list[JobAction]:
        return decide_job(snap)

    def apply(self, snap: JobSnapshot, actions: Sequence[JobAction], held: Claim) -> StepOutcome:
        """Accrue cost and run time, then the actions in order, under ``held``; an action that
        could not be carried out (a stop not delivered, a transition refused) ends the step."""
        self._held = held
        try:
            changed = self._accrue(snap.job.id, snap)
            for action in actions:
                if not self._apply(snap, action):
                    break
                changed = True
        finally:
            self._held = None
        return StepOutcome(progress=changed)

    @contextmanager
    def _writing(self) -> Iterator[Session]:
        """A transaction of this step: raises :class:`LostRace` when the job's claim is gone."""
        with held_session(self.engine, self._held) as session:
            yield session

    # ---- snapshot ---------------------------------------------------------------------------

    def snapshot(self, job_id: int, retry_at: float | None = None) -> JobSnapshot | None:
        with session_scope(self.engine) as session:
            row = get_job(session, job_id)
            if row is None:
                return None
            view = replace(_job_view(row), cost_usd=job_spend(session, job_id))
            attempt, others_live = _attempt_view(session, row)
        now_job = self.job_clock(row.clock).now()
        spot_price = limit = None
        if attempt is not None and attempt.target.pricing == "spot":
            spot_price = self._spot_price(attempt.target)
            limit = view.doc.spot_limit(attempt.target)
        return JobSnapshot(
            now=self.clock.now(),
            now_job=now_job,
            job=view,
            attempt=attempt,
            others_live=others_live,
            wanted_mode=self._wanted_mode(view, attempt, now_job),
            spot_price=spot_price,
            spot_limit=limit,
        )

    def _wanted_mode(self, job: JobView, attempt: AttemptView | None, now_job: float) -> str | None:
        """The spot policy's mode now (``use_spot: auto`` with a deadline and an expected run
        time), asked once per policy tick and remembered in between; None otherwise."""
        policy = job.doc.policy
        if policy.use_spot != "auto" or policy.deadline_s is None or not policy.job_s:
            return None
        elapsed = max(0.0, now_job - job.started_at_job)
        tick = int(elapsed // policy.gap_s)
        state = self._policies.get(job.id)
        if state is not None and state.tick == tick:
            return state.mode
        if state is None:
            state = _PolicyState(GpuleasePolicy(_spot_ratio(job.doc)), -1, "spot")
            self._policies[job.id] = state
        obs = Observation(
            tick=tick,
            prev_mode=_previous_mode(attempt),
            spot_available=self._spot_available(job.doc),
            progress=min(job.run_s, policy.job_s),
            elapsed=tick * policy.gap_s,
            pending=policy.changeover_s if _pending_changeover(attempt) else 0.0,
            job=policy.job_s,
            deadline=policy.deadline_s,
            changeover=policy.changeover_s,
            gap=policy.gap_s,
        )
        state.tick, state.mode = tick, _MODES[state.policy.decide(obs)]
        return state.mode

    # ---- bookkeeping ------------------------------------------------------------------------

    def _accrue(self, job_id: int, snap: JobSnapshot) -> bool:
        """Add the attempt's run time since the last mark (job clock) and copy the job's spend
        from the cost ledger (``jobs.cost_usd`` is a cache of the ledger's sum, which the
        cluster loop's accrual writes)."""
        with self._writing() as session:
            row = get_job(session, job_id)
            if row is None:
                return False
            row.cost_usd = job_spend(session, job_id)
            last = row.mark_at_job
            row.mark_at_job = snap.now_job
            attempt = snap.attempt
            if last is None or attempt is None:
                return False
            dt = max(0.0, snap.now_job - last)
            if attempt.status is _C.RUNNING and row.status is JobStatus.RUNNING:
                row.run_s += dt
            return False

    # ---- actions ----------------------------------------------------------------------------

    def _apply(self, snap: JobSnapshot, action: JobAction) -> bool:
        handlers: dict[type, Callable[[JobSnapshot, Any], bool]] = {
            SetJob: self._set_job,
            StartAttempt: self._start_attempt,
            EndAttempt: self._end_attempt,
            RequestStop: self._request_stop,
            Recover: self._recover,
        }
        return handlers[type(action)](snap, action)

    def _set_job(self, snap: JobSnapshot, a: SetJob) -> bool:
        with self._writing() as session:
            row = get_job(session, snap.job.id)
            if row is None:
                return False
            moved = self._move(session, row, a.status, a.reason, snap.now)
            if moved and a.status in FINAL_JOB:
                row.failure, row.pending_stop = a.failure, None
                row.last_error = a.reason if a.status is JobStatus.FAILED else row.last_error
                add_event(row, _event(snap, a.status.value, a.reason))
                self._policies.pop(row.id, None)
        if moved:
            log.info("job %s: %s (%s)", snap.job.name, a.status.value, a.reason)
        return moved

    def _start_attempt(self, snap: JobSnapshot, a: StartAttempt) -> bool:
        job = snap.job
        if job.doc.pool is not None:
            return self._start_on_pool(snap)
        mode = self._mode(snap, a.pricing)
        targets = self._targets(snap, mode)
        if not targets and mode == "spot" and job.doc.policy.use_spot == "auto":
            mode, targets = "on_demand", self._targets(snap, "on_demand")
        if not targets and job.doc.targets(mode):  # all above the price limit: wait for it
            return self._recover(snap, Recover("launch", f"no {mode} offer under the price limit"))
        if not targets:
            return self._set_job(snap, SetJob(JobStatus.FAILED, f"no {mode} offer", "no_offer"))
        attempt = job.attempt + 1
        doc = LaunchDocument(
            run=job.doc.run, plans=tuple(targets), spec=job.doc.spec, task_id=job.doc.task_id,
            checkpoint=job.doc.checkpoint,
        )  # fmt: skip
        with self._writing() as session:
            row = get_job(session, job.id)
            if row is None or row.attempt != job.attempt or row.status is not job.status:
                return False
            cluster, _intent = create_cluster(
                session, name=attempt_name(job.name, job.id, attempt), target=targets[0],
                task=doc.to_json(), owner=self.owner, actor=ACTOR, now=snap.now,
            )  # fmt: skip
            cluster.job_id = row.id
            row.attempt, row.cluster_id, row.pricing = attempt, cluster.id, mode
            why = f"attempt {attempt} on {_where(targets[0])} ({mode})"
            if not self._move(session, row, JobStatus.STARTING, why, snap.now):
                raise LostRace(f"job {job.name} moved under this step")
            add_event(row, _event(snap, "attempt", why, attempt=attempt, where=_where(targets[0])))
        log.info("job %s: %s", job.name, why)
        return True

    def _start_on_pool(self, snap: JobSnapshot) -> bool:
        """A job of a pool (``resources.pool``) takes an idle node of it instead of a new
        attempt cluster (:mod:`~gpulease.controller.pool_jobs`); while none is idle it waits
        RECOVERING — the queue the pool grows by; a pool that is gone fails it."""
        job = snap.job
        with self._writing() as session:
            row = get_job(session, job.id)
            if row is None or row.attempt != job.attempt or row.status is not job.status:
                return False
            taken = take_node(session, job.id, job.doc, now=snap.now, actor=ACTOR,
                              job_name=job.name, billed_at=snap.now_job)  # fmt: skip
            node = taken.cluster
            if node is not None:
                row.attempt, row.cluster_id, row.pricing = job.attempt + 1, node.id, node.pricing
                why = f"attempt {row.attempt} on node {node.name} of pool {job.doc.pool}"
                if not self._move(session, row, JobStatus.STARTING, why, snap.now):
                    raise LostRace(f"job {job.name} moved under this step")
                add_event(row, _event(snap, "attempt", why, attempt=row.attempt, where=node.name))
        if taken.gone is not None:
            return self._set_job(snap, SetJob(JobStatus.FAILED, taken.gone, "no_offer"))
        if node is None:
            if job.status is not JobStatus.PENDING:
                return False  # still queued: nothing to write
            return self._recover(snap, Recover("pool", f"waiting for a node of {job.doc.pool}"))
        log.info("job %s: %s", job.name, why)
        return True

    def _mode(self, snap: JobSnapshot, wanted: str | None) -> str:
        job = snap.job
        policy = job.doc.policy
        if wanted in ("spot", "on_demand"):
            return wanted
        if policy.use_spot == "false" or not job.doc.spot:
            return "on_demand"
        fallback = policy.strategy == "on_demand_fallback" or policy.use_spot == "auto"
        if fallback and job.recoveries > 0 and job.doc.on_demand:
            return "on_demand"
        if policy.use_spot == "auto" and _launch_failures(job) >= 2 and job.doc.on_demand:
            return "on_demand"
        return "spot"

    def _targets(self, snap: JobSnapshot, mode: str) -> list[LaunchTarget]:
        job = snap.job
        last = snap.attempt.target if snap.attempt is not None else None
        blocked = blocked_now(list(job.blocked), snap.now_job)
        price = self._spot_price if mode == "spot" else None
        found = attempt_targets(job.doc, mode, blocked=blocked, last=last, spot_price=price)
        if not found and blocked:  # every zone is cooling down: take one anyway, not nothing
            found = attempt_targets(job.doc, mode, last=last, spot_price=price)
        return found

    def _end_attempt(self, snap: JobSnapshot, a: EndAttempt) -> bool:
        attempt = snap.attempt
        if attempt is None:
            return True
        handed = self._hand_back(snap, attempt.id)
        if handed is not None:
            return handed
        for _ in range(5):  # the cluster loop may move it meanwhile: retry on fresh data
            with self._writing() as session:
                cluster = session.get(Cluster, attempt.id)
                if cluster is None or cluster.status in (_C.TERMINATING, _C.TERMINATED):
                    return True
                if set_status(session, cluster, _C.TERMINATING, actor=ACTOR, reason=a.reason,
                              now=snap.now):  # fmt: skip
                    return True
        return False

    def _hand_back(self, snap: JobSnapshot, cluster_id: int) -> bool | None:
        """A healthy pool node goes back to its pool (:mod:`~gpulease.controller.pool_return`):
        True when given back or its task is being stopped, False to ask again next step, None
        when it is to be torn down (no pool node of the job, or not fit)."""
        with self._writing() as session:
            cluster = session.get(Cluster, cluster_id)
            handback = None if cluster is None else handback_of(session, cluster, snap.job.id)
        if handback is None:
            return None
        outcome = settle(self.agents, handback)
        if outcome is Outcome.UNFIT:
            return None
        if outcome is not Outcome.CLEAN:
            return outcome is Outcome.STOPPING
        why = f"back to pool {snap.job.doc.pool}: job {snap.job.name} ({snap.job.id}) is done"
        with self._writing() as session:
            cluster = session.get(Cluster, cluster_id)
            return cluster is not None and release_node(
                session, cluster, snap.job.id, billed_at=snap.now_job, now=snap.now, actor=ACTOR,
                reason=why,
            )  # fmt: skip

    def _request_stop(self, snap: JobSnapshot, a: RequestStop) -> bool:
        attempt = snap.attempt
        if attempt is None:
            return False
        delivered = 0
        with self._writing() as session:
            refs = [
                NodeRef(n.provider, n.instance_id, n.agent_url)
                for n in list_nodes(session, attempt.id)
                if n.state is NodeState.READY and n.agent_url
            ]
        for ref in refs:
            try:
                self.agents.agent(ref).preempt(snap.job.doc.task_id, self.config.stop_grace_s)
                delivered += 1
            except GpuleaseError as exc:
                log.info(
                    "job %s: stop not delivered to %s: %s", snap.job.name, ref.instance_id, exc
                )
        if not delivered:
            return False
        with self._writing() as session:
            row = get_job(session, snap.job.id)
            if row is None:
                return False
            row.pending_stop = a.why
            add_event(row, _event(snap, f"stop:{a.why}", a.detail, attempt=row.attempt))
        log.info("job %s: asked the task to checkpoint and stop (%s)", snap.job.name, a.detail)
        return True

    def _recover(self, snap: JobSnapshot, a: Recover) -> bool:
        job = snap.job
        policy = job.doc.policy
        with self._writing() as session:
            row = get_job(session, job.id)
            if row is None:
                return False
            failures = _launch_failures(job) + 1 if a.kind == "launch" else 0
            delay = backoff_delay(failures, base=self.config.backoff_base_s,
                                  cap=self.config.backoff_cap_s) if failures else 0.0  # fmt: skip
            if not self._move(session, row, JobStatus.RECOVERING, a.reason, snap.now):
                return False
            if a.kind == "preemption":
                row.recoveries += 1
            elif a.kind == "restart":
                row.restarts += 1
            if a.block and snap.attempt is not None:
                target = snap.attempt.target
                until = snap.now_job + policy.zone_cooldown_s
                entry = {"provider": target.provider, "region": target.region,
                         "zone": target.zone, "until": until}  # fmt: skip
                kept = [dict(b) for b in blocked_now(row.blocked, snap.now_job)]
                row.blocked = [*kept, entry]
            row.pending_stop = None
            row.next_attempt_at = snap.now + delay
            add_event(row, _event(snap, a.kind, a.reason, attempt=row.attempt))
        log.info("job %s: recovering after %s: %s", job.name, a.kind, a.reason)
        return True

    def _move(self, session: Session, row: Job, status: JobStatus, reason: str, now: float) -> bool:
        """A job status change, compare-and-set and guarded by the step's claim."""
        try:
            return set_status(session, row, status, actor=ACTOR, reason=reason, now=now,
                              claim=self._held)  # fmt: skip
        except InvalidTransition as exc:
            log.info("job %s: %s", row.name, exc)
            return False


def _job_view(row: Job) -> JobView:
    return JobView(
        id=row.id,
        name=row.name,
        status=row.status,
        status_changed_at=row.status_changed_at,
        doc=JobDocument.from_json(row.task),
        attempt=row.attempt,
        pricing=row.pricing,
        recoveries=row.recoveries,
        restarts=row.restarts,
        cost_usd=row.cost_usd,
        run_s=row.run_s,
        started_at_job=row.started_at_job,
        next_attempt_at=row.next_attempt_at,
        cancel_requested=row.cancel_requested,
        pending_stop=row.pending_stop,
        blocked=tuple(dict(b) for b in row.blocked),
        events=tuple(dict(e) for e in row.events[-20:]),
    )


def _attempt_view(session: Session, row: Job) -> tuple[AttemptView | None, bool]:
    attempt: AttemptView | None = None
    others_live = False
    for cluster in job_clusters(session, row.id):
        if cluster.id != row.cluster_id:
            others_live |= cluster.status is not _C.TERMINATED
            continue
        states = tuple(n.state for n in list_nodes(session, cluster.id))
        attempt = AttemptView(
            id=cluster.id,
            name=cluster.name,
            status=cluster.status,
            failure=cluster.failure,
            target=current_target(cluster),
            node_states=states,
            reason=_last_reason(session, cluster),
        )
    return attempt, others_live


def _last_reason(session: Session, cluster: Cluster) -> str:
    changes = history(session, cluster)
    return changes[-1].reason if changes else ""


def _previous_mode(attempt: AttemptView | None) -> Mode:
    if attempt is None or attempt.status not in BILLED:
        return Mode.IDLE
    return Mode.SPOT if attempt.target.pricing == "spot" else Mode.ON_DEMAND


def _pending_changeover(attempt: AttemptView | None) -> bool:
    return attempt is not None and attempt.status in BILLED and attempt.status is not _C.RUNNING


def _spot_ratio(doc: JobDocument) -> float:
    """Spot ÷ on-demand price of the job's best offers (the spot policy weighs costs with it)."""
    spot = [t.price_per_hour for t in doc.spot if t.price_per_hour]
    od = doc.on_demand_price
    if not spot or not od:
        return DEFAULT_SPOT_RATIO
    return min(1.0, spot[0] / od)


def _launch_failures(job: JobView) -> int:
    """Attempts in a row, newest first, that failed to launch."""
    count = 0
    for event in reversed(job.events):
        kind = event.get("kind")
        if kind == "launch":
            count += 1
        elif kind in ("preemption", "restart", "migrate", "price"):
            break
    return count


def _where(target: LaunchTarget) -> str:
    return "/".join(str(p) for p in (target.provider, target.region, target.zone) if p)


def _event(snap: JobSnapshot, kind: str, detail: str, **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "at": snap.now, "at_job": snap.now_job, "detail": detail, **extra}
