"""Status changes of clusters, nodes, launch intents, managed jobs, services and pools: the only
writer of every status column.

Owns :func:`set_status` (checks the transition table, then a compare-and-set
``UPDATE … WHERE id = :id AND status = :expected`` — optionally guarded by a reconcile claim — and
a :class:`~gpulease.state.models.StatusChange` history row), :func:`record_created` (the history
row of a new entity), :func:`history`, :func:`timed_out` and :func:`list_timed_out`.

It moves every status of :mod:`gpulease.state.machines`, always through the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias, cast

from sqlalchemy import CursorResult, and_, or_, select, update
from sqlalchemy.orm import InstrumentedAttribute, Session
from sqlalchemy.orm.attributes import set_committed_value

from gpulease.state.claims import Claim, claim_guard
from gpulease.state.machines import (
    TRANSIENT_TIMEOUTS,
    ClusterStatus,
    IntentStatus,
    JobStatus,
    NodeState,
    PoolStatus,
    ServiceStatus,
    Status,
    StatusEnum,
    check_transition,
    timeout_exit,
)
from gpulease.state.models import Cluster, Job, LaunchIntent, Node, Pool, Service, StatusChange

Entity: TypeAlias = Cluster | Node | LaunchIntent | Job | Service | Pool

_KIND: dict[type[Entity], tuple[str, str, StatusEnum]] = {
    Cluster: ("cluster", "status", ClusterStatus),
    Node: ("node", "state", NodeState),
    LaunchIntent: ("intent", "status", IntentStatus),
    Job: ("job", "status", JobStatus),
    Service: ("service", "status", ServiceStatus),
    Pool: ("pool", "status", PoolStatus),
}


def _machine(model: type[Entity]) -> tuple[str, str, StatusEnum]:
    try:
        return _KIND[model]
    except KeyError:
        raise TypeError(f"{model.__name__} has no status machine") from None


def entity_kind(entity: Entity) -> str:
    """``cluster``, ``node``, ``intent``, ``job``, ``service`` or ``pool``: the ``entity_kind`` of
    its history rows."""
    return _machine(type(entity))[0]


def status_of(entity: Entity) -> Status:
    """The loaded status (``Cluster.status``, ``Node.state``, ``LaunchIntent.status``)."""
    return cast(Status, getattr(entity, _machine(type(entity))[1]))


def set_status(
    session: Session,
    entity: Entity,
    new: Status,
    *,
    expected: Status | None = None,
    actor: str,
    reason: str,
    now: float,
    claim: Claim | None = None,
) -> bool:
    """Move ``entity`` from ``expected`` (default: its loaded status) to ``new``.

    Raises :class:`~gpulease.state.machines.InvalidTransition` when the table forbids
    ``expected → new``. Returns False — and changes nothing — when another writer moved the row
    first (or, with ``claim``, when the claim is no longer held); the entity's status is then
    reloaded on next access. On True the entity is updated in place and a history row is added.
    """
    kind, attr, enum_cls = _machine(type(entity))
    if not isinstance(new, enum_cls):
        raise TypeError(f"{kind} status must be a {enum_cls.__name__}, not {new!r}")
    current = expected if expected is not None else status_of(entity)
    check_transition(current, new, kind)
    model = type(entity)
    column: InstrumentedAttribute[Any] = getattr(model, attr)
    stmt = (
        update(model)
        .where(model.id == entity.id, column == current)
        .values({attr: new, "status_changed_at": now, "updated_at": now})
        .execution_options(synchronize_session=False)
    )
    if claim is not None:
        stmt = stmt.where(claim_guard(model, claim))
    result = cast(CursorResult[Any], session.execute(stmt))
    if result.rowcount != 1:
        session.expire(entity, [attr, "status_changed_at", "updated_at"])
        return False
    for name, value in ((attr, new), ("status_changed_at", now), ("updated_at", now)):
        set_committed_value(entity, name, value)
    session.add(
        StatusChange(
            entity_kind=kind,
            entity_id=entity.id,
            from_status=current.value,
            to_status=new.value,
            at=now,
            actor=actor,
            reason=reason,
        )
    )
    return True


def record_created(session: Session, entity: Entity, *, actor: str, reason: str) -> None:
    """Add the history row of a new entity (``from_status`` NULL); flushes to get its id."""
    if entity.id is None:
        session.add(entity)
        session.flush()
    session.add(
        StatusChange(
            entity_kind=entity_kind(entity),
            entity_id=entity.id,
            from_status=None,
            to_status=status_of(entity).value,
            at=entity.created_at,
            actor=actor,
            reason=reason,
        )
    )


def history(session: Session, entity: Entity) -> list[StatusChange]:
    """Every status change of ``entity``, oldest first (creation included)."""
    stmt = (
        select(StatusChange)
        .where(StatusChange.entity_kind == entity_kind(entity), StatusChange.entity_id == entity.id)
        .order_by(StatusChange.id)
    )
    return list(session.scalars(stmt))


def timed_out(entity: Entity, now: float) -> Status | None:
    """The exit status when the entity's transient status has outlived its timeout; else None."""
    return timeout_exit(status_of(entity), entity.status_changed_at, now)


def list_timed_out(session: Session, model: type[Entity], now: float) -> Sequence[Entity]:
    """Every row of ``model`` whose transient status has outlived its timeout at ``now``."""
    _kind, attr, enum_cls = _machine(model)
    column: InstrumentedAttribute[Any] = getattr(model, attr)
    conditions = [
        and_(column == status, model.status_changed_at <= now - rule.seconds)
        for status, rule in TRANSIENT_TIMEOUTS[enum_cls].items()
    ]
    return list(session.scalars(select(model).where(or_(*conditions)).order_by(model.id)))
