"""A service's replicas in virtual time for the autoscaler's tests: what the services controller
does with a :class:`ScaleDecision` (launch, boot, drain, retire), reduced to its effect on the
replica states, on a :class:`gpulease.clock.VirtualClock`.

A launched replica is ``provisioning`` for ``provision_s``, ``starting`` for ``start_s``, then
``ready``; a removed one is ``draining`` for ``drain_s`` and then gone; a failed or preempted one
is retired once a decision has seen it. The load is what a test offers each tick.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpulease.clock import VirtualClock
from gpulease.serve.autoscale import (
    AutoscalePolicy,
    LoadSample,
    ReplicaState,
    ReplicaView,
    ScaleDecision,
    ScaleMemory,
    decide,
)

LIVE = ("provisioning", "starting", "ready")


@dataclass
class Replica:
    id: int
    state: ReplicaState
    spot: bool
    since: float


@dataclass
class Fleet:
    policy: AutoscalePolicy
    provision_s: float = 20.0
    start_s: float = 10.0
    drain_s: float = 10.0
    window_s: float = 600.0
    spot_available: bool = True
    clock: VirtualClock = field(default_factory=lambda: VirtualClock(start=0.0))
    replicas: dict[int, Replica] = field(default_factory=dict)
    memory: ScaleMemory = field(default_factory=ScaleMemory)
    samples: list[LoadSample] = field(default_factory=list)
    # (time, target before, decision) of every tick
    decisions: list[tuple[float, int, ScaleDecision]] = field(default_factory=list)
    next_id: int = 1

    @property
    def now(self) -> float:
        return self.clock.now()

    def seed(self, *, on_demand: int = 0, spot: int = 0) -> None:
        """Ready replicas already running, and a memory whose target is their count."""
        for is_spot in [False] * on_demand + [True] * spot:
            self._launch(is_spot, state="ready")
        self.memory = ScaleMemory(target=on_demand + spot)

    def tick(
        self,
        in_flight: float,
        dt: float = 10.0,
        *,
        qps: float | None = None,
        latency_p95_s: float | None = None,
        gpu_utilisation: float | None = None,
    ) -> ScaleDecision:
        """Advance ``dt``, take one sample of the offered load, decide and apply."""
        self.clock.advance(dt)
        self._boot()
        sample = LoadSample(
            at=self.now,
            in_flight=in_flight,
            qps=in_flight * 4 if qps is None else qps,
            latency_p95_s=latency_p95_s,
            gpu_utilisation=gpu_utilisation,
        )
        self.samples.append(sample)
        window = [s for s in self.samples if s.at > self.now - self.window_s]
        views = [ReplicaView(r.id, r.state, r.spot, r.since) for r in self.replicas.values()]
        d = decide(
            self.now, window, views, self.policy, self.memory, spot_available=self.spot_available
        )
        self._apply(d)
        return d

    def run(self, seconds: float, in_flight: float, dt: float = 10.0) -> list[ScaleDecision]:
        return [self.tick(in_flight, dt) for _ in range(round(seconds / dt))]

    def preempt(self, rid: int) -> None:
        self._set(rid, "preempted")

    def fail(self, rid: int) -> None:
        self._set(rid, "failed")

    def count(self, *states: str, spot: bool | None = None) -> int:
        wanted = states or LIVE
        return sum(
            1
            for r in self.replicas.values()
            if r.state in wanted and (spot is None or r.spot == spot)
        )

    def ids(self, *states: str, spot: bool | None = None) -> list[int]:
        wanted = states or LIVE
        return [
            r.id
            for r in self.replicas.values()
            if r.state in wanted and (spot is None or r.spot == spot)
        ]

    def actions(self) -> list[tuple[float, int, int]]:
        """(time, target before, target after) of every decision that changed the target."""
        return [(at, before, d.target) for at, before, d in self.decisions if d.target != before]

    def _apply(self, d: ScaleDecision) -> None:
        before = self.memory.target if self.memory.target is not None else d.target
        self.decisions.append((self.now, before, d))
        for r in list(self.replicas.values()):
            if r.state in ("failed", "preempted"):
                del self.replicas[r.id]  # retired by the controller
        for rid in d.remove:
            assert self.replicas[rid].state in LIVE, (rid, self.replicas[rid])
            self._set(rid, "draining")
        for _ in range(d.add_spot):
            self._launch(True)
        for _ in range(d.add_on_demand):
            self._launch(False)
        self.memory = d.memory

    def _launch(self, spot: bool, state: ReplicaState = "provisioning") -> None:
        self.replicas[self.next_id] = Replica(self.next_id, state, spot, self.now)
        self.next_id += 1

    def _set(self, rid: int, state: ReplicaState) -> None:
        r = self.replicas[rid]
        r.state, r.since = state, self.now

    def _boot(self) -> None:
        for r in list(self.replicas.values()):
            age = self.now - r.since
            if r.state == "provisioning" and age >= self.provision_s:
                self._set(r.id, "starting")
            elif r.state == "starting" and age >= self.start_s:
                self._set(r.id, "ready")
            elif r.state == "draining" and age >= self.drain_s:
                del self.replicas[r.id]
