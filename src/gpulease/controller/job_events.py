"""Provider events for the managed-jobs and services loops: a preemption notice goes to the
node's agent (the task gets SIGTERM, checkpoints and exits 75; the agent uploads the checkpoint),
a preemption marks the node PREEMPTED (the jobs loop then recovers the job). A service replica's
node is marked PREEMPTED on the notice itself and its agent is not told: the replica keeps
serving its requests in flight while the services loop drains it from the load balancer and
launches its replacement (:mod:`~gpulease.controller.service_loop`). Each provider is polled at
most every ``events_every_s``; a provider that does not answer is asked again next time (events
are data, never raised). States moved: nodes → PREEMPTED.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import replace

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from gpulease.clock import Clock
from gpulease.controller.document import cluster_task_id
from gpulease.controller.ports import AgentConnector, NodeRef
from gpulease.errors import GpuleaseError
from gpulease.providers.base import EventKind, Provider, ProviderEvent
from gpulease.state import NodeState, session_scope, set_status
from gpulease.state.machines import allowed
from gpulease.state.models import Node

log = logging.getLogger("gpulease.controller.jobs")

ACTOR = "jobs"
_RELAYED = (EventKind.PREEMPTION_NOTICE, EventKind.PREEMPTED)


class EventRelay:
    def __init__(
        self,
        engine: Engine,
        providers: Mapping[str, Provider],
        agents: AgentConnector,
        *,
        clock: Clock,
        grace_s: float,
    ) -> None:
        self.engine = engine
        self.providers = providers
        self.agents = agents
        self.clock = clock
        self.grace_s = grace_s
        self._due: dict[str, float] = {}  # provider → monotonic time of its next poll

    def relay(self) -> bool:
        """Poll every provider that is due; True when an event changed something."""
        progress = False
        now = time.monotonic()
        for name, provider in sorted(self.providers.items()):
            if now < self._due.get(name, 0.0):
                continue
            self._due[name] = now + provider.events_every_s
            try:
                events = provider.poll_events()
            except GpuleaseError as exc:
                log.info("provider %s: no events: %s", name, exc)
                continue
            for event in events:
                progress |= self._relay(name, event)
        return progress

    def _relay(self, provider: str, event: ProviderEvent) -> bool:
        if event.instance_id is None or event.kind not in _RELAYED:
            return False
        with session_scope(self.engine) as session:
            node = session.scalars(
                select(Node).where(Node.provider == provider, Node.instance_id == event.instance_id)
            ).first()
            if node is None:
                return False
            cluster = node.cluster
            task_id = cluster_task_id(cluster.name, cluster.id, cluster.task)
            ref = NodeRef(node.provider, node.instance_id, node.agent_url or "")
            if event.kind is EventKind.PREEMPTED:
                return _mark_preempted(session, node, event, self.clock.now())
            if cluster.service_id is not None:  # a replica: drained by the services loop
                noticed = replace(event, detail=f"preemption notice: {event.detail or 'soon'}")
                return _mark_preempted(session, node, noticed, self.clock.now())
        if ref.agent_url:
            try:
                self.agents.agent(ref).preempt(task_id, self.grace_s)
            except GpuleaseError as exc:
                log.info("notice not delivered to %s: %s", ref.instance_id, exc)
                return False
        log.info("preemption notice relayed to %s (%s)", ref.instance_id, event.detail)
        return True


def _mark_preempted(session: Session, node: Node, event: ProviderEvent, now: float) -> bool:
    if not allowed(node.state, NodeState.PREEMPTED):
        return False
    reason = event.detail or "the provider took it back"
    return set_status(session, node, NodeState.PREEMPTED, actor=ACTOR, reason=reason, now=now)
