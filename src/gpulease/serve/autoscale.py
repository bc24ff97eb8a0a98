"""The autoscaler: one pure decision from a service's load samples, its replicas, its policy, the
clock's ``now`` and the memory of the last decision. It owns the service's replica *target* and
the :class:`ScaleMemory` it returns (streak starts, the last action, the spot hold); it moves no
other state: the services controller applies the :class:`ScaleDecision` (launches, drains,
retires) and keeps the memory (``as_dict`` / ``from_dict``) for the next tick.

Rules (docs/serving-autoscale.md):

- **Metric per replica**, one ratio per sample: ``load`` = in-flight ÷ ``target_per_replica`` ÷
  ready replicas; ``qps`` = QPS ÷ target ÷ ready replicas; ``latency_p95`` = p95 seconds ÷ target;
  ``gpu_utilisation`` = % ÷ target. With no ready replica any traffic is an infinite ratio. A
  sample without the metric (no latency yet) neither starts nor breaks a streak, except that an
  idle sample (nothing in flight, no QPS) counts as 0.
- **Up** when every sample for ``up_for_s`` is above ``up_above``: ``up_add`` more, at most
  ``max_replicas``; only once every replica of the target is ready (no second add while the last
  one boots or while lost replicas are being replaced). **Down** when every sample for
  ``down_for_s`` is below ``down_below``: ``down_remove`` fewer, at least ``min_replicas`` (and
  at least 1 while there is traffic), fewer if the load would then be above ``up_above`` (for
  ``load``, ``qps`` and ``gpu_utilisation`` the window's mean ratio × n ÷ (n − k)).
- **Cooldown**: after any scaling action none other for ``cooldown_s``, and a streak counts only
  samples taken after the last action, so the next action is decided on its predecessor's effect.
- **Scale to zero** (``min_replicas == 0``): no traffic at all for ``down_for_s`` → 0. A request
  waiting with no replica (``in_flight > 0`` in the last sample, target 0) → 1 at once, no cooldown.
- **Replacement**: a failed or preempted replica no longer counts; the target stays, so its
  replacement is added at once (no cooldown, not a scaling action). The controller retires it.
  Provisioning and starting replicas count toward the target; draining ones count for nothing.
- **The mix and spot loss**: see :mod:`gpulease.serve.replica_mix`. Spot is not usable while the
  controller says ``spot_available=False`` or within ``spot_retry_s`` of a spot replica's
  preemption (``spot_unavailable_until`` in the memory); then the missing spot replicas are
  added on-demand, and once spot is usable again spot ones are added and the on-demand ones
  above the mix removed when the spot ones are ready.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from gpulease.errors import UserInputError
from gpulease.serve import replica_mix
from gpulease.serve.spec_view import ServiceLike, policy_fields, yaml_field

Metric = Literal["load", "qps", "latency_p95", "gpu_utilisation"]
ReplicaState = Literal["provisioning", "starting", "ready", "draining", "failed", "preempted"]
METRICS: tuple[str, ...] = ("load", "qps", "latency_p95", "gpu_utilisation")
LIVE_STATES = frozenset({"provisioning", "starting", "ready"})
LOST_STATES = frozenset({"failed", "preempted"})


@dataclass(frozen=True)
class LoadSample:
    """One proxy/metrics tick of a service: totals over its replicas at ``at``."""

    at: float
    in_flight: float  # requests in flight, those queued while no replica is ready included
    qps: float
    latency_p95_s: float | None = None
    gpu_utilisation: float | None = None  # percent, mean over the ready replicas


@dataclass(frozen=True)
class ReplicaView:
    """What the autoscaler sees of a replica: its state since ``since`` (clock seconds)."""

    id: int
    state: ReplicaState
    spot: bool
    since: float


@dataclass(frozen=True)
class AutoscalePolicy:
    """The service's scaling rules; see the module docstring. Built by :meth:`from_spec`."""

    min_replicas: int = 1
    max_replicas: int = 1
    metric: Metric = "load"
    target_per_replica: float = 8.0
    up_above: float = 0.8
    up_add: int = 2
    up_for_s: float = 60.0
    down_below: float = 0.3
    down_remove: int = 1
    down_for_s: float = 300.0
    cooldown_s: float = 60.0
    on_demand_base: int = 1
    spot_share: float = 0.0
    spot_retry_s: float = 300.0  # spot counts as unavailable this long after a loss

    def __post_init__(self) -> None:
        problem = _policy_problem(self)
        if problem is not None:
            raise PolicyError(*problem)

    @classmethod
    def from_spec(cls, service: ServiceLike) -> AutoscalePolicy:
        """The policy of a spec's ``service:`` section (``spec.ServiceSpec``); a combination the
        rules cannot run is a :class:`~gpulease.errors.UserInputError` naming the YAML field."""
        try:
            return cls(**policy_fields(service))
        except PolicyError as e:
            raise UserInputError(f"{yaml_field(e.field)}: {e.problem}") from None


