"""Carries out the actions :func:`~gpulease.controller.decide.decide` chose, in order, for a
cluster this worker has claimed. Every DB write is guarded by the claim (and status writes are
compare-and-set), so a step that lost its claim or raced a user's ``down`` changes nothing; the
step then stops (:class:`~gpulease.state.LostRace`) and the next pass decides again.

States it moves: cluster, node and intent statuses as the actions say; a launch moves the cluster
PENDING → PROVISIONING once the provider accepted it and its nodes are recorded, and a refused
launch fails over (or FAILS) at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from gpulease.clock import Clock
from gpulease.controller import actions as act
from gpulease.controller import failpoints
from gpulease.controller.acceptance import replacement_ranks
from gpulease.controller.acceptance_store import (
    add_replacement_intent,
    keep_runs,
    keep_state,
    keep_state_guarded,
)
from gpulease.controller.ports import AgentConnector, NodeRef
from gpulease.controller.rules import give_up_target
from gpulease.controller.skeleton import StepOutcome
from gpulease.controller.snapshot import Snapshot
from gpulease.errors import GpuleaseError, Permanent, Retryable
from gpulease.providers.base import CapacityError, Instance, LaunchRequest, Provider
from gpulease.providers.base import SupportsStopStart as StopStart
from gpulease.state import (
    Claim,
    ClusterStatus,
    IntentClosed,
    IntentView,
    InvalidTransition,
    LostRace,
    NodeState,
    fail_over,
    get_cluster,
    get_intent,
    record_activity,
    record_exit_code,
    record_heartbeat,
    record_missed_heartbeat,
    session_scope,
    set_status,
    submit_intent,
)
from gpulease.state.models import Node
from gpulease.state.nodes import ensure_node

log = logging.getLogger("gpulease.controller")


class ProviderMissing(Permanent):
    """The cluster names a provider this server has not configured."""


class Applier:
    def __init__(
        self,
        engine: Engine,
        providers: Mapping[str, Provider],
        agents: AgentConnector,
        *,
        claim: Claim,
        actor: str,
        clock: Clock,
        backoff: Callable[[int], float],
    ) -> None:
        self.clock = clock
        self.engine = engine
        self.providers = providers
        self.agents = agents
        self.claim = claim
        self.actor = actor
        self.backoff = backoff
        self.outcome = StepOutcome()
        self._cluster_status: ClusterStatus | None = None

    def apply(self, snap: Snapshot, actions: list[act.Action]) -> StepOutcome:
        """Carry the actions out in order; raises :class:`~gpulease.state.LostRace` when a write
        finds the cluster moved under this step (the skeleton ends the step there)."""
        self._cluster_status = snap.cluster.status  # what this step's cluster writes expect
        for action in actions:
            self._one(snap, action)
        return self.outcome

    # ---- dispatch ---------------------------------------------------------------------------

    def _one(self, snap: Snapshot, action: act.Action) -> None:
        handler = getattr(self, f"_do_{type(action).__name__.lower()}")
        handler(snap, action)

    def _provider(self, name: str) -> Provider:
        provider = self.providers.get(name)
        if provider is None:
            raise ProviderMissing(f"provider {name!r} is not configured on this server")
        return provider

    def _write(self, snap: Snapshot, fn: Callable[[Session, Any], bool | None]) -> None:
        with session_scope(self.engine) as session:
            cluster = get_cluster(session, snap.cluster.id)
            if cluster is None or fn(session, cluster) is False:
                raise LostRace(f"cluster {snap.cluster.name} moved under this step")
        self.outcome.progress = True

    def _set(self, session: Session, entity: Any, status: Any, reason: str, now: float) -> bool:
        """``set_status`` under the claim. The cluster's row is compared with the status this
        step decided from (the user may have moved it meanwhile: then nothing is written);
        nodes and intents, which only the claimed worker writes, with what is loaded."""
        expected = self._cluster_status if isinstance(status, ClusterStatus) else None
        try:
            moved = set_status(session, entity, status, expected=expected, actor=self.actor,
                               reason=reason, now=now, claim=self.claim)  # fmt: skip
        except InvalidTransition as exc:
            raise LostRace(str(exc)) from None
        if moved and isinstance(status, ClusterStatus):
            self._cluster_status = status
        return moved

    # ---- cluster, node and intent rows ------------------------------------------------------

    def _do_setcluster(self, snap: Snapshot, a: act.SetCluster) -> None:
        def write(session: Session, cluster: Any) -> bool:
            moved = self._set(session, cluster, a.status, a.reason, snap.now)
            if moved and a.status is ClusterStatus.FAILED:
                cluster.failure = a.failure
                cluster.task_failure = a.task_failure
            elif moved and a.status is ClusterStatus.SETTING_UP:
                cluster.task_failure = None  # the task runs again
            return moved

        self._write(snap, write)
        log.info("cluster %s: %s (%s)", snap.cluster.name, a.status.value, a.reason)

    def _do_setnode(self, snap: Snapshot, a: act.SetNode) -> None:
        def write(session: Session, _cluster: Any) -> bool:
            node = session.get(Node, a.node_id)
            if node is None or node.state is a.state:
                return True
            return self._set(session, node, a.state, a.reason, snap.now)

        self._write(snap, write)
        if a.state is NodeState.TERMINATED:
            for node in snap.nodes:
                if node.id == a.node_id:
                    self.agents.forget(NodeRef(node.provider, node.instance_id, ""))

    def _do_setintent(self, snap: Snapshot, a: act.SetIntent) -> None:
        def write(session: Session, _cluster: Any) -> bool:
            intent = get_intent(session, a.request_id)
            if intent is None or intent.status is a.status:
                return True
            return self._set(session, intent, a.status, a.reason, snap.now)

        self._write(snap, write)

    def _do_failover(self, snap: Snapshot, a: act.FailOver) -> None:
        def write(session: Session, cluster: Any) -> bool:
            if cluster.status is not self._cluster_status:
                return False
            moved = fail_over(
                session,
                cluster,
                target=a.target,
                error=a.error,
                actor=self.actor,
                now=snap.now,
                claim=self.claim,
            )
            if moved is None:
                return False
            self._cluster_status = ClusterStatus.PROVISIONING
            return True

        self._write(snap, write)
        log.info("cluster %s: failover to %s/%s", snap.cluster.name, a.target.provider,
                 a.target.region)  # fmt: skip

    def _do_replacenodes(self, snap: Snapshot, a: act.ReplaceNodes) -> None:
        def write(session: Session, cluster: Any) -> bool:
            for node_id, why in sorted(a.reasons.items()):
                node = session.get(Node, node_id)
                if node is not None and node.state is not NodeState.TERMINATING:
                    self._set(session, node, NodeState.TERMINATING, why, snap.now)
            if not self._set(session, cluster, ClusterStatus.PROVISIONING, a.reason, snap.now):
                return False
            add_replacement_intent(session, cluster, len(a.reasons), actor=self.actor,
                                   now=snap.now)  # fmt: skip
            keep_state(cluster, a.state, snap.now)
            keep_runs(session, cluster, a.runs)
            return True

        self._write(snap, write)
        log.info("cluster %s: %s", snap.cluster.name, a.reason)

    def _do_recordacceptance(self, snap: Snapshot, a: act.RecordAcceptance) -> None:
        def write(session: Session, cluster: Any) -> bool:
            kept = keep_state_guarded(session, cluster, a.state, expected=self._cluster_status,
                                      claim=self.claim, now=snap.now)  # fmt: skip
            if kept:
                keep_runs(session, cluster, a.runs)
            return kept

        self._write(snap, write)
        log.info("cluster %s: %s", snap.cluster.name, a.reason)

    def _bookkeep(self, snap: Snapshot, fn: Callable[[Session], object]) -> None:
        """A write that is not a status change (heartbeats, exit codes, activity)."""
        with session_scope(self.engine) as session:
            fn(session)

    def _do_heartbeat(self, snap: Snapshot, a: act.Heartbeat) -> None:
        self._bookkeep(snap, lambda s: record_heartbeat(s, a.node_id, now=snap.now))

    def _do_missedheartbeat(self, snap: Snapshot, a: act.MissedHeartbeat) -> None:
        self._bookkeep(snap, lambda s: record_missed_heartbeat(s, a.node_id, now=snap.now))

    def _do_recordexit(self, snap: Snapshot, a: act.RecordExit) -> None:
        self._bookkeep(snap, lambda s: record_exit_code(s, a.node_id, a.exit_code, now=snap.now))

    def _do_recordactivity(self, snap: Snapshot, _a: act.RecordActivity) -> None:
        self._bookkeep(snap, lambda s: record_activity(s, snap.cluster.id, now=snap.now))

    def _do_updatenode(self, snap: Snapshot, a: act.UpdateNode) -> None:
        def write(session: Session, _cluster: Any) -> None:
            node = session.get(Node, a.node_id)
            if node is not None:
                node.agent_url, node.updated_at = a.agent_url, snap.now

        self._write(snap, write)

    # ---- provider side effects --------------------------------------------------------------

    def _do_terminate(self, snap: Snapshot, a: act.Terminate) -> None:
        self._provider_call(
            snap, "terminate", a.provider, lambda p: p.terminate(list(a.instance_ids))
        )

    def _do_stop(self, snap: Snapshot, a: act.Stop) -> None:
        self._provider_call(
            snap, "stop", a.provider, lambda p: _stopper(p).stop(list(a.instance_ids))
        )

    def _do_start(self, snap: Snapshot, a: act.Start) -> None:
        self._provider_call(
            snap, "start", a.provider, lambda p: _stopper(p).start(list(a.instance_ids))
        )

    def _provider_call(
        self, snap: Snapshot, what: str, name: str, call: Callable[[Provider], None]
    ) -> None:
        try:
            call(self._provider(name))
        except GpuleaseError as exc:  # re-issued on a later pass
            log.warning("cluster %s: %s on %s failed: %s", snap.cluster.name, what, name, exc)
            return
        self.outcome.progress = True

    def _do_launch(self, snap: Snapshot, a: act.Launch) -> None:
        try:
            provider = self._provider(snap.cluster.target.provider)
            instances = submit_intent(
                self.engine,
                a.request_id,
                lambda view: _launch(provider, view, snap),
                clock=self.clock,
                actor=self.actor,
            )
        except IntentClosed:
            self.outcome.progress = True  # closed meanwhile: the next pass decides
            return
        except (CapacityError, Permanent) as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.info("cluster %s: launch refused: %s", snap.cluster.name, error)
            self.outcome.progress = True
            for action in give_up_target(snap, error):
                self._one(snap, action)
            return
        except Retryable as exc:
            attempt = max(1, _attempts(snap, a.request_id))
            self.outcome.retry_after = max(exc.delay, self.backoff(attempt))
            log.info("cluster %s: launch will be retried: %s", snap.cluster.name, exc)
            return
        self._record_nodes(snap, instances)
        failpoints.hit("nodes-recorded")

    def _record_nodes(self, snap: Snapshot, instances: list[Instance]) -> None:
        def write(session: Session, cluster: Any) -> bool:
            ranks = replacement_ranks(snap, [i.id for i in instances])
            for instance in instances:
                node = ensure_node(
                    session,
                    cluster,
                    instance_id=instance.id,
                    node_rank=ranks.get(instance.id, instance.node_rank),
                    actor=self.actor,
                    now=snap.now,
                    provider=instance.provider,
                    agent_url=instance.agent_url,
                )
                if node.agent_token_hash is None:
                    node.agent_token_hash = self.agents.token_hash(instance.provider, instance.id)
            if self._cluster_status is ClusterStatus.PENDING:  # the nodes stay recorded even
                reason = f"launch accepted: {len(instances)} node(s)"  # if a user moved it
                self._set(session, cluster, ClusterStatus.PROVISIONING, reason, snap.now)
            return True

        self._write(snap, write)

    # ---- agents -----------------------------------------------------------------------------

    def _node_ref(self, snap: Snapshot, node_id: int) -> NodeRef | None:
        for node in snap.nodes:
            if node.id == node_id:
                listed = (snap.instances or {}).get(node.instance_id)
                url = (listed.agent_url if listed else None) or node.agent_url
                return NodeRef(node.provider, node.instance_id, url) if url else None
        return None

    def _do_submittask(self, snap: Snapshot, a: act.SubmitTask) -> None:
        ref = self._node_ref(snap, a.node_id)
        if ref is None:
            return
        try:
            self.agents.agent(ref).submit(a.task)
        except Retryable as exc:
            log.info(
                "cluster %s: submit to %s deferred: %s", snap.cluster.name, ref.instance_id, exc
            )
            return
        except Permanent as exc:
            reason = f"the node refused the task: {exc}"
            self._do_setcluster(snap, act.SetCluster(ClusterStatus.FAILED, reason, "task"))
            return
        self.outcome.progress = True
        failpoints.hit("task-submitted")

    def _do_canceltask(self, snap: Snapshot, a: act.CancelTask) -> None:
        ref = self._node_ref(snap, a.node_id)
        if ref is None:
            return
        try:
            self.agents.agent(ref).cancel(snap.cluster.task_id)
        except GpuleaseError as exc:
            log.info("cluster %s: cancel on %s failed: %s", snap.cluster.name, ref.instance_id, exc)


def _launch(provider: Provider, view: IntentView, snap: Snapshot) -> list[Instance]:
    failpoints.hit("intent-committed")
    target = snap.cluster.target
    run = snap.cluster.document.run
    request = LaunchRequest(
        request_id=view.request_id,
        cluster=view.cluster_name,
        owner=view.owner,
        num_nodes=view.num_nodes,
        region=view.region,
        zone=view.zone,
        instance_type=view.instance_type,
        accelerator=target.accelerator,
        gpus_per_node=target.gpus_per_node,
        spot=view.pricing == "spot",
        provider_config=dict(run.provider_config),
        disk_gb=run.disk_gb,
        disk_tier=run.disk_tier,
        image=run.image,
    )
    instances = provider.launch(request)
    failpoints.hit("provider-launched")
    return instances


def _attempts(snap: Snapshot, request_id: str) -> int:
    return next((i.attempt for i in snap.intents if i.request_id == request_id), 1) + 1


def _stopper(provider: Provider) -> StopStart:
    if not isinstance(provider, StopStart):
        raise ProviderMissing(f"provider {provider.name!r} cannot stop or start instances")
    return provider
