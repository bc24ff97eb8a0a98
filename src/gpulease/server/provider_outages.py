"""Persisting provider API outages for ``gpulease sla`` (``provider_outages``, migration 0008;
docs/cost-sla.md).

Owns :class:`ProviderOutages`, a watcher of :class:`~gpulease.server.provider_calls.ProviderCalls`:
the first call that raises :class:`~gpulease.providers.base.ProviderUnavailable` opens a row for
its provider (``started_at``), later failures advance ``last_seen_at`` and ``errors`` (written at
most every :data:`WRITE_EVERY_S`, so an outage costs a few writes, not one per call), and the
first call that gets an answer — any other error included (a ``CapacityError`` is the API
answering) — closes it (``ended_at``). The hot path is a dict lookup: no DB work while the API
answers. A row a dead server left open is closed at its ``last_seen_at`` when the next server
starts (:meth:`close_stale`). A DB error here is logged and never reaches the provider call.
Moves no states.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from sqlalchemy import Engine, select, update
from sqlalchemy.exc import SQLAlchemyError

from gpulease.clock import Clock
from gpulease.errors import GpuleaseError
from gpulease.providers.base import ProviderUnavailable
from gpulease.state import session_scope
from gpulease.state.models import ProviderOutage

log = logging.getLogger(__name__)
WRITE_EVERY_S = 10.0
_ERROR_CHARS = 500


@dataclass
class _Open:
    row_id: int
    errors: int
    written_at: float
    last_error: str


class ProviderOutages:
    """Opens, advances and closes ``provider_outages`` rows from the server's provider calls."""

    def __init__(self, engine: Engine, clock: Clock) -> None:
        self.engine = engine
        self.clock = clock
        self._lock = threading.Lock()
        self._open: dict[str, _Open] = {}

    def close_stale(self) -> int:
        """Close the rows a previous server left open, at their ``last_seen_at``."""
        with session_scope(self.engine) as session:
            result = session.execute(
                update(ProviderOutage)
                .where(ProviderOutage.ended_at.is_(None))
                .values(ended_at=ProviderOutage.last_seen_at)
            )
            return int(getattr(result, "rowcount", 0) or 0)

    def answered(self, provider: str, operation: str) -> None:
        if provider not in self._open:
            return
        with self._lock:
            found = self._open.pop(provider, None)
            if found is not None:
                self._write(found, ended=True)

    def failed(self, provider: str, operation: str, exc: BaseException) -> None:
        if not isinstance(exc, ProviderUnavailable):
            self.answered(provider, operation)
            return
        error = f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]
        with self._lock:
            found = self._open.get(provider)
            now = self.clock.now()
            if found is None:
                row_id = self._insert(provider, operation, error, now)
                if row_id is not None:
                    self._open[provider] = _Open(row_id, 1, now, error)
                return
            found.errors += 1
            found.last_error = error
            if now - found.written_at >= WRITE_EVERY_S:
                self._write(found, ended=False)

    def _insert(self, provider: str, operation: str, error: str, now: float) -> int | None:
        try:
            with session_scope(self.engine) as session:
                row = ProviderOutage(provider=provider, region=None, operation=operation,
                                     started_at=now, last_seen_at=now, ended_at=None, errors=1,
                                     last_error=error)  # fmt: skip
                session.add(row)
                session.flush()
                return row.id
        except (GpuleaseError, SQLAlchemyError) as exc:
            log.warning("provider %s outage not recorded: %s", provider, exc)
            return None

    def _write(self, found: _Open, *, ended: bool) -> None:
        now = self.clock.now()
        values: dict[str, object] = {"last_seen_at": now, "errors": found.errors,
                                     "last_error": found.last_error}  # fmt: skip
        if ended:
            values["ended_at"] = now
        try:
            with session_scope(self.engine) as session:
                session.execute(
                    update(ProviderOutage).where(ProviderOutage.id == found.row_id).values(values)
                )
            found.written_at = now
        except (GpuleaseError, SQLAlchemyError) as exc:
            log.warning("provider outage %s not updated: %s", found.row_id, exc)

    def open_rows(self) -> list[int]:
        """The ids of the rows still open in the DB (for tests and ``/v1/sla`` callers)."""
        with session_scope(self.engine) as session:
            query = select(ProviderOutage.id).where(ProviderOutage.ended_at.is_(None))
            return list(session.scalars(query))
