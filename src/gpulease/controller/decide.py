"""The reconciler's brain: one pure function from a :class:`Snapshot` to the actions of one
step (Ray autoscaler v2 style), testable without a cloud, a DB or processes.

:func:`decide` first enforces the timeouts of ``gpulease.state.TRANSIENT_TIMEOUTS``
(:mod:`~gpulease.controller.timeouts`: the cluster's status, then its nodes' and open launch
intents' — a step that times something out does only that), then applies the rules of the
cluster's status:

=============  =========================================  ======================================
status         rules                                      timeout exit (from the table)
=============  =========================================  ======================================
PENDING        :func:`provisioning.pending`               FAILED
PROVISIONING   :func:`provisioning.provisioning`          failover to the next plan, or FAILED
SETTING_UP     :func:`acceptance.accepting` (while the    FAILED
               nodes are benched), :func:`running.setting_up`
RUNNING        :func:`running.running`                    —
SUCCEEDED      :func:`lifecycle.resting` (autostop)       —
FAILED         :func:`lifecycle.resting` (autostop)       —
STOPPING       :func:`lifecycle.stopping`                 FAILED
STOPPED        —                                          —
STARTING       :func:`lifecycle.starting`                 FAILED
TERMINATING    :func:`lifecycle.terminating`              TERMINATING (terminate re-issued)
=============  =========================================  ======================================

Outside TERMINATING, nodes left TERMINATING (by a failover or a lost node) are confirmed gone or
terminated again on every pass.
"""

from __future__ import annotations

from collections.abc import Callable

from gpulease.controller import acceptance, lifecycle, provisioning, running
from gpulease.controller.actions import Action
from gpulease.controller.rules import ReconcileConfig, confirm_terminated
from gpulease.controller.snapshot import Snapshot
from gpulease.controller.timeouts import (
    cluster_timed_out,
    intent_timeouts,
    lost_node_actions,
    node_timeouts,
)
from gpulease.state import ClusterStatus

_S = ClusterStatus
Rule = Callable[[Snapshot, ReconcileConfig], list[Action]]

_RULES: dict[ClusterStatus, Rule] = {
    _S.PENDING: lambda s, _c: provisioning.pending(s),
    _S.PROVISIONING: lambda s, _c: provisioning.provisioning(s),
    _S.SETTING_UP: acceptance.setting_up,
    _S.RUNNING: running.running,
    _S.SUCCEEDED: lambda s, _c: lifecycle.resting(s),
    _S.FAILED: lambda s, _c: lifecycle.resting(s),
    _S.STOPPING: lambda s, _c: lifecycle.stopping(s),
    _S.STARTING: lambda s, _c: lifecycle.starting(s),
    _S.TERMINATING: lambda s, _c: lifecycle.terminating(s),
}


def decide(snap: Snapshot, config: ReconcileConfig | None = None) -> list[Action]:
    """The actions of one reconcile step for the snapshot's cluster (possibly none)."""
    config = config or ReconcileConfig()
    status = snap.cluster.status
    cleanup = confirm_terminated(snap) if status is not _S.TERMINATING else []
    timed_out = cluster_timed_out(snap)
    if timed_out is not None:
        return cleanup + timed_out
    expired_nodes, lost = node_timeouts(snap)
    expired = expired_nodes + intent_timeouts(snap)
    if expired:
        reaction = lost_node_actions(snap, lost, running.fail_running) if lost else []
        return cleanup + expired + reaction
    rule = _RULES.get(status)
    return cleanup + (rule(snap, config) if rule else [])
