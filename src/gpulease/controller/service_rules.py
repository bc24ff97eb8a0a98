"""The services loop's brain: one pure function from a :class:`ServiceSnap` to the actions of one
step — replicas launched, admitted to the load balancer, drained, terminated and replaced —
testable in virtual time without a DB, a proxy or processes. The autoscaler's decision comes in
the snapshot (:class:`ScaleInput`: the loop asked ``serve.autoscale.decide`` with the load
balancer's samples); this function only carries the count out.

How a service moves (``gpulease.state.ServiceStatus``):

==============  ==========================================================================
status          rules
==============  ==========================================================================
PENDING         launch the first replicas → STARTING
STARTING        a replica answers its readiness probe → READY
READY           no ready replica left while some are wanted → STARTING
UPDATING        (``serve update``: version + 1) new-version replicas start; old ones drain
                only while the ready count stays at the target → READY when none is left
FAILED          ``FAIL_AFTER`` replicas in a row failed before any became ready: nothing
                more is launched until ``serve update``
SHUTTING_DOWN   (``serve down``) drain every replica, terminate it once drained (or after
                ``DRAIN_TIMEOUT_S``); every replica cluster TERMINATED → DOWN, endpoint closed
==============  ==========================================================================

A replica is *broken* when its cluster FAILED or ended or a node of it was lost (terminated at
once), a node of it got a preemption notice or was preempted (``preempted_at``: drained at once
while it still serves — its requests in flight finish on it — and terminated once drained, so it
is billed no longer than it serves; terminated at once when already gone), or it failed its
readiness probe ``PROBE_FAILURES`` times in a row after the probe's initial delay (drained, then
terminated); either way it is replaced at once. A draining replica whose cluster ends is
terminated at once.

The spot hold: a spot replica's preemption holds spot for ``SPOT_HOLD_S`` from the notice
(:func:`spot_hold`); replacements and new replicas go on-demand while it lasts or while the
provider says spot is unavailable. The hold is kept in the service's autoscale memory
(``spot_unavailable_until``, :class:`HoldSpot`), so it outlives the replica and a restart.
Scale-down and rolling updates always drain before they terminate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from gpulease.controller.service_document import ServiceSettings
from gpulease.state import ClusterStatus, ServiceStatus

_C = ClusterStatus
_S = ServiceStatus
PROBE_FAILURES = 3  # failed probes in a row (after the initial delay) that retire a replica
FAIL_AFTER = 3  # replicas in a row broken before any became ready: the service FAILED
DRAIN_TIMEOUT_S = 120.0  # a draining replica is terminated after this even with requests left
SPOT_HOLD_S = 600.0  # after a spot replica's preemption (notice), replacements go on-demand
GONE = frozenset({_C.TERMINATING, _C.TERMINATED})
ENDED = frozenset({_C.SUCCEEDED, _C.FAILED, _C.STOPPING, _C.STOPPED})


@dataclass(frozen=True, slots=True)
class ReplicaSnap:
    """One replica cluster as the loop sees it this pass."""

    id: int  # its cluster id (the load balancer's backend id)
    index: int  # 1, 2, ... per service (``serve logs --replica I``)
    version: int  # the service version it runs
    status: ClusterStatus
    spot: bool
    url: str | None = None  # http://host:port once its node is up
    running_since: float | None = None  # when its cluster became RUNNING
    node_lost: bool = False  # a node LOST (its agent stopped answering)
    preempted_at: float | None = None  # when a node of it got its notice or was preempted
    ready: bool = False  # its last readiness probe answered 2xx
    probe_failures: int = 0  # failed probes in a row after the initial delay
    retiring: str | None = None  # why it is leaving (draining), None while it serves
    drain_started_at: float | None = None
    drained: bool = False  # nothing in flight any more

    @property
    def live(self) -> bool:
        return self.status not in GONE


@dataclass(frozen=True, slots=True)
class ScaleInput:
    """The autoscaler's decision this pass: the replicas wanted, why, which to remove first,
    and its memory to keep (None: unchanged)."""

    desired: int
    reason: str
    remove: tuple[int, ...] = ()
    memory: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ServiceSnap:
    now: float
    id: int
    name: str
    status: ServiceStatus
    version: int
    desired: int  # services.desired_replicas
    settings: ServiceSettings
    replicas: tuple[ReplicaSnap, ...] = ()
    backends: frozenset[int] = frozenset()  # the replicas the load balancer has now
    scale: ScaleInput | None = None
    spot_available: bool = True  # the provider's word (the hold is applied here)
    spot_held_until: float | None = None  # the hold kept in the service's memory
    failures_in_a_row: int = 0


@dataclass(frozen=True, slots=True)
class SetService:
    status: ServiceStatus
    reason: str


@dataclass(frozen=True, slots=True)
class RecordScale:
    desired: int
    reason: str
    memory: dict[str, Any] | None = None
    changed: bool = True  # desired changed: append to the decisions history


@dataclass(frozen=True, slots=True)
class Launch:
    spot: bool
    reason: str


@dataclass(frozen=True, slots=True)
class Retire:
    """Drain the replica (no new requests; in-flight ones finish) before it is terminated."""

    replica: int
    reason: str
    failed: bool = False  # retired for failing (counts toward FAILED)


@dataclass(frozen=True, slots=True)
class Terminate:
    replica: int
    reason: str
    failed: bool = False


@dataclass(frozen=True, slots=True)
class HoldSpot:
    """Keep ``spot_unavailable_until`` at ``until`` (or later) in the service's memory."""

    until: float
    reason: str


