"""gpulease.controller: the reconcile loops that drive clusters toward the state DB's desired
state (DESIGN 1). Level-triggered: every pass compares the DB with what the providers list and
what the agents answer, and takes one idempotent step per claimed cluster.

Modules (private unless re-exported here):

- ``ports``        what the controller needs from agents (protocols; the server implements them)
- ``document``     the launch document in ``clusters.task``: run spec + ranked plans (failover list)
- ``snapshot``     detached views of one cluster, its instances and agent reports
- ``decide``       snapshot → actions, a pure function; rules in ``provisioning``, ``running``,
                   ``lifecycle`` and ``rules``
- ``actions``      the steps, as data
- ``observe``      builds snapshots (DB, ``list_instances`` by tags, agent polls)
- ``apply``        carries actions out under the cluster's claim
- ``skeleton``     the one reconcile skeleton: claim → snapshot → decide → apply → backoff
- ``reconciler``   the cluster loop on it: due clusters, one step each; stale claims
- ``sweep``        the orphan sweep (this owner's unclaimed instances)
- ``failpoints``   ``GPULEASE_FAILPOINT`` crash points for the crash tests

See docs/controller.md. Imports providers, state (and the base modules), never the agent or the
server; what crosses to the agents is :mod:`gpulease.wire`.
"""

from gpulease.controller.actions import Action
from gpulease.controller.decide import decide
from gpulease.controller.document import LaunchDocument, node_task, task_id_of
from gpulease.controller.ports import (
    AgentConnector,
    AgentPort,
    AgentReport,
    Liveness,
    NodeRef,
)
from gpulease.controller.reconciler import Reconciler
from gpulease.controller.rules import ReconcileConfig
from gpulease.controller.skeleton import LoopSettings, Skeleton, StepOutcome
from gpulease.controller.snapshot import ClusterView, IntentView, NodeView, Snapshot
from gpulease.controller.sweep import find_orphans, sweep_orphans

__all__ = [
    "Action",
    "AgentConnector",
    "AgentPort",
    "AgentReport",
    "ClusterView",
    "IntentView",
    "LaunchDocument",
    "Liveness",
    "LoopSettings",
    "NodeRef",
    "NodeView",
    "ReconcileConfig",
    "Reconciler",
    "Skeleton",
    "Snapshot",
    "StepOutcome",
    "decide",
    "find_orphans",
    "node_task",
    "sweep_orphans",
    "task_id_of",
]
