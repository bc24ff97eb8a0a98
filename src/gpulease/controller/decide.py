"""The reconciler's brain: one pure function from a :class:`Snapshot` to the actions of one
step (Ray autoscaler v2 style), testable without a cloud, a DB or processes.

:func:`decide` first applies the timeout of the cluster's transient status (the exits are those
of ``gpulease.state.TRANSIENT_TIMEOUTS``), then the rules of its status:

=============  =========================================  ======================================
status         rules                                      timeout exit
=============  =========================================  ======================================
PENDING        :func:`provisioning.pending`               FAILED
PROVISIONING   :func:`provisioning.provisioning`          failover to the next plan, or FAILED
SETTING_UP     :func:`running.setting_up`                 FAILED
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

from gpulease.controller import lifecycle, provisioning, running
from gpulease.controller.actions import Action, SetCluster
from gpulease.controller.rules import ReconcileConfig, confirm_terminated
from gpulease.controller.snapshot import Snapshot
from gpulease.state import ClusterStatus
from gpulease.state.machines import timeout_exit

_S = ClusterStatus
Rule = Callable[[Snapshot, ReconcileConfig], list[Action]]

_RULES: dict[ClusterStatus, Rule] = {
    _S.PENDING: lambda s, _c: provisioning.pending(s),
    _S.PROVISIONING: lambda s, _c: provisioning.provisioning(s),
    _S.SETTING_UP: running.setting_up,
    _S.RUNNING: running.running,
    _S.SUCCEEDED: lambda s, _c: lifecycle.resting(s),
    _S.FAILED: lambda s, _c: lifecycle.resting(s),
    _S.STOPPING: lambda s, _c: lifecycle.stopping(s),
    _S.STARTING: lambda s, _c: lifecycle.starting(s),
    _S.TERMINATING: lambda s, _c: lifecycle.terminating(s),
}

_TIMEOUTS: dict[ClusterStatus, Callable[[Snapshot], list[Action]]] = {
    _S.PENDING: provisioning.pending_timed_out,
    _S.PROVISIONING: provisioning.provisioning_timed_out,
    _S.SETTING_UP: running.setting_up_timed_out,
    _S.STOPPING: lambda s: [
        SetCluster(_S.FAILED, "timed out: the provider did not stop it", "infra")
    ],
    _S.STARTING: lambda s: [
        SetCluster(_S.FAILED, "timed out: the provider did not start it", "infra")
    ],
    _S.TERMINATING: lifecycle.terminating_timed_out,
}


def decide(snap: Snapshot, config: ReconcileConfig | None = None) -> list[Action]:
    """The actions of one reconcile step for the snapshot's cluster (possibly none)."""
    config = config or ReconcileConfig()
    status = snap.cluster.status
    cleanup = confirm_terminated(snap) if status is not _S.TERMINATING else []
    if timeout_exit(status, snap.cluster.status_changed_at, snap.now) is not None:
        return cleanup + _TIMEOUTS[status](snap)
    rule = _RULES.get(status)
    return cleanup + (rule(snap, config) if rule else [])