@dataclass(frozen=True, slots=True)
class SetBackends:
    replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CloseEndpoint:
    pass


ServiceAction: TypeAlias = (
    SetService | RecordScale | HoldSpot | Launch | Retire | Terminate | SetBackends | CloseEndpoint
)


@dataclass
class _Plan:
    actions: list[ServiceAction] = field(default_factory=list)
    leaving: set[int] = field(default_factory=set)  # retired or terminated this pass


def decide_service(snap: ServiceSnap) -> list[ServiceAction]:
    """The actions of one step (see the module's table)."""
    if snap.status is _S.DOWN:
        return []
    if snap.status is _S.SHUTTING_DOWN:
        return _teardown(snap)
    plan = _Plan()
    target = _target(snap, plan)
    held = _hold(snap, plan)
    _finish_drains(snap, plan)
    _retire_broken(snap, plan)
    current = _serving(snap, plan, current=True)
    _scale_down(snap, plan, current, target)
    current = _serving(snap, plan, current=True)
    failed = snap.status is _S.FAILED or snap.failures_in_a_row >= FAIL_AFTER
    if not failed:
        _launch(snap, plan, current, target, spot_ok=snap.spot_available and held is None)
    _roll(snap, plan, target)
    _backends(snap, plan)
    _status(snap, plan, failed, target)
    return plan.actions


def _target(snap: ServiceSnap, plan: _Plan) -> int:
    if snap.scale is None:
        return snap.settings.clamp(snap.desired)
    desired = snap.settings.clamp(snap.scale.desired)
    changed = desired != snap.desired
    if changed or snap.scale.memory is not None:
        plan.actions.append(RecordScale(desired, snap.scale.reason, snap.scale.memory, changed))
    return desired


def spot_hold(
    now: float, replicas: Sequence[ReplicaSnap], held_until: float | None
) -> float | None:
    """Until when spot is held (None: not held): ``SPOT_HOLD_S`` after the latest preemption
    (notice) of a spot replica, or the hold kept in the memory, whichever ends later."""
    marks = [r.preempted_at for r in replicas if r.spot and r.preempted_at is not None]
    until = max([*(m + SPOT_HOLD_S for m in marks), held_until or now])
    return until if until > now else None


def _hold(snap: ServiceSnap, plan: _Plan) -> float | None:
    until = spot_hold(snap.now, snap.replicas, snap.spot_held_until)
    if until is not None and (snap.spot_held_until is None or until > snap.spot_held_until):
        lost = [r.index for r in snap.replicas if r.spot and r.preempted_at is not None]
        why = f"spot replica {max(lost)} preempted: replacements on-demand until {until:.0f}"
        plan.actions.append(HoldSpot(until, why))
    return until


def _teardown(snap: ServiceSnap) -> list[ServiceAction]:
    plan = _Plan()
    _finish_drains(snap, plan)
    for r in snap.replicas:
        if r.live and r.retiring is None:
            if r.id in snap.backends and r.status is _C.RUNNING:
                plan.actions.append(Retire(r.id, "serve down"))
            else:
                plan.actions.append(Terminate(r.id, "serve down"))
            plan.leaving.add(r.id)
    _backends(snap, plan)
    if all(r.status is _C.TERMINATED for r in snap.replicas):
        plan.actions += [CloseEndpoint(), SetService(_S.DOWN, "every replica terminated")]
    return plan.actions


def _finish_drains(snap: ServiceSnap, plan: _Plan) -> None:
    for r in snap.replicas:
        if not r.live or r.retiring is None:
            continue
        started = r.drain_started_at if r.drain_started_at is not None else snap.now
        timed_out = snap.now - started >= DRAIN_TIMEOUT_S
        if r.status in ENDED or r.node_lost:
            why = f"{r.retiring}: its cluster is {r.status.value}"
        elif r.id not in snap.backends or r.drained:
            why = f"{r.retiring}: drained"
        elif timed_out:
            why = f"{r.retiring}: drain timed out"
        else:
            continue
        plan.actions.append(Terminate(r.id, why))
        plan.leaving.add(r.id)


def _broken(r: ReplicaSnap) -> tuple[str, bool, bool] | None:
    """Why the replica is broken, whether it must go at once (no drain) and whether it counts
    as a failure (toward ``FAIL_AFTER``; a preemption does not)."""
    if r.node_lost:
        return "its node was lost", True, True
    if r.preempted_at is not None:
        gone = r.status is not _C.RUNNING or r.url is None
        return "its node was preempted" if gone else "a preemption notice", gone, False
    if r.status in ENDED:
        return f"its cluster is {r.status.value}", True, True
    if r.probe_failures >= PROBE_FAILURES:
        return f"failed its readiness probe {r.probe_failures} times", False, True
    return None


