"""The state machines of the state DB: status enums, their transition tables and their timeouts.

Pure data and pure functions, no database. Owns:

- :class:`ClusterStatus`, :class:`NodeState`, :class:`IntentStatus`, :class:`JobStatus`,
  :class:`ServiceStatus` (services: replicas behind a load balancer), :class:`PoolStatus`
  (pools of nodes for managed jobs) — the status enums;
- ``TRANSITIONS[enum][from]`` — the set of statuses each status may move to (a self-loop is
  allowed only where listed: ``PROVISIONING → PROVISIONING`` is a failover,
  ``TERMINATING → TERMINATING`` a re-issued terminate; ``SUCCEEDED → SETTING_UP`` is an idle
  pool node taking a managed job's task, ``FAILED → SUCCEEDED`` a healthy pool node given back
  idle after its job's task failed or was cancelled: ``controller/pool_jobs.py``);
- ``TRANSIENT_TIMEOUTS[enum][status]`` — how long a transient status may last and where it goes
  then; resting statuses have no entry;
- :func:`check_transition` and :func:`timeout_exit`.

It moves no states itself: :func:`gpulease.state.status.set_status` enforces these tables.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, TypeAlias

from gpulease.errors import Permanent


class _StatusEnum(enum.Enum):
    """Base of the status enums. A plain ``Enum``, not a ``StrEnum``: statuses of different
    machines (``ClusterStatus.FAILED``, ``IntentStatus.FAILED``) must never compare equal or
    collide in a set. ``str()`` gives the stored value."""

    _value_: str

    def __str__(self) -> str:
        return self._value_


class ClusterStatus(_StatusEnum):
    """The desired-state status of a cluster (and of the task it runs)."""

    PENDING = "pending"  # rows written (cluster + launch intent); no provider call confirmed yet
    PROVISIONING = "provisioning"  # launch submitted; waiting for every node to run
    SETTING_UP = "setting_up"  # every node runs; agents run the task's setup
    RUNNING = "running"  # the task runs
    SUCCEEDED = "succeeded"  # the task exited 0; nodes may still be up (autostop / down)
    FAILED = "failed"  # the task or the launch failed; nodes may still be up
    STOPPING = "stopping"  # stop requested (autostop or the user)
    STOPPED = "stopped"  # every node stopped (disks kept)
    STARTING = "starting"  # start requested after STOPPED
    TERMINATING = "terminating"  # terminate requested; waiting for the provider to confirm
    TERMINATED = "terminated"  # the provider confirmed every node gone (final)


class NodeState(_StatusEnum):
    """The state of one node (instance) of a cluster, as the server last established it."""

    PROVISIONING = "provisioning"  # the provider returned the instance; not reachable yet
    SETTING_UP = "setting_up"  # the agent answers; setup runs
    READY = "ready"  # the agent answers and heartbeats (missed < N counts as alive)
    LOST = "lost"  # N heartbeats missed in a row
    PREEMPTED = "preempted"  # the provider took it (spot) or announced it will
    STOPPING = "stopping"
    STOPPED = "stopped"
    STARTING = "starting"
    FAILED = "failed"  # setup failed, or the provider reported it broken
    TERMINATING = "terminating"  # terminate sent; waiting for the provider to confirm
    TERMINATED = "terminated"  # the provider confirmed it gone (final)


class IntentStatus(_StatusEnum):
    """The status of a launch intent: the durable record written before a provider launch."""

    PENDING = "pending"  # written and committed; the provider may or may not have been called
    SUBMITTED = "submitted"  # the provider accepted the launch (idempotent by request id)
    DONE = "done"  # every node of the request was seen running (final)
    FAILED = "failed"  # refused, timed out or superseded by a failover (final)


class JobStatus(_StatusEnum):
    """The status of a managed job: a task that gpulease keeps running, through preemptions and
    failures, on a sequence of attempt clusters until it ends."""

    PENDING = "pending"  # written; no attempt cluster yet
    STARTING = "starting"  # an attempt cluster is being provisioned and set up
    RUNNING = "running"  # the task runs on the attempt cluster
    RECOVERING = "recovering"  # the attempt was lost (preemption, node loss, error restart)
    CANCELLING = "cancelling"  # cancel requested; waiting for the attempt cluster to be gone
    SUCCEEDED = "succeeded"  # the task exited 0 (final)
    FAILED = "failed"  # the task failed past its restarts, no offer is left, or the budget (final)
    CANCELLED = "cancelled"  # cancelled and nothing of it runs any more (final)


class ServiceStatus(_StatusEnum):
    """The status of a service: replica clusters behind the server's load balancer."""

    PENDING = "pending"  # written; no replica launched yet
    STARTING = "starting"  # replicas are launching; none is ready (or none is any more)
    READY = "ready"  # at least one replica serves (or none is wanted: scaled to zero)
    UPDATING = "updating"  # a rolling update: new replicas start before old ones drain
    FAILED = "failed"  # no replica could be made ready (launches or readiness kept failing)
    SHUTTING_DOWN = "shutting_down"  # serve down: replicas draining and being terminated
    DOWN = "down"  # every replica terminated and the endpoint closed (final)


