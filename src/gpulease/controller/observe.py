"""Builds a :class:`Snapshot` of one cluster: its rows (read in a short transaction; for a
running cluster with autostop's load rule also when its GPU telemetry was last seen), the
instances its providers list by tag (asked only in statuses that need them), and one poll of each
node's agent (only while the cluster provisions, sets up, runs or starts). Moves no states.

Nothing here raises for a provider or agent that does not answer: an unanswered provider leaves
``instances`` None (nothing is concluded this pass), an unanswered agent is UNKNOWN.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from gpulease.controller.acceptance import pending_task_id
from gpulease.controller.acceptance_observe import accept_views, history_figures
from gpulease.controller.ports import AgentConnector, AgentReport, Liveness, NodeRef
from gpulease.controller.snapshot import AcceptView, ClusterView, IntentView, NodeView, Snapshot
from gpulease.errors import GpuleaseError
from gpulease.providers.base import (
    TAG_CLUSTER,
    TAG_OWNER,
    Instance,
    Provider,
    SupportsStopStart,
)
from gpulease.state import ClusterStatus, NodeState, get_cluster, list_nodes, session_scope
from gpulease.state.models import LaunchIntent, TelemetryPoint

log = logging.getLogger("gpulease.controller")

_S = ClusterStatus
_LIST_ALWAYS = frozenset({_S.PROVISIONING, _S.SETTING_UP, _S.STOPPING, _S.STARTING, _S.TERMINATING})
_POLL_CLUSTER = frozenset({_S.PROVISIONING, _S.SETTING_UP, _S.RUNNING, _S.STARTING})
_NEWEST_POINTS = 8  # nodes × resolutions looked at for a bucket with GPU samples
_POLL_NODE = frozenset(
    {NodeState.PROVISIONING, NodeState.READY, NodeState.LOST, NodeState.STARTING}
)


def read_views(
    engine: Engine, cluster_id: int
) -> tuple[ClusterView, tuple[NodeView, ...], tuple[IntentView, ...]] | None:
    with session_scope(engine) as session:
        row = get_cluster(session, cluster_id)
        if row is None:
            return None
        intents = sorted(row.intents, key=lambda i: i.id)
        view = ClusterView.of(row)
        if view.status is _S.RUNNING and view.autostop_gpu_below is not None:
            view = replace(view, gpu_seen_at=gpu_seen_at(session, cluster_id))
        return (
            view,
            tuple(NodeView.of(n) for n in list_nodes(session, cluster_id)),
            tuple(IntentView.of(i) for i in intents if isinstance(i, LaunchIntent)),
        )


def gpu_seen_at(session: Session, cluster_id: int) -> float | None:
    """The end of the newest telemetry bucket of the cluster that has GPU samples (what the
    load rule needs to know the GPUs report at all), or None."""
    stmt = (
        select(TelemetryPoint.at, TelemetryPoint.resolution_s, TelemetryPoint.data)
        .where(TelemetryPoint.cluster_id == cluster_id)
        .order_by(TelemetryPoint.at.desc())
        .limit(_NEWEST_POINTS)
    )
    for at, resolution_s, data in session.execute(stmt):
        if isinstance(data, dict) and data.get("gpus"):
            return float(at) + float(resolution_s)
    return None


class Observer:
    def __init__(self, providers: Mapping[str, Provider], agents: AgentConnector) -> None:
        self.providers = providers
        self.agents = agents

    def snapshot(
        self, engine: Engine, cluster_id: int, *, now: float, retry_at: float | None = None
    ) -> Snapshot | None:
        views = read_views(engine, cluster_id)
        if views is None:
            return None
        cluster, nodes, intents = views
        instances = self._instances(cluster, nodes) if _wants_list(cluster, nodes) else None
        provider = self.providers.get(cluster.target.provider)
        polled = self._poll(cluster, nodes, instances)
        accept = self._accept(cluster, nodes, instances, polled)
        return Snapshot(
            now=now,
            cluster=cluster,
            nodes=nodes,
            intents=intents,
            instances=instances,
            agents=polled,
            retry_at=retry_at,
            can_stop=isinstance(provider, SupportsStopStart),
            accept=accept,
            accept_history=_history(engine, cluster) if accept else {},
        )

    def _accept(
        self,
        cluster: ClusterView,
        nodes: tuple[NodeView, ...],
        instances: Mapping[str, Instance] | None,
        polled: Mapping[int, AgentReport],
    ) -> dict[int, AcceptView]:
        """Each node's acceptance bench, while the cluster is being accepted."""
        task_id = pending_task_id(cluster)
        if task_id is None:
            return {}
        ports = []
        for node in nodes:
            listed = (instances or {}).get(node.instance_id)
            url = (listed.agent_url if listed else None) or node.agent_url
            if url and node.id in polled:
                ports.append(
                    (node.id, self.agents.agent(NodeRef(node.provider, node.instance_id, url)))
                )
        return accept_views(ports, task_id, polled)

    def _instances(
        self, cluster: ClusterView, nodes: tuple[NodeView, ...]
    ) -> dict[str, Instance] | None:
        """Every instance tagged with the cluster, on every provider it used; None when one of
        them did not answer or is not configured."""
        names = {cluster.target.provider, *(n.provider for n in nodes)}
        names |= {p.provider for p in cluster.document.plans[: cluster.failovers + 1]}
        tags = {TAG_CLUSTER: cluster.name, TAG_OWNER: cluster.owner}
        found: dict[str, Instance] = {}
        for name in sorted(names):
            provider = self.providers.get(name)
            if provider is None:
                log.warning("cluster %s: provider %r is not configured", cluster.name, name)
                return None
            try:
                listed = provider.list_instances(tags)
            except GpuleaseError as exc:
                log.info("cluster %s: %s did not list instances: %s", cluster.name, name, exc)
                return None
            found.update({i.id: i for i in listed})
        return found

    def _poll(
        self,
        cluster: ClusterView,
        nodes: tuple[NodeView, ...],
        instances: Mapping[str, Instance] | None,
    ) -> dict[int, AgentReport]:
        if cluster.status not in _POLL_CLUSTER:
            return {}
        reports: dict[int, AgentReport] = {}
        for node in nodes:
            if node.state not in _POLL_NODE:
                continue
            listed = (instances or {}).get(node.instance_id)
            url = (listed.agent_url if listed else None) or node.agent_url
            if not url:
                continue
            ref = NodeRef(node.provider, node.instance_id, url)
            try:
                reports[node.id] = self.agents.agent(ref).poll(cluster.task_id)
            except GpuleaseError as exc:
                log.debug("node %s: no answer: %s", node.instance_id, exc)
                reports[node.id] = AgentReport(Liveness.UNKNOWN)
        return reports


def _history(engine: Engine, cluster: ClusterView) -> dict[str, tuple[float, ...]]:
    with session_scope(engine) as session:
        return history_figures(session, cluster)


def _wants_list(cluster: ClusterView, nodes: tuple[NodeView, ...]) -> bool:
    if cluster.status in _LIST_ALWAYS:
        return True
    return any(
        n.state in (NodeState.TERMINATING, NodeState.LOST) or n.missed_heartbeats > 0 for n in nodes
    )