def _retire_broken(snap: ServiceSnap, plan: _Plan) -> None:
    for r in snap.replicas:
        if not r.live or r.retiring is not None or r.id in plan.leaving:
            continue
        broken = _broken(r)
        if broken is None:
            continue
        why, at_once, failed = broken
        if at_once or r.id not in snap.backends:
            plan.actions.append(Terminate(r.id, f"replaced: {why}", failed=failed))
        else:
            plan.actions.append(Retire(r.id, f"replaced: {why}", failed=failed))
        plan.leaving.add(r.id)


def _serving(snap: ServiceSnap, plan: _Plan, *, current: bool) -> list[ReplicaSnap]:
    """Live replicas that stay (not retiring, not leaving) of the current version (or older)."""
    return [
        r
        for r in snap.replicas
        if r.live
        and r.retiring is None
        and r.id not in plan.leaving
        and (r.version == snap.version) is current
    ]


def _scale_down(snap: ServiceSnap, plan: _Plan, current: list[ReplicaSnap], target: int) -> None:
    excess = len(current) - target
    if excess <= 0:
        return
    first = set(snap.scale.remove) if snap.scale is not None else set()

    def order(r: ReplicaSnap) -> tuple[bool, bool, bool, int]:  # preferred victims first
        return (r.id not in first, r.ready, not r.spot, -r.id)

    for r in sorted(current, key=order)[:excess]:
        if r.id in snap.backends:
            plan.actions.append(Retire(r.id, f"scale down to {target}"))
        else:
            plan.actions.append(Terminate(r.id, f"scale down to {target}"))
        plan.leaving.add(r.id)


def _launch(
    snap: ServiceSnap, plan: _Plan, current: list[ReplicaSnap], target: int, *, spot_ok: bool
) -> None:
    missing = target - len(current)
    if missing <= 0:
        return
    _on_demand, want_spot = snap.settings.mix(target, spot_available=spot_ok)
    spot_now = sum(1 for r in current if r.spot)
    spot = max(0, min(missing, want_spot - spot_now))
    why = f"{len(current)} of {target} replicas (version {snap.version})"
    plan.actions += [Launch(False, why)] * (missing - spot) + [Launch(True, why)] * spot


def _roll(snap: ServiceSnap, plan: _Plan, target: int) -> None:
    """Old-version replicas leave only while the ready ones stay at the target (or at what was
    ready before): never fewer ready replicas than before the update."""
    old = _serving(snap, plan, current=False)
    if not old:
        return
    ready_new = sum(1 for r in _serving(snap, plan, current=True) if r.ready)
    ready_old = [r for r in old if r.ready]
    may_go = max(0, ready_new + len(ready_old) - max(target, len(ready_old)))
    for r in old:
        if not r.ready:
            plan.actions.append(Terminate(r.id, f"rolling update to version {snap.version}"))
            plan.leaving.add(r.id)
    for r in sorted(ready_old, key=lambda r: r.id)[:may_go]:
        plan.actions.append(Retire(r.id, f"rolling update to version {snap.version}"))
        plan.leaving.add(r.id)


def _backends(snap: ServiceSnap, plan: _Plan) -> None:
    """Ready replicas take requests; draining ones stay known to the load balancer (it sends
    them nothing new) until they are terminated."""
    terminated = {a.replica for a in plan.actions if isinstance(a, Terminate)}
    wanted = set()
    for r in snap.replicas:
        if not r.live or r.id in terminated or r.url is None:
            continue
        draining = r.retiring is not None or r.id in plan.leaving
        if (draining and r.id in snap.backends) or (r.ready and r.status is _C.RUNNING):
            wanted.add(r.id)
    if wanted != set(snap.backends):
        plan.actions.append(SetBackends(tuple(sorted(wanted))))


def _status(snap: ServiceSnap, plan: _Plan, failed: bool, target: int) -> None:
    serving = [r for r in snap.replicas if r.live and r.id not in plan.leaving]
    ready = any(r.ready and r.status is _C.RUNNING for r in serving)
    old = any(r.live and r.version != snap.version for r in snap.replicas)
    status = snap.status
    new: ServiceStatus | None = None
    if failed and not ready and status is not _S.FAILED:
        new, why = _S.FAILED, f"{snap.failures_in_a_row} replicas failed before any was ready"
    elif status is _S.FAILED:
        return
    elif status is _S.PENDING:
        new, why = _S.STARTING, "launching replicas"
    elif old and status is not _S.UPDATING:
        new, why = _S.UPDATING, f"rolling update to version {snap.version}"
    elif not old and status in (_S.UPDATING, _S.STARTING) and ready:
        new, why = _S.READY, "a replica is ready"
    elif status is _S.STARTING and target == 0 and not serving:
        new, why = _S.READY, "scaled to zero: no replica wanted"
    elif status is _S.READY and not ready and (target > 0 or serving):
        new, why = _S.STARTING, "no ready replica left"
    elif status is _S.UPDATING and not old:
        new, why = _S.STARTING, f"version {snap.version}: no replica ready yet"
    if new is not None and new is not status:
        plan.actions.append(SetService(new, why))
