"""Clusters, launch intents and the server's identity: the reads and writes the server's API and
reconcile loops use. Functions take a session and never commit (the caller's
:func:`~gpulease.state.db.session_scope` is the transaction).

Owns :class:`LaunchTarget`, :func:`create_cluster` (cluster + first launch intent, both PENDING,
in the caller's one transaction), :func:`get_cluster`, :func:`get_cluster_by_name`,
:func:`list_clusters`, :func:`current_target`, :func:`get_intent`, :func:`open_intents`,
:func:`fail_over`, :func:`append_failover`, :func:`record_activity` and :func:`server_owner_id`.

States it moves (through :func:`~gpulease.state.status.set_status`), on a failover only: cluster
PENDING|PROVISIONING|SETTING_UP|RUNNING → PROVISIONING, intent PENDING|SUBMITTED → FAILED.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import CursorResult, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpulease.errors import UserInputError
from gpulease.state.claims import Claim
from gpulease.state.machines import ClusterStatus, IntentStatus
from gpulease.state.models import Cluster, LaunchIntent, ServerIdentity
from gpulease.state.status import record_created, set_status

MAX_ERROR_CHARS = 2000
_OPEN_INTENT = (IntentStatus.PENDING, IntentStatus.SUBMITTED)


class ClusterExists(UserInputError):
    """A cluster with this name exists and is not TERMINATED."""


@dataclass(frozen=True, slots=True)
class LaunchTarget:
    """Where a launch goes: one offer × node count × pricing (from the chosen plan)."""

    provider: str
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    accelerator: str | None = None
    gpus_per_node: int = 0
    num_nodes: int = 1
    pricing: str = "on_demand"  # on_demand | spot | reserved
    price_per_hour: float | None = None  # whole cluster


def new_request_id() -> str:
    """A fresh launch request id (the provider's idempotency token)."""
    return uuid.uuid4().hex


def _new_intent(
    cluster: Cluster, target: LaunchTarget, request_id: str, now: float
) -> LaunchIntent:
    return LaunchIntent(
        request_id=request_id,
        cluster=cluster,
        provider=target.provider,
        region=target.region,
        zone=target.zone,
        instance_type=target.instance_type,
        pricing=target.pricing,
        num_nodes=target.num_nodes,
        status=IntentStatus.PENDING,
        status_changed_at=now,
        attempt=0,
        created_at=now,
        updated_at=now,
    )


def _apply_target(cluster: Cluster, target: LaunchTarget) -> None:
    cluster.provider = target.provider
    cluster.region = target.region
    cluster.zone = target.zone
    cluster.instance_type = target.instance_type
    cluster.accelerator = target.accelerator
    cluster.gpus_per_node = target.gpus_per_node
    cluster.num_nodes = target.num_nodes
    cluster.pricing = target.pricing
    cluster.price_per_hour = target.price_per_hour


def _free_name(session: Session, name: str) -> None:
    """Raise unless ``name`` is free; a TERMINATED cluster's row gives its name up (its status
    history stays in ``status_changes``)."""
    old = get_cluster_by_name(session, name)
    if old is None:
        return
    if old.status is not ClusterStatus.TERMINATED:
        raise ClusterExists(f"cluster {name!r} exists ({old.status.value})")
    session.delete(old)
    session.flush()


def create_cluster(
    session: Session,
    *,
    name: str,
    target: LaunchTarget,
    task: Mapping[str, Any],
    owner: str,
    actor: str,
    now: float,
    request_id: str | None = None,
    autostop_minutes: int | None = None,
    autostop_down: bool = False,
) -> tuple[Cluster, LaunchIntent]:
    """Write a PENDING cluster and its first PENDING launch intent (call before any provider call;
    commit, then launch with ``intent.request_id``). Raises :class:`ClusterExists`."""
    _free_name(session, name)
    cluster = Cluster(
        name=name,
        owner=owner,
        status=ClusterStatus.PENDING,
        status_changed_at=now,
        task=dict(task),
        autostop_minutes=autostop_minutes,
        autostop_down=autostop_down,
        last_activity_at=now,
        failover_history=[],
        created_at=now,
        updated_at=now,
    )
    _apply_target(cluster, target)
    intent = _new_intent(cluster, target, request_id or new_request_id(), now)
    session.add_all([cluster, intent])
    try:
        session.flush()
    except IntegrityError as exc:
        raise ClusterExists(f"cluster {name!r} or request {intent.request_id!r} exists") from exc
    record_created(session, cluster, actor=actor, reason="created")
    record_created(session, intent, actor=actor, reason="created")
    return cluster, intent


def get_cluster(session: Session, cluster_id: int) -> Cluster | None:
    return session.get(Cluster, cluster_id)


def get_cluster_by_name(session: Session, name: str) -> Cluster | None:
    return session.scalars(select(Cluster).where(Cluster.name == name)).one_or_none()


def list_clusters(
    session: Session,
    *,
    statuses: Iterable[ClusterStatus] | None = None,
    owner: str | None = None,
) -> list[Cluster]:
    """Clusters by id, optionally only those in ``statuses`` and of ``owner``."""
    stmt = select(Cluster).order_by(Cluster.id)
    if statuses is not None:
        stmt = stmt.where(Cluster.status.in_(list(statuses)))
    if owner is not None:
        stmt = stmt.where(Cluster.owner == owner)
    return list(session.scalars(stmt))


def get_intent(session: Session, request_id: str) -> LaunchIntent | None:
    stmt = select(LaunchIntent).where(LaunchIntent.request_id == request_id)
    return session.scalars(stmt).one_or_none()


def open_intents(session: Session, cluster_id: int) -> list[LaunchIntent]:
    """The cluster's PENDING and SUBMITTED intents, oldest first (what a pass must drive on)."""
    stmt = (
        select(LaunchIntent)
        .where(LaunchIntent.cluster_id == cluster_id, LaunchIntent.status.in_(_OPEN_INTENT))
        .order_by(LaunchIntent.id)
    )
    return list(session.scalars(stmt))


def _lock_cluster(session: Session, cluster_id: int, now: float) -> Cluster | None:
    """Take the cluster row's write lock (PostgreSQL: row lock; SQLite: the database write lock)
    and reload it, so a read-modify-write of its JSON columns cannot lose an update."""
    stmt = update(Cluster).where(Cluster.id == cluster_id).values(updated_at=now)
    result = cast(
        CursorResult[Any], session.execute(stmt.execution_options(synchronize_session=False))
    )
    if result.rowcount != 1:
        return None
    reload = (
        select(Cluster).where(Cluster.id == cluster_id).execution_options(populate_existing=True)
    )
    return session.scalars(reload).one()


def append_failover(
    session: Session,
    cluster_id: int,
    *,
    target: LaunchTarget,
    error: str,
    now: float,
    request_id: str | None = None,
) -> list[dict[str, Any]]:
    """Append ``{provider, region, zone, instance_type, request_id, error, at}`` to the cluster's
    failover history (atomically); returns the new history."""
    cluster = _lock_cluster(session, cluster_id, now)
    if cluster is None:
        raise LookupError(f"no cluster {cluster_id}")
    entry = {
        "provider": target.provider,
        "region": target.region,
        "zone": target.zone,
        "instance_type": target.instance_type,
        "request_id": request_id,
        "error": error[:MAX_ERROR_CHARS],
        "at": now,
    }
    cluster.failover_history = [*cluster.failover_history, entry]
    session.flush()
    return cluster.failover_history


def current_target(cluster: Cluster) -> LaunchTarget:
    """The launch target the cluster's row holds now."""
    return LaunchTarget(
        provider=cluster.provider,
        region=cluster.region,
        zone=cluster.zone,
        instance_type=cluster.instance_type,
        accelerator=cluster.accelerator,
        gpus_per_node=cluster.gpus_per_node,
        num_nodes=cluster.num_nodes,
        pricing=cluster.pricing,
        price_per_hour=cluster.price_per_hour,
    )


def fail_over(
    session: Session,
    cluster: Cluster,
    *,
    target: LaunchTarget,
    error: str,
    actor: str,
    now: float,
    claim: Claim | None = None,
    request_id: str | None = None,
) -> LaunchIntent | None:
    """Give up the cluster's current target (``error`` says why) and aim at ``target``: records the
    failover, fails the open intents, writes a new PENDING intent and moves the cluster to
    PROVISIONING (from PENDING, PROVISIONING, or SETTING_UP / RUNNING when recovering lost nodes
    elsewhere; other statuses raise InvalidTransition). None, changing nothing, when another
    writer moved the cluster first or ``claim`` is no longer held."""
    where = "/".join(part or "-" for part in (target.provider, target.region, target.zone))
    reason = f"failover to {where}: {error}"[:MAX_ERROR_CHARS]
    moved = set_status(
        session,
        cluster,
        ClusterStatus.PROVISIONING,
        actor=actor,
        reason=reason,
        now=now,
        claim=claim,
    )
    if not moved:
        return None
    old = open_intents(session, cluster.id)
    append_failover(
        session,
        cluster.id,
        target=current_target(cluster),
        error=error,
        now=now,
        request_id=old[-1].request_id if old else None,
    )
    for intent in old:
        intent.last_error = error[:MAX_ERROR_CHARS]
        set_status(session, intent, IntentStatus.FAILED, actor=actor, reason="failover", now=now)
    _apply_target(cluster, target)
    intent = _new_intent(cluster, target, request_id or new_request_id(), now)
    session.add(intent)
    record_created(session, intent, actor=actor, reason="failover")
    return intent


def record_activity(session: Session, cluster_id: int, *, now: float) -> bool:
    """Stamp ``last_activity_at`` (autostop counts idleness from it)."""
    stmt = (
        update(Cluster)
        .where(Cluster.id == cluster_id)
        .values(last_activity_at=now)
        .execution_options(synchronize_session="fetch")
    )
    return cast(CursorResult[Any], session.execute(stmt)).rowcount == 1


def server_owner_id(session: Session, *, now: float) -> str:
    """This server's owner id (the ``gpulease-owner`` tag): generated once, then read back.
    Safe when two processes start at once (insert-if-absent)."""
    found = session.scalar(select(ServerIdentity.owner_id).where(ServerIdentity.id == 1))
    if found is not None:
        return found
    values = {"id": 1, "owner_id": f"gl-{secrets.token_hex(8)}", "created_at": now}
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    session.execute(insert(ServerIdentity).values(values).on_conflict_do_nothing())
    return session.scalars(select(ServerIdentity.owner_id).where(ServerIdentity.id == 1)).one()
