"""The tables of the state DB as typed SQLAlchemy 2 models.

Owns the schema (the alembic migrations in ``migrations/versions`` must match it; a test checks):
:class:`Cluster`, :class:`Node`, :class:`LaunchIntent`, :class:`Job` (managed jobs),
:class:`StatusChange` (history) and :class:`ServerIdentity`, plus the record tables of
:mod:`gpulease.state.records` (telemetry, the cost ledger and its daily rollup, provider
outages), re-exported here. It moves no states: every status column is written by
:func:`gpulease.state.status.set_status` only.

Conventions: ids are never reused (AUTOINCREMENT on SQLite, sequences on PostgreSQL), so
history rows keyed by entity id stay unambiguous after a row is deleted; timestamps are UTC seconds
since the epoch as floats (``Clock.now()``), never datetimes; statuses are stored as their
lowercase string values (``VARCHAR(32)``, no native enum type, so adding a status needs no DDL);
constraint names follow :data:`NAMING_CONVENTION`.
"""

from __future__ import annotations

import enum
from typing import Any, Generic, TypeVar

from sqlalchemy import (
    JSON,
    Boolean,
    Dialect,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

from gpulease.state.machines import ClusterStatus, IntentStatus, JobStatus, NodeState

NAMING_CONVENTION: dict[str, str] = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

E = TypeVar("E", bound=enum.Enum)


class StatusType(TypeDecorator[E], Generic[E]):
    """A status enum stored as its string value in ``VARCHAR(32)``."""

    impl = String(32)
    cache_ok = True

    def __init__(self, enum_cls: type[E]) -> None:
        super().__init__()
        self.enum_cls = enum_cls

    def process_bind_param(self, value: E | str | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        return str(self.enum_cls(value).value)  # ValueError for a value not in the enum

    def process_result_value(self, value: Any | None, dialect: Dialect) -> E | None:
        return None if value is None else self.enum_cls(value)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012 - SQLAlchemy reads this class attribute
        float: Double(),
        dict[str, Any]: JSON(),
        list[dict[str, Any]]: JSON(),
    }


class ReconcileClaim:
    """The reconcile claim's columns (``state.claims``), shared by every claimable table:
    ``clusters``, ``jobs``, ``services`` and ``pools``."""

    lock_worker: Mapped[str | None] = mapped_column(String(128))
    lock_token: Mapped[str | None] = mapped_column(String(64))
    lock_expires_at: Mapped[float | None]
    last_processed_at: Mapped[float | None]  # when a reconcile worker last released its claim


class Cluster(ReconcileClaim, Base):
    """A cluster the user asked for: where it should run (the current launch target), the task,
    autostop settings, failover history and the reconcile claim (``lock_*``)."""

    __tablename__ = "clusters"
    __table_args__ = {"sqlite_autoincrement": True}  # noqa: RUF012 - ids are never reused

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    owner: Mapped[str] = mapped_column(String(64), index=True)
    status: Mapped[ClusterStatus] = mapped_column(StatusType(ClusterStatus), index=True)
    status_changed_at: Mapped[float]
    provider: Mapped[str] = mapped_column(String(64))
    region: Mapped[str | None] = mapped_column(String(64))
    zone: Mapped[str | None] = mapped_column(String(64))
    instance_type: Mapped[str | None] = mapped_column(String(128))
    accelerator: Mapped[str | None] = mapped_column(String(64))
    gpus_per_node: Mapped[int] = mapped_column(Integer)
    num_nodes: Mapped[int] = mapped_column(Integer)
    pricing: Mapped[str] = mapped_column(String(16))  # on_demand | spot | reserved
    price_per_hour: Mapped[float | None]  # quoted, whole cluster
    task: Mapped[dict[str, Any]]  # the launch document (controller.document) as JSON
    autostop_minutes: Mapped[int | None] = mapped_column(Integer)
    autostop_down: Mapped[bool] = mapped_column(Boolean)
    last_activity_at: Mapped[float | None]
    # autostop's load rule (``resources.autostop.gpu_utilisation_below``, percent): a running
    # cluster whose GPUs stay below it for ``autostop_minutes`` while billed is stopped
    autostop_gpu_below: Mapped[float | None]
    # when the telemetry relay last saw the cluster busy (a GPU at or above the rule's threshold,
    # or a gpulease.train job making progress); the load rule counts idleness from it
    gpu_active_at: Mapped[float | None]
    failover_history: Mapped[list[dict[str, Any]]]
    job_id: Mapped[int | None] = mapped_column(Integer, index=True)  # the managed job it serves
    # a service's replica (migration 0011): the service and the version of it the replica runs
    service_id: Mapped[int | None] = mapped_column(Integer, index=True)
    replica_version: Mapped[int | None] = mapped_column(Integer)
    pool_id: Mapped[int | None] = mapped_column(Integer, index=True)  # a pool's node
    failure: Mapped[str | None] = mapped_column(String(16))  # FAILED why: infra | task | launch
    # with failure "task": {rank, state, step, exit_code, signal, detail} of the failed node
    task_failure: Mapped[dict[str, Any] | None]
    created_at: Mapped[float]
    updated_at: Mapped[float]

    nodes: Mapped[list[Node]] = relationship(
        back_populates="cluster",
        order_by="Node.id",
        cascade="all, delete-orphan",
        passive_deletes=True,
    )
    intents: Mapped[list[LaunchIntent]] = relationship(
        back_populates="cluster",
        order_by="LaunchIntent.id",
        cascade="all, delete-orphan",
        passive_deletes=True,
    )

    @property
    def spot(self) -> bool:
        return self.pricing == "spot"

    def __repr__(self) -> str:
        return f"Cluster(id={self.id!r}, name={self.name!r}, status={self.status!s})"


class Node(Base):
    """One instance of a cluster. ``agent_token_hash`` is the sha256 of the node's agent token;
    the token itself is never stored."""

    __tablename__ = "nodes"
    __table_args__ = (
        UniqueConstraint("provider", "instance_id"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster_id: Mapped[int] = mapped_column(
        ForeignKey("clusters.id", ondelete="CASCADE"), index=True
    )
    node_rank: Mapped[int] = mapped_column(Integer)
    instance_id: Mapped[str] = mapped_column(String(128))
    provider: Mapped[str] = mapped_column(String(64))
    state: Mapped[NodeState] = mapped_column(StatusType(NodeState), index=True)
    status_changed_at: Mapped[float]
    agent_url: Mapped[str | None] = mapped_column(String(512))
    agent_token_hash: Mapped[str | None] = mapped_column(String(64))
    last_heartbeat_at: Mapped[float | None]
    missed_heartbeats: Mapped[int] = mapped_column(Integer)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[float]
    updated_at: Mapped[float]

    cluster: Mapped[Cluster] = relationship(back_populates="nodes")

    def __repr__(self) -> str:
        return (
            f"Node(id={self.id!r}, cluster_id={self.cluster_id!r}, rank={self.node_rank!r}, "
            f"instance_id={self.instance_id!r}, state={self.state!s})"
        )


class LaunchIntent(Base):
    """The durable record of one launch, committed BEFORE the provider is called.

    ``request_id`` is the provider's idempotency token and the ``gpulease-request`` tag: after a
    crash the next pass re-sends the same launch, which starts nothing new."""

    __tablename__ = "launch_intents"
    __table_args__ = {"sqlite_autoincrement": True}  # noqa: RUF012

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    request_id: Mapped[str] = mapped_column(String(64), unique=True)
    cluster_id: Mapped[int] = mapped_column(
        ForeignKey("clusters.id", ondelete="CASCADE"), index=True
    )
    provider: Mapped[str] = mapped_column(String(64))
    region: Mapped[str | None] = mapped_column(String(64))
    zone: Mapped[str | None] = mapped_column(String(64))
    instance_type: Mapped[str | None] = mapped_column(String(128))
    pricing: Mapped[str] = mapped_column(String(16))
    num_nodes: Mapped[int] = mapped_column(Integer)
    status: Mapped[IntentStatus] = mapped_column(StatusType(IntentStatus), index=True)
    status_changed_at: Mapped[float]
    attempt: Mapped[int] = mapped_column(Integer)  # provider calls started so far
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float]
    updated_at: Mapped[float]

    cluster: Mapped[Cluster] = relationship(back_populates="intents")

    def __repr__(self) -> str:
        return f"LaunchIntent(request_id={self.request_id!r}, status={self.status!s})"


class Job(ReconcileClaim, Base):
    """A managed job: the task, its ranked spot and on-demand targets (``task`` JSON), the attempt
    cluster it runs on now, and what it has been through (recoveries, restarts, blocked zones,
    spend). Times of the job's own clock (``clock``: ``system`` or a provider with a simulated
    clock) are in ``*_at_job`` columns; the others are server time."""

    __tablename__ = "jobs"
    __table_args__ = {"sqlite_autoincrement": True}  # noqa: RUF012 - ids are never reused

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), index=True)
    owner: Mapped[str] = mapped_column(String(64), index=True)
    status: Mapped[JobStatus] = mapped_column(StatusType(JobStatus), index=True)
    status_changed_at: Mapped[float]
    task: Mapped[dict[str, Any]]  # the job document (controller.job_document) as JSON
    clock: Mapped[str] = mapped_column(String(64))  # "system" or the provider whose clock rules
    attempt: Mapped[int] = mapped_column(Integer)  # attempt clusters created so far
    cluster_id: Mapped[int | None] = mapped_column(Integer)  # the current attempt's cluster
    pricing: Mapped[str | None] = mapped_column(String(16))  # of the current attempt
    recoveries: Mapped[int] = mapped_column(Integer)  # after preemptions / lost nodes
    restarts: Mapped[int] = mapped_column(Integer)  # after the task's own failures
    blocked: Mapped[list[dict[str, Any]]]  # zones in cool-down: provider, region, zone, until
    events: Mapped[list[dict[str, Any]]]  # preemptions, recoveries, migrations (for the report)
    cost_usd: Mapped[float]  # spent so far (job clock x price of each attempt)
    run_s: Mapped[float]  # job-clock seconds the task ran (the spot policy's progress)
    mark_at_job: Mapped[float | None]  # job-clock time cost and run time were last accrued
    started_at_job: Mapped[float]  # job-clock time the job was launched
    next_attempt_at: Mapped[float | None]  # server time before which no attempt starts (backoff)
    cancel_requested: Mapped[bool] = mapped_column(Boolean)
    pending_stop: Mapped[str | None] = mapped_column(String(16))  # migrate | price | budget
    failure: Mapped[str | None] = mapped_column(String(16))  # task | budget | no_offer | ...
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float]
    updated_at: Mapped[float]

    def __repr__(self) -> str:
        return f"Job(id={self.id!r}, name={self.name!r}, status={self.status!s})"