class PolicyError(ValueError):
    """An :class:`AutoscalePolicy` the rules cannot run; ``field`` names the policy field."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


def _policy_problem(p: AutoscalePolicy) -> tuple[str, str] | None:
    """The first rule the policy breaks: (its field, what is wrong)."""
    checks = (
        ("min_replicas", p.min_replicas >= 0, "must be at least 0"),
        ("max_replicas", p.max_replicas >= max(p.min_replicas, 1), "must be ≥ min and ≥ 1"),
        ("metric", p.metric in METRICS, f"must be one of {', '.join(METRICS)}"),
        ("target_per_replica", p.target_per_replica > 0, "must be above 0"),
        ("up_add", p.up_add >= 1, "must be at least 1"),
        ("down_remove", p.down_remove >= 1, "must be at least 1"),
        ("down_below", p.down_below < p.up_above, "must be below up.above (or it flaps)"),
        ("up_for_s", p.up_for_s >= 0, "must be at least 0"),
        ("down_for_s", p.down_for_s >= 0, "must be at least 0"),
        ("cooldown_s", p.cooldown_s >= 0, "must be at least 0"),
        ("spot_retry_s", p.spot_retry_s >= 0, "must be at least 0"),
        ("on_demand_base", p.on_demand_base >= 0, "must be at least 0"),
        ("spot_share", 0.0 <= p.spot_share <= 1.0, "must be within 0..1"),
    )
    return next(((name, message) for name, ok, message in checks if not ok), None)


@dataclass(frozen=True)
class ScaleMemory:
    """What one decision leaves to the next (JSON-able). ``target`` is the replica count the
    service should run; ``None`` in a fresh memory (the first decision starts from the live
    replicas, lost ones included, within min..max)."""

    last_action_at: float | None = None
    above_since: float | None = None
    below_since: float | None = None
    spot_unavailable_until: float | None = None
    idle_since: float | None = None
    target: int | None = None

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScaleMemory:
        """The memory ``as_dict`` wrote; keys it does not know are ignored."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = data.get(f.name)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if value is not None and not number:
                raise ValueError(f"scale memory: {f.name} must be a number or null, not {value!r}")
            if f.name == "target" and value is not None:
                if value != int(value) or value < 0:
                    raise ValueError(f"scale memory: target must be a whole number ≥ 0: {value}")
                value = int(value)
            values[f.name] = value
        return cls(**values)


@dataclass(frozen=True)
class ScaleDecision:
    """What to do now: launches of each kind, replicas to drain and remove (ids, in order), why,
    and the memory to pass to the next decision (``memory.target``: the replicas wanted)."""

    add_spot: int
    add_on_demand: int
    remove: tuple[int, ...]
    reason: str
    memory: ScaleMemory

    @property
    def target(self) -> int:
        return self.memory.target or 0


@dataclass(frozen=True)
class _Streaks:
    above_since: float | None
    below_since: float | None
    idle_since: float | None
    last_ratio_at: float | None  # the latest sample that had the metric
    last_at: float | None  # the latest sample
    ratios: tuple[tuple[float, float], ...]  # (at, ratio) of the samples that had the metric


