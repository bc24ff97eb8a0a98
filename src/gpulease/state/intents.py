"""Intent before side effect: run a provider call only once its launch intent is committed, and
record what came of it.

Owns :class:`IntentView` (a detached snapshot of an intent, what the side effect gets) and
:func:`submit_intent`, which:

1. in a transaction of its own: checks the intent is open (PENDING or SUBMITTED), counts the
   attempt, commits;
2. calls the side effect outside any transaction (a provider ``launch`` with
   ``request_id`` as its idempotency token — safe to repeat after a crash);
3. in a second transaction: PENDING → SUBMITTED on success; → FAILED on a ``Permanent`` error;
   on any other error only ``last_error`` is written and the intent stays open for the next pass.

States it moves: intent PENDING → SUBMITTED, PENDING|SUBMITTED → FAILED.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import Engine, select, update

from gpulease.clock import Clock
from gpulease.errors import Permanent
from gpulease.state.db import session_scope
from gpulease.state.machines import IntentStatus
from gpulease.state.models import Cluster, LaunchIntent
from gpulease.state.repository import MAX_ERROR_CHARS, get_intent
from gpulease.state.status import set_status

T = TypeVar("T")
_OPEN = (IntentStatus.PENDING, IntentStatus.SUBMITTED)


class IntentClosed(Permanent):
    """The intent is DONE or FAILED (or unknown): its side effect must not run again."""


@dataclass(frozen=True, slots=True)
class IntentView:
    """What a launch needs, read from the committed intent and its cluster."""

    request_id: str
    cluster_id: int
    cluster_name: str
    owner: str
    provider: str
    region: str | None
    zone: str | None
    instance_type: str | None
    pricing: str
    num_nodes: int
    attempt: int  # 1 on the first call, counting calls a crash interrupted


def _begin(engine: Engine, request_id: str, now: float) -> IntentView:
    with session_scope(engine) as session:
        bump = (
            update(LaunchIntent)
            .where(LaunchIntent.request_id == request_id, LaunchIntent.status.in_(_OPEN))
            .values(attempt=LaunchIntent.attempt + 1, updated_at=now)
            .returning(LaunchIntent.id)
        )
        intent_id = session.scalars(bump).one_or_none()
        if intent_id is None:
            intent = get_intent(session, request_id)
            state = intent.status.value if intent else "unknown"
            raise IntentClosed(f"launch intent {request_id} is {state}")
        row = session.execute(
            select(LaunchIntent, Cluster.name, Cluster.owner)
            .join(Cluster, Cluster.id == LaunchIntent.cluster_id)
            .where(LaunchIntent.id == intent_id)
        ).one()
        intent, name, owner = row
        return IntentView(
            request_id=intent.request_id,
            cluster_id=intent.cluster_id,
            cluster_name=name,
            owner=owner,
            provider=intent.provider,
            region=intent.region,
            zone=intent.zone,
            instance_type=intent.instance_type,
            pricing=intent.pricing,
            num_nodes=intent.num_nodes,
            attempt=intent.attempt,
        )


def _finish(
    engine: Engine,
    request_id: str,
    *,
    new: IntentStatus | None,
    error: str | None,
    actor: str,
    now: float,
) -> None:
    with session_scope(engine) as session:
        intent = get_intent(session, request_id)
        if intent is None or intent.status not in _OPEN:
            return  # closed meanwhile (a timeout or a failover): nothing to record
        if error is not None:
            intent.last_error = error[:MAX_ERROR_CHARS]
            intent.updated_at = now
        if new is not None and new is not intent.status:
            set_status(session, intent, new, actor=actor, reason=error or "accepted", now=now)


def submit_intent(
    engine: Engine,
    request_id: str,
    effect: Callable[[IntentView], T],
    *,
    clock: Clock,
    actor: str,
) -> T:
    """Run ``effect`` for the committed, open intent ``request_id`` and record its outcome (see the
    module docstring). Raises :class:`IntentClosed` without calling ``effect`` when the intent is
    closed or unknown; re-raises what ``effect`` raises."""
    view = _begin(engine, request_id, clock.now())
    try:
        result = effect(view)
    except Permanent as exc:
        message = f"{type(exc).__name__}: {exc}"
        now = clock.now()
        _finish(engine, request_id, new=IntentStatus.FAILED, error=message, actor=actor, now=now)
        raise
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}"
        _finish(engine, request_id, new=None, error=message, actor=actor, now=clock.now())
        raise
    _finish(
        engine, request_id, new=IntentStatus.SUBMITTED, error=None, actor=actor, now=clock.now()
    )
    return result
