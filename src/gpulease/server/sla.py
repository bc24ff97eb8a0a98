"""The server's side of ``GET /v1/sla``: one read-only transaction over the state DB through
:func:`gpulease.cost.sla.report`, with the server's config and clock. Moves no states."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine

from gpulease.clock import Clock
from gpulease.cost.sla import report
from gpulease.state import session_scope


def sla_view(
    engine: Engine, config: Mapping[str, Any], clock: Clock, month: str | None
) -> dict[str, Any]:
    with session_scope(engine) as session:
        return report(session, config, month=month, now=clock.now())