class PoolStatus(_StatusEnum):
    """The status of a pool: nodes kept for managed jobs, sized by the queue."""

    PENDING = "pending"  # written; no node launched yet
    READY = "ready"  # the pool serves jobs (its nodes grow and shrink with the queue)
    FAILED = "failed"  # its nodes could not be launched
    SHUTTING_DOWN = "shutting_down"  # pool down: nodes being terminated
    DOWN = "down"  # every node terminated (final)


Status: TypeAlias = (
    ClusterStatus | NodeState | IntentStatus | JobStatus | ServiceStatus | PoolStatus
)
StatusEnum: TypeAlias = (
    type[ClusterStatus]
    | type[NodeState]
    | type[IntentStatus]
    | type[JobStatus]
    | type[ServiceStatus]
    | type[PoolStatus]
)

_C = ClusterStatus
_N = NodeState
_I = IntentStatus

_CLUSTER: dict[Status, frozenset[Status]] = {
    _C.PENDING: frozenset({_C.PROVISIONING, _C.FAILED, _C.TERMINATING}),
    _C.PROVISIONING: frozenset({_C.PROVISIONING, _C.SETTING_UP, _C.FAILED, _C.TERMINATING}),
    _C.SETTING_UP: frozenset({_C.RUNNING, _C.PROVISIONING, _C.FAILED, _C.TERMINATING}),
    _C.RUNNING: frozenset({_C.SUCCEEDED, _C.FAILED, _C.STOPPING, _C.PROVISIONING, _C.TERMINATING}),
    _C.SUCCEEDED: frozenset({_C.SETTING_UP, _C.STOPPING, _C.TERMINATING}),
    _C.FAILED: frozenset({_C.SUCCEEDED, _C.STOPPING, _C.TERMINATING}),
    _C.STOPPING: frozenset({_C.STOPPED, _C.FAILED, _C.TERMINATING}),
    _C.STOPPED: frozenset({_C.STARTING, _C.TERMINATING}),
    _C.STARTING: frozenset({_C.SETTING_UP, _C.RUNNING, _C.FAILED, _C.TERMINATING}),
    _C.TERMINATING: frozenset({_C.TERMINATING, _C.TERMINATED}),
    _C.TERMINATED: frozenset(),
}

_NODE: dict[Status, frozenset[Status]] = {
    _N.PROVISIONING: frozenset({_N.SETTING_UP, _N.READY, _N.PREEMPTED, _N.FAILED, _N.TERMINATING}),
    _N.SETTING_UP: frozenset({_N.READY, _N.LOST, _N.PREEMPTED, _N.FAILED, _N.TERMINATING}),
    _N.READY: frozenset({_N.LOST, _N.PREEMPTED, _N.STOPPING, _N.FAILED, _N.TERMINATING}),
    _N.LOST: frozenset({_N.READY, _N.PREEMPTED, _N.TERMINATING}),
    _N.PREEMPTED: frozenset({_N.TERMINATING, _N.TERMINATED}),
    _N.STOPPING: frozenset({_N.STOPPED, _N.FAILED, _N.TERMINATING}),
    _N.STOPPED: frozenset({_N.STARTING, _N.TERMINATING}),
    _N.STARTING: frozenset({_N.SETTING_UP, _N.READY, _N.PREEMPTED, _N.FAILED, _N.TERMINATING}),
    _N.FAILED: frozenset({_N.TERMINATING}),
    _N.TERMINATING: frozenset({_N.TERMINATING, _N.TERMINATED}),
    _N.TERMINATED: frozenset(),
}

_INTENT: dict[Status, frozenset[Status]] = {
    _I.PENDING: frozenset({_I.SUBMITTED, _I.FAILED}),
    _I.SUBMITTED: frozenset({_I.DONE, _I.FAILED}),
    _I.DONE: frozenset(),
    _I.FAILED: frozenset(),
}

