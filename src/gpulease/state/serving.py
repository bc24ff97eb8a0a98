"""The state DB's serving tables: :class:`Service` (a service: replica clusters behind the
server's load balancer, scaled by load) and :class:`Pool` (nodes kept for managed jobs, sized by
the queue). Their replica and pool-node clusters are ordinary ``clusters`` rows carrying
``service_id`` / ``replica_version`` or ``pool_id``. Declared on the same
:class:`~gpulease.state.models.Base` (``models`` re-exports them). Statuses move only through
:func:`gpulease.state.status.set_status` (machines :class:`~gpulease.state.machines.ServiceStatus`
and :class:`~gpulease.state.machines.PoolStatus`); both rows carry the reconcile claim
(``lock_*``) of the shared skeleton.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gpulease.state.machines import PoolStatus, ServiceStatus
from gpulease.state.models import Base, ReconcileClaim, StatusType


class Service(ReconcileClaim, Base):
    """A service (``gpulease serve up``): its document (``task`` JSON: the spec with its
    ``service:`` section, the run spec and the ranked plans of a replica), the version a rolling
    update brings (``version``: 1, +1 per ``serve update``; a replica cluster's
    ``replica_version`` says which it runs), the endpoint's port on the server host, the
    replicas the autoscaler wants, its memory between passes (``autoscale``: the
    ``serve.autoscale.ScaleMemory`` as JSON) and the history of its scaling decisions
    (``decisions``: newest last, bounded)."""

    __tablename__ = "services"
    __table_args__ = {"sqlite_autoincrement": True}  # noqa: RUF012 - ids are never reused

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    owner: Mapped[str] = mapped_column(String(64), index=True)
    status: Mapped[ServiceStatus] = mapped_column(StatusType(ServiceStatus), index=True)
    status_changed_at: Mapped[float]
    task: Mapped[dict[str, Any]]
    version: Mapped[int] = mapped_column(Integer)
    endpoint_port: Mapped[int | None] = mapped_column(Integer)
    desired_replicas: Mapped[int] = mapped_column(Integer)
    autoscale: Mapped[dict[str, Any]]
    decisions: Mapped[list[dict[str, Any]]]
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float]
    updated_at: Mapped[float]

    def __repr__(self) -> str:
        return f"Service(id={self.id!r}, name={self.name!r}, status={self.status!s})"


class Pool(ReconcileClaim, Base):
    """A pool (``gpulease pool up``): its document (``task`` JSON: the spec with its ``pool:``
    section and the ranked plans of a node), the nodes it wants now (``desired_nodes``, between
    the spec's min and max, from the queue) and the history of its sizing decisions. A pool
    node is a ``clusters`` row with ``pool_id``; while it runs a managed job its ``job_id`` is
    that job's id, and NULL while it is idle."""

    __tablename__ = "pools"
    __table_args__ = {"sqlite_autoincrement": True}  # noqa: RUF012 - ids are never reused

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    owner: Mapped[str] = mapped_column(String(64), index=True)
    status: Mapped[PoolStatus] = mapped_column(StatusType(PoolStatus), index=True)
    status_changed_at: Mapped[float]
    task: Mapped[dict[str, Any]]
    desired_nodes: Mapped[int] = mapped_column(Integer)
    decisions: Mapped[list[dict[str, Any]]]
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float]
    updated_at: Mapped[float]

    def __repr__(self) -> str:
        return f"Pool(id={self.id!r}, name={self.name!r}, status={self.status!s})"