def decide(
    now: float,
    samples: Sequence[LoadSample],
    replicas: Sequence[ReplicaView],
    policy: AutoscalePolicy,
    memory: ScaleMemory,
    *,
    spot_available: bool = True,
) -> ScaleDecision:
    """The autoscaler's decision at ``now``; see the module docstring for the rules."""
    live = [r for r in replicas if r.state in LIVE_STATES]
    lost = sum(1 for r in replicas if r.state in LOST_STATES)
    ready = sum(1 for r in live if r.state == "ready")
    seen = sorted((s for s in samples if s.at <= now), key=lambda s: s.at)
    start = memory.target if memory.target is not None else len(live) + lost
    target = min(policy.max_replicas, max(policy.min_replicas, start))
    streaks = _streaks(seen, memory, policy, ready)
    tick = _Tick(now, target, ready, seen, streaks, memory.last_action_at)
    new_target, why = _scale(tick, policy)
    spot_until = _spot_hold(now, replicas, policy, memory.spot_unavailable_until, spot_available)
    spot_usable = spot_available and spot_until is None
    step = replica_mix.plan(
        new_target, live, policy.on_demand_base, policy.spot_share, spot_usable=spot_usable
    )
    acted = new_target != target
    after = ScaleMemory(
        last_action_at=now if acted else memory.last_action_at,
        above_since=None if acted else streaks.above_since,
        below_since=None if acted else streaks.below_since,
        spot_unavailable_until=spot_until,
        idle_since=None if acted else streaks.idle_since,
        target=new_target,
    )
    reason = "; ".join([why, *_step_notes(step, lost, spot_until)])
    return ScaleDecision(step.add_spot, step.add_on_demand, step.remove, reason, after)


def ratio(sample: LoadSample, policy: AutoscalePolicy, ready: int) -> float | None:
    """The sample's metric per replica ÷ its target (None: the sample lacks the metric)."""
    if policy.metric in ("load", "qps"):
        value = sample.in_flight if policy.metric == "load" else sample.qps
        if ready == 0:
            return math.inf if value > 0 else 0.0
        return value / policy.target_per_replica / ready
    raw = sample.latency_p95_s if policy.metric == "latency_p95" else sample.gpu_utilisation
    if raw is None:
        return 0.0 if _idle(sample) else None
    return raw / policy.target_per_replica


def _idle(sample: LoadSample) -> bool:
    return sample.in_flight <= 0 and sample.qps <= 0


def _streaks(
    seen: Sequence[LoadSample], memory: ScaleMemory, policy: AutoscalePolicy, ready: int
) -> _Streaks:
    """Fold the samples taken after the last action into the memory's streak starts."""
    above, below, idle = memory.above_since, memory.below_since, memory.idle_since
    last_ratio_at = last_at = None
    ratios: list[tuple[float, float]] = []
    after = memory.last_action_at
    for s in seen:
        if after is not None and s.at <= after:
            continue
        last_at = s.at
        idle = (s.at if idle is None else idle) if _idle(s) else None
        r = ratio(s, policy, ready)
        if r is None:
            continue
        ratios.append((s.at, r))
        last_ratio_at = s.at
        above = (s.at if above is None else above) if r > policy.up_above else None
        below = (s.at if below is None else below) if r < policy.down_below else None
    return _Streaks(above, below, idle, last_ratio_at, last_at, tuple(ratios))


def _lasted(since: float | None, until: float | None, span: float) -> bool:
    return since is not None and until is not None and until - since >= span


@dataclass(frozen=True)
class _Tick:
    """What the scaling rules see at one decision."""

    now: float
    target: int
    ready: int
    seen: Sequence[LoadSample]
    streaks: _Streaks
    last_action_at: float | None