_J = JobStatus

_JOB: dict[Status, frozenset[Status]] = {
    _J.PENDING: frozenset({_J.STARTING, _J.RECOVERING, _J.FAILED, _J.CANCELLING}),
    _J.STARTING: frozenset({_J.RUNNING, _J.RECOVERING, _J.SUCCEEDED, _J.FAILED, _J.CANCELLING}),
    _J.RUNNING: frozenset({_J.RECOVERING, _J.SUCCEEDED, _J.FAILED, _J.CANCELLING}),
    _J.RECOVERING: frozenset({_J.RECOVERING, _J.STARTING, _J.FAILED, _J.CANCELLING}),
    _J.CANCELLING: frozenset({_J.CANCELLING, _J.CANCELLED}),
    _J.SUCCEEDED: frozenset(),
    _J.FAILED: frozenset(),
    _J.CANCELLED: frozenset(),
}

_S = ServiceStatus

_SERVICE: dict[Status, frozenset[Status]] = {
    _S.PENDING: frozenset({_S.STARTING, _S.FAILED, _S.SHUTTING_DOWN}),
    _S.STARTING: frozenset({_S.READY, _S.UPDATING, _S.FAILED, _S.SHUTTING_DOWN}),
    _S.READY: frozenset({_S.STARTING, _S.UPDATING, _S.FAILED, _S.SHUTTING_DOWN}),
    _S.UPDATING: frozenset({_S.READY, _S.STARTING, _S.FAILED, _S.SHUTTING_DOWN}),
    _S.FAILED: frozenset({_S.STARTING, _S.UPDATING, _S.SHUTTING_DOWN}),
    _S.SHUTTING_DOWN: frozenset({_S.SHUTTING_DOWN, _S.DOWN}),
    _S.DOWN: frozenset(),
}

_P = PoolStatus

_POOL: dict[Status, frozenset[Status]] = {
    _P.PENDING: frozenset({_P.READY, _P.FAILED, _P.SHUTTING_DOWN}),
    _P.READY: frozenset({_P.FAILED, _P.SHUTTING_DOWN}),
    _P.FAILED: frozenset({_P.READY, _P.SHUTTING_DOWN}),
    _P.SHUTTING_DOWN: frozenset({_P.SHUTTING_DOWN, _P.DOWN}),
    _P.DOWN: frozenset(),
}

TRANSITIONS: Final[Mapping[StatusEnum, Mapping[Status, frozenset[Status]]]] = MappingProxyType(
    {
        ClusterStatus: MappingProxyType(_CLUSTER),
        NodeState: MappingProxyType(_NODE),
        IntentStatus: MappingProxyType(_INTENT),
        JobStatus: MappingProxyType(_JOB),
        ServiceStatus: MappingProxyType(_SERVICE),
        PoolStatus: MappingProxyType(_POOL),
    }
)
"""``TRANSITIONS[ClusterStatus][ClusterStatus.RUNNING]`` → the statuses RUNNING may move to."""

INITIAL: Final[Mapping[StatusEnum, Status]] = MappingProxyType(
    {
        ClusterStatus: ClusterStatus.PENDING,
        NodeState: NodeState.PROVISIONING,
        IntentStatus: IntentStatus.PENDING,
        JobStatus: JobStatus.PENDING,
        ServiceStatus: ServiceStatus.PENDING,
        PoolStatus: PoolStatus.PENDING,
    }
)
"""The status a new row starts in."""

FINAL: Final[frozenset[Status]] = frozenset(
    {
        ClusterStatus.TERMINATED,
        NodeState.TERMINATED,
        IntentStatus.DONE,
        IntentStatus.FAILED,
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.CANCELLED,
        ServiceStatus.DOWN,
        PoolStatus.DOWN,
    }
)
"""Statuses with no way out."""


@dataclass(frozen=True, slots=True)
class Timeout:
    """A transient status may last ``seconds``; then the owning loop moves it to ``exit``."""

    seconds: float
    exit: Status
    why: str


_MIN = 60.0

