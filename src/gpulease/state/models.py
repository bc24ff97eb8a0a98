"""The tables of the state DB as typed SQLAlchemy 2 models.

Owns the schema (the alembic migrations in ``migrations/versions`` must match it; a test checks):
:class:`Cluster`, :class:`Node`, :class:`LaunchIntent`, :class:`Job` (managed jobs),
:class:`StatusChange` (history), :class:`TelemetryPoint` (the nodes' downsampled
telemetry), :class:`LedgerEntry` (the cost ledger), :class:`ProviderOutage` (provider API
outages) and :class:`ServerIdentity`. It moves no states: every status column is written by
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


class Cluster(Base):
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
    lock_worker: Mapped[str | None] = mapped_column(String(128))
    lock_token: Mapped[str | None] = mapped_column(String(64))
    lock_expires_at: Mapped[float | None]
    last_processed_at: Mapped[float | None]  # when a reconcile worker last released its claim
    job_id: Mapped[int | None] = mapped_column(Integer, index=True)  # the managed job it serves
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


class Job(Base):
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
    lock_worker: Mapped[str | None] = mapped_column(String(128))  # the reconcile claim
    lock_token: Mapped[str | None] = mapped_column(String(64))
    lock_expires_at: Mapped[float | None]
    last_processed_at: Mapped[float | None]  # when a reconcile worker last released its claim
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


class TelemetryPoint(Base):
    """One node's telemetry over one time bucket, downsampled by the server's relay: ``data`` is
    the mean of the agent's samples in ``[at, at + resolution_s)`` (GPUs, host, peers' round
    trips, the training job's figures; the shape of ``gpulease.agent.telemetry.Sample``'s JSON),
    ``samples`` how many were folded in. Keyed by the cluster's id (never reused) with its name and
    job copied, and no foreign key, so the history outlives the cluster row until retention
    deletes it."""

    __tablename__ = "telemetry_points"
    __table_args__ = (
        UniqueConstraint("cluster_id", "node_rank", "resolution_s", "at"),
        Index(None, "cluster_id", "resolution_s", "at"),
        Index(None, "job_id", "resolution_s", "at"),
        Index(None, "resolution_s", "at"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster_id: Mapped[int] = mapped_column(Integer)
    cluster_name: Mapped[str] = mapped_column(String(255))
    job_id: Mapped[int | None] = mapped_column(Integer)
    node_rank: Mapped[int] = mapped_column(Integer)
    resolution_s: Mapped[int] = mapped_column(Integer)
    at: Mapped[float]  # the bucket's start, a multiple of resolution_s
    samples: Mapped[int] = mapped_column(Integer)
    data: Mapped[dict[str, Any]]


class LedgerEntry(Base):
    """One billed interval: a node (``kind`` ``instance``) at one price, a stopped node's volumes
    (``volume``) or a checkpoint store's bytes (``storage``), from ``started_at`` to ``ended_at``.
    The open row (``closed`` false) has its end advanced by the controller's accrual from
    timestamps, so a pass repeated or delayed bills each second once; it closes when the price
    changes (a new row starts at that instant) or the node's termination is confirmed.
    ``billed_s`` is the interval after the provider's ``billing`` rule (e.g. ``second:60``: per
    second, 60 s minimum per instance run; ``minute``; ``hour``), ``cost_usd`` its price.
    ``entry_key`` (unique: e.g. ``instance:<node id>:<started_at>``) makes the inserts
    idempotent. The dimensions are copied, and there is no foreign key, so the ledger outlives
    clusters, nodes and jobs."""

    __tablename__ = "ledger_entries"
    __table_args__ = (
        Index(None, "started_at"),
        Index(None, "ended_at"),
        Index(None, "cluster_id"),
        Index(None, "job_id"),
        Index(None, "closed"),
        # the accrual's join of nodes with their open row (migration 0009): without it SQLite
        # reads every open row per node through ix_ledger_entries_closed
        Index("ix_ledger_entries_node_open", "node_id", "closed"),
        # the cost reports' narrow indexes (gpulease.cost): a period's rows, a run's spend
        Index("ix_ledger_entries_period", "ended_at", "started_at", "cost_usd"),
        Index("ix_ledger_entries_job_cost", "job_id", "started_at", "ended_at", "cost_usd"),
        Index(
            "ix_ledger_entries_cluster_cost",
            "cluster_id",
            "job_id",
            "kind",
            "started_at",
            "ended_at",
            "cost_usd",
        ),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    entry_key: Mapped[str] = mapped_column(String(255), unique=True)
    kind: Mapped[str] = mapped_column(String(16))  # instance | volume | storage
    node_id: Mapped[int | None] = mapped_column(Integer, index=True)  # the accrual's join
    instance_id: Mapped[str | None] = mapped_column(String(128))
    cluster_id: Mapped[int | None] = mapped_column(Integer)
    cluster_name: Mapped[str | None] = mapped_column(String(255))
    job_id: Mapped[int | None] = mapped_column(Integer)
    service: Mapped[str | None] = mapped_column(String(255))
    task_name: Mapped[str | None] = mapped_column(String(255))
    user: Mapped[str] = mapped_column(String(64))
    provider: Mapped[str] = mapped_column(String(64))
    region: Mapped[str | None] = mapped_column(String(64))
    zone: Mapped[str | None] = mapped_column(String(64))
    instance_type: Mapped[str | None] = mapped_column(String(128))
    accelerator: Mapped[str | None] = mapped_column(String(64))
    gpu_count: Mapped[int] = mapped_column(Integer)
    pricing: Mapped[str] = mapped_column(String(16))  # on_demand | spot | reserved
    price_per_hour: Mapped[float]  # in force over the row (storage/volume: for its quantity)
    on_demand_price_per_hour: Mapped[float | None]  # the same offer on demand (spot savings)
    # instance rows: the plan's price per node, on which a spot market's changes apply
    quoted_per_hour: Mapped[float | None]
    quantity: Mapped[float | None]  # GB for volume / storage rows
    billing: Mapped[str] = mapped_column(String(32))  # second:60 | minute | hour | ...
    # when the node's billed run began (its first row's start): rounding and minimums apply
    # per run, so a row's billed_s is rule(ended_at - run) - rule(started_at - run)
    run_started_at: Mapped[float]
    started_at: Mapped[float]
    ended_at: Mapped[float]
    closed: Mapped[bool] = mapped_column(Boolean)
    billed_s: Mapped[float]
    cost_usd: Mapped[float]
    created_at: Mapped[float]
    updated_at: Mapped[float]


class LedgerDay(Base):
    """The cost ledger's daily rollup (migration 0009): per UTC ``day`` (``floor(t / 86400)``),
    per report dimension ``dim`` (``all``, ``cluster``, ``job``, ``task``, ``provider``,
    ``region``, ``gpu``, ``pricing``, ``user``) and its ``key`` (the report's group key), the
    sums of the *closed* ledger rows' shares of that day (pro-rated by wall time, as the report
    does): dollars, billed and GPU seconds, spot figures, the cost of each kind; ``entries``
    (rows overlapping the day) and ``starts`` (rows starting in it). Written only by
    :mod:`gpulease.state.ledger`, in the transaction that closes each row (a closed row never
    changes again); open rows and a period's partial first and last days are read from the rows."""

    __tablename__ = "ledger_days"
    __table_args__ = (
        UniqueConstraint("dim", "day", "key"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dim: Mapped[str] = mapped_column(String(16))
    day: Mapped[int] = mapped_column(Integer)
    key: Mapped[str] = mapped_column(String(600))
    cost_usd: Mapped[float]
    billed_s: Mapped[float]
    gpu_s: Mapped[float]
    spot_savings_usd: Mapped[float]
    spot_cost_usd: Mapped[float]
    cost_instance: Mapped[float]
    cost_volume: Mapped[float]
    cost_storage: Mapped[float]
    entries: Mapped[int] = mapped_column(Integer)
    starts: Mapped[int] = mapped_column(Integer)


class ProviderOutage(Base):
    """One stretch of a provider's API not answering (migration 0008, for ``gpulease sla``):
    opened by the server at the first :class:`~gpulease.providers.base.ProviderUnavailable` a
    provider call raises, advanced (``last_seen_at``, ``errors``) while calls keep failing, and
    closed (``ended_at``) by the first call that answers. A row a dead server left open ends at
    its ``last_seen_at``. ``region`` NULL means every region of the provider."""

    __tablename__ = "provider_outages"
    __table_args__ = (
        Index(None, "provider", "started_at"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    provider: Mapped[str] = mapped_column(String(64))
    region: Mapped[str | None] = mapped_column(String(64))
    operation: Mapped[str] = mapped_column(String(32))  # the first call that failed
    started_at: Mapped[float]
    last_seen_at: Mapped[float]
    ended_at: Mapped[float | None]
    errors: Mapped[int] = mapped_column(Integer)
    last_error: Mapped[str] = mapped_column(Text)


class ServerIdentity(Base):
    """The single row holding this server's owner id (the ``gpulease-owner`` tag)."""

    __tablename__ = "server_identity"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # always 1
    owner_id: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float]
