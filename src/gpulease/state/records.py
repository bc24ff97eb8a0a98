"""The state DB's record tables: history that is appended and advanced, never moved through a
state machine — :class:`TelemetryPoint` (the nodes' downsampled telemetry), :class:`LedgerEntry`
(the cost ledger), :class:`LedgerDay` (its daily rollup) and :class:`ProviderOutage` (provider
API outages). Declared on the same
:class:`~gpulease.state.models.Base` (``models`` re-exports them, so ``gpulease.state.models``
stays the one place to import tables from). Moves no states.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Boolean, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from gpulease.state.models import Base


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
        # the open rows alone (migration 0010): the accrual's join of nodes with their open
        # row, its in-place UPDATE and orphan check, and the report's open rows read them
        # through it whatever the planner's statistics say
        Index(
            "ix_ledger_entries_open",
            "node_id",
            sqlite_where=text("closed IS 0"),
            postgresql_where=text("closed IS false"),
        ),
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