TRANSIENT_TIMEOUTS: Final[Mapping[StatusEnum, Mapping[Status, Timeout]]] = MappingProxyType(
    {
        ClusterStatus: MappingProxyType(
            {
                _C.PENDING: Timeout(10 * _MIN, _C.FAILED, "no loop launched it"),
                _C.PROVISIONING: Timeout(
                    20 * _MIN,
                    _C.PROVISIONING,
                    "fail over to the next offer; FAILED when none is left",
                ),
                _C.SETTING_UP: Timeout(30 * _MIN, _C.FAILED, "setup did not finish"),
                _C.STOPPING: Timeout(15 * _MIN, _C.FAILED, "the provider did not stop it"),
                _C.STARTING: Timeout(20 * _MIN, _C.FAILED, "the provider did not start it"),
                _C.TERMINATING: Timeout(
                    30 * _MIN, _C.TERMINATING, "re-issue terminate by tags; never assume it gone"
                ),
            }
        ),
        NodeState: MappingProxyType(
            {
                _N.PROVISIONING: Timeout(20 * _MIN, _N.FAILED, "never became reachable"),
                _N.SETTING_UP: Timeout(30 * _MIN, _N.FAILED, "setup did not finish"),
                _N.LOST: Timeout(10 * _MIN, _N.TERMINATING, "replace it"),
                _N.PREEMPTED: Timeout(10 * _MIN, _N.TERMINATING, "make sure it is gone"),
                _N.STOPPING: Timeout(15 * _MIN, _N.FAILED, "the provider did not stop it"),
                _N.STARTING: Timeout(20 * _MIN, _N.FAILED, "the provider did not start it"),
                _N.TERMINATING: Timeout(30 * _MIN, _N.TERMINATING, "re-issue terminate"),
            }
        ),
        IntentStatus: MappingProxyType(
            {
                _I.PENDING: Timeout(15 * _MIN, _I.FAILED, "the launch was never accepted"),
                _I.SUBMITTED: Timeout(30 * _MIN, _I.FAILED, "its nodes never all ran"),
            }
        ),
        JobStatus: MappingProxyType(
            {
                _J.PENDING: Timeout(10 * _MIN, _J.FAILED, "no loop started it"),
                _J.STARTING: Timeout(
                    60 * _MIN, _J.RECOVERING, "the attempt never ran: recover elsewhere"
                ),
                _J.RECOVERING: Timeout(
                    24 * 60 * _MIN, _J.FAILED, "no attempt could be started for a day"
                ),
                _J.CANCELLING: Timeout(
                    30 * _MIN, _J.CANCELLING, "re-issue the teardown; never assume it gone"
                ),
            }
        ),
        ServiceStatus: MappingProxyType(
            {
                _S.PENDING: Timeout(10 * _MIN, _S.FAILED, "no loop started it"),
                _S.STARTING: Timeout(60 * _MIN, _S.FAILED, "no replica became ready"),
                _S.UPDATING: Timeout(60 * _MIN, _S.FAILED, "the new replicas never got ready"),
                _S.SHUTTING_DOWN: Timeout(
                    30 * _MIN, _S.SHUTTING_DOWN, "re-issue the teardown; never assume it gone"
                ),
            }
        ),
        PoolStatus: MappingProxyType(
            {
                _P.PENDING: Timeout(10 * _MIN, _P.FAILED, "no loop started it"),
                _P.SHUTTING_DOWN: Timeout(
                    30 * _MIN, _P.SHUTTING_DOWN, "re-issue the teardown; never assume it gone"
                ),
            }
        ),
    }
)
"""``TRANSIENT_TIMEOUTS[enum][status]``: every transient status, how long it may last (measured
from the row's ``status_changed_at``) and its exit. A status without an entry is resting."""


class InvalidTransition(Permanent):
    """A status change the transition table forbids (a bug in the caller, never retried)."""

    def __init__(self, current: Status, new: Status, kind: str) -> None:
        super().__init__(f"{kind}: {current.value} → {new.value} is not an allowed transition")
        self.current = current
        self.new = new
        self.kind = kind


def allowed(current: Status, new: Status) -> bool:
    """Whether ``current → new`` is in the table (both must be members of the same enum)."""
    if type(current) is not type(new):
        return False
    return new in TRANSITIONS[type(current)][current]


def check_transition(current: Status, new: Status, kind: str) -> None:
    """Raise :class:`InvalidTransition` unless ``current → new`` is allowed."""
    if not allowed(current, new):
        raise InvalidTransition(current, new, kind)


def timeout_of(status: Status) -> Timeout | None:
    """The timeout of a transient status; None for a resting one."""
    return TRANSIENT_TIMEOUTS[type(status)].get(status)


def timeout_exit(status: Status, since: float, now: float) -> Status | None:
    """The exit status when ``status``, entered at ``since``, timed out by ``now``, else None."""
    rule = timeout_of(status)
    if rule is None or now - since < rule.seconds:
        return None
    return rule.exit