class StatusChange(Base):
    """One row per status change of any entity (and one for its creation, ``from_status`` NULL)."""

    __tablename__ = "status_changes"
    __table_args__ = (Index(None, "entity_kind", "entity_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    entity_kind: Mapped[str] = mapped_column(String(16))  # cluster | node | intent | job
    entity_id: Mapped[int] = mapped_column(Integer)
    from_status: Mapped[str | None] = mapped_column(String(32))
    to_status: Mapped[str] = mapped_column(String(32))
    at: Mapped[float]
    actor: Mapped[str] = mapped_column(String(128))
    reason: Mapped[str] = mapped_column(Text)


class ServerIdentity(Base):
    """The single row holding this server's owner id (the ``gpulease-owner`` tag)."""

    __tablename__ = "server_identity"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # always 1
    owner_id: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float]


# the record tables (append-mostly history: telemetry, the cost ledger, provider outages) live in
# their own module; importing them here registers them on Base.metadata with the rest
from gpulease.state.bench import BenchRun  # noqa: E402
from gpulease.state.records import (  # noqa: E402
    LedgerDay,
    LedgerEntry,
    ProviderOutage,
    TelemetryPoint,
)
from gpulease.state.secret_sets import SecretSet  # noqa: E402
from gpulease.state.serving import Pool, Service  # noqa: E402

__all__ = [
    "NAMING_CONVENTION",
    "Base",
    "BenchRun",
    "Cluster",
    "Job",
    "LaunchIntent",
    "LedgerDay",
    "LedgerEntry",
    "Node",
    "Pool",
    "ProviderOutage",
    "SecretSet",
    "ServerIdentity",
    "Service",
    "StatusChange",
    "StatusType",
    "TelemetryPoint",
]