def _scale(t: _Tick, p: AutoscalePolicy) -> tuple[int, str]:
    """The new target and why: wake from zero, cooldown, up, to zero, down, or steady."""
    if t.target == 0 and t.seen and t.seen[-1].in_flight > 0:
        return 1, "a request waits with no replica: 0 → 1"
    level = f"{p.metric} {_show(_mean(t.streaks.ratios, None))}"
    if t.last_action_at is not None and t.now < t.last_action_at + p.cooldown_s:
        left = t.last_action_at + p.cooldown_s - t.now
        return t.target, f"cooldown: {left:.0f} s left ({level})"
    return _up(t, p, level) or _down(t, p, level) or (t.target, f"steady at {t.target} ({level})")


def _up(t: _Tick, p: AutoscalePolicy, level: str) -> tuple[int, str] | None:
    st = t.streaks
    if not _lasted(st.above_since, st.last_ratio_at, p.up_for_s) or t.target >= p.max_replicas:
        return None
    level = f"{p.metric} {_show(_mean(st.ratios, st.above_since))}"  # over the stretch above
    if t.ready < t.target:
        return t.target, f"{level} > {p.up_above}: waiting for the replicas to be ready"
    new = min(p.max_replicas, t.target + p.up_add)
    return new, f"scale up: {level} > {p.up_above} for {p.up_for_s:.0f} s: {t.target} → {new}"


def _down(t: _Tick, p: AutoscalePolicy, level: str) -> tuple[int, str] | None:
    st = t.streaks
    if p.min_replicas == 0 and t.target > 0 and _lasted(st.idle_since, st.last_at, p.down_for_s):
        return 0, f"scale to zero: no traffic for {p.down_for_s:.0f} s: {t.target} → 0"
    floor = max(p.min_replicas, 1)
    if not _lasted(st.below_since, st.last_ratio_at, p.down_for_s) or t.target <= floor:
        return None
    below = _mean(st.ratios, st.below_since)  # over the stretch below
    level = f"{p.metric} {_show(below)}"
    k = _down_step(t.target, floor, below, p)
    if k == 0:
        return t.target, f"{level} < {p.down_below}, but one fewer would be above {p.up_above}"
    new = t.target - k
    rule = f"{level} < {p.down_below} for {p.down_for_s:.0f} s"
    return new, f"scale down: {rule}: {t.target} → {new}"


def _mean(ratios: Sequence[tuple[float, float]], since: float | None) -> float | None:
    """The mean ratio of the samples taken from ``since`` on (all when None)."""
    values = [r for at, r in ratios if since is None or at >= since]
    return sum(values) / len(values) if values else None


def _show(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _down_step(target: int, floor: int, mean: float | None, p: AutoscalePolicy) -> int:
    """How many replicas may go: at most ``down_remove`` and down to ``floor``, and for the
    metrics that spread over replicas, not so many that the mean would rise to ``up_above``."""
    k = min(p.down_remove, target - floor)
    if p.metric == "latency_p95" or mean is None:
        return k
    while k > 0 and mean * target / (target - k) >= p.up_above:
        k -= 1
    return k


def _spot_hold(
    now: float,
    replicas: Sequence[ReplicaView],
    p: AutoscalePolicy,
    until: float | None,
    spot_available: bool,
) -> float | None:
    """Until when spot counts as unavailable (None: usable, if the controller says so)."""
    marks = [r.since + p.spot_retry_s for r in replicas if r.spot and r.state == "preempted"]
    if not spot_available:
        marks.append(now + p.spot_retry_s)
    for mark in marks:
        until = mark if until is None else max(until, mark)
    return until if until is not None and until > now else None


def _step_notes(step: replica_mix.Plan, lost: int, spot_until: float | None) -> list[str]:
    notes: list[str] = []
    if lost:
        notes.append(f"{lost} failed or preempted replica(s) to replace")
    if step.spot_instead:
        when = f" until {spot_until:.0f}" if spot_until is not None else ""
        notes.append(f"spot unavailable{when}: {step.spot_instead} on-demand instead")
    if step.add_spot or step.add_on_demand:
        notes.append(f"add {step.add_spot} spot, {step.add_on_demand} on-demand")
    if step.remove:
        notes.append("remove " + ", ".join(map(str, step.remove)))
    return notes
