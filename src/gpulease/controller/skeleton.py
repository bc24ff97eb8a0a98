"""The one reconcile skeleton every loop runs on — clusters, managed jobs, and the services,
pools and budgets to come: **claim → snapshot → pure decision → apply → per-entity backoff**.

A loop supplies an :class:`EntityLoop` (which entities are due, how to snapshot one, the pure
``decide``, how to apply its actions, and which table its claims live in); :class:`Skeleton`
drives it. :class:`ClaimedLoop` is the base every loop class derives from: its engine, clock,
owner, worker name and skeleton, and ``run_pass`` / ``step``. For each due entity, one step:

1. skip it while it backs off after an error (no DB or provider call at all);
2. **claim** its row (token + expiry, :func:`gpulease.state.claim`) in a short transaction —
   claimed elsewhere: skip;
3. **snapshot** it (detached data: DB rows, what the provider lists, what agents answer);
4. **decide**: a pure function of the snapshot → actions;
5. **apply** them under the claim (every write guarded by it, status writes compare-and-set);
6. **release** the claim (always, in ``finally``).

A write that lost its compare-and-set or its claim raises :class:`~gpulease.state.LostRace`: the
step ends quietly (a debug line) and the next pass decides again on fresh data. Any other error is
logged — with its traceback the first time, one line while it repeats — and the entity backs off
(capped, jittered exponential: :func:`gpulease.backoff.backoff_delay`) before its next try; a
step that makes progress clears the backoff. A step may also ask for a *domain* backoff
(``StepOutcome.retry_after``, e.g. after a provider's retryable launch error): it is handed to the
next snapshot, which decides what waits. The loop never dies of one entity. Moves no states
itself.
"""

from __future__ import annotations

import logging
import os
import socket
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from gpulease.backoff import backoff_delay
from gpulease.clock import Clock
from gpulease.state import Claim, LostRace, check_held, claim, release, session_scope
from gpulease.state.claims import Claimable

log = logging.getLogger("gpulease.controller")

SnapT = TypeVar("SnapT")
ActT = TypeVar("ActT")


@dataclass(frozen=True, slots=True)
class LoopSettings:
    """``claim_ttl_s``: how long a claim lasts (a dead worker's claim is free after it);
    ``resting_every_s``: how often resting entities are looked at; ``error_backoff_cap_s``: the
    longest wait after repeated errors."""

    claim_ttl_s: float = 60.0
    resting_every_s: float = 10.0
    error_backoff_cap_s: float = 30.0


@dataclass
class StepOutcome:
    """What a step did: ``progress`` (anything changed) and ``retry_after`` (seconds of domain
    backoff the step asks for, handed to the next snapshot)."""

    progress: bool = False
    retry_after: float | None = None


class EntityLoop(Protocol[SnapT, ActT]):
    """What one loop supplies to the skeleton."""

    kind: str  # "cluster", "job", ... (logs)
    model: Claimable  # the table its claims live in

    def due(self) -> list[int]:
        """The entities to step this pass, in order."""
        ...

    def snapshot(self, entity_id: int, retry_at: float | None) -> SnapT | None:
        """The entity as data (None: it is gone); ``retry_at`` is its pending domain backoff."""
        ...

    def decide(self, snap: SnapT) -> Sequence[ActT]:
        """The actions of one step: a pure function of the snapshot."""
        ...

    def apply(self, snap: SnapT, actions: Sequence[ActT], held: Claim) -> StepOutcome:
        """Carry the actions out under the claim (called with none too: a loop may keep books
        on every pass). Raises :class:`LostRace` when a write finds its row moved."""
        ...


class Skeleton(Generic[SnapT, ActT]):
    """Drives one :class:`EntityLoop`: claims, steps, releases, backs off."""

    def __init__(
        self,
        loop: EntityLoop[SnapT, ActT],
        engine: Engine,
        *,
        clock: Clock,
        worker: str,
        settings: LoopSettings | None = None,
    ) -> None:
        self.loop = loop
        self.engine = engine
        self.clock = clock
        self.worker = worker
        self.settings = settings or LoopSettings()
        self.retry_at: dict[int, float] = {}  # domain backoff, handed to the snapshot
        self.errors: dict[int, int] = {}  # failed steps in a row
        self.error_until: dict[int, float] = {}  # no step before this time (error backoff)

    def run_pass(self) -> bool:
        """One step for every due entity; True when any step changed something."""
        progress = False
        for entity_id in self.loop.due():
            progress |= self.step(entity_id)
        return progress

    def step(self, entity_id: int) -> bool:
        """Claim, step and release one entity; False when it backs off, is claimed elsewhere,
        lost a race or nothing changed."""
        now = self.clock.now()
        if now < self.error_until.get(entity_id, float("-inf")):
            return False
        held = self._claim(entity_id, now)
        if held is None:
            return False
        try:
            outcome = self._step(entity_id, held)
        except LostRace as exc:
            log.debug("%s %d: lost a race: %s", self.loop.kind, entity_id, exc)
            return False
        except Exception as exc:
            self._failed(entity_id, exc)
            return False
        finally:
            with session_scope(self.engine) as session:
                release(session, held, now=self.clock.now())
        self._done(entity_id, outcome)
        return outcome.progress

    def _claim(self, entity_id: int, now: float) -> Claim | None:
        until = now + self.settings.claim_ttl_s
        with session_scope(self.engine) as session:
            return claim(session, entity_id, self.worker, until=until, now=now,
                         model=self.loop.model)  # fmt: skip

    def _step(self, entity_id: int, held: Claim) -> StepOutcome:
        snap = self.loop.snapshot(entity_id, self.retry_at.get(entity_id))
        if snap is None:
            return StepOutcome()
        actions = self.loop.decide(snap)
        return self.loop.apply(snap, actions, held)

    def _done(self, entity_id: int, outcome: StepOutcome) -> None:
        if outcome.retry_after is not None:
            self.retry_at[entity_id] = self.clock.now() + outcome.retry_after
        elif outcome.progress:
            self.retry_at.pop(entity_id, None)
        self.errors.pop(entity_id, None)  # the step ran without an error
        self.error_until.pop(entity_id, None)

    def _failed(self, entity_id: int, exc: Exception) -> None:
        errors = self.errors[entity_id] = self.errors.get(entity_id, 0) + 1
        delay = backoff_delay(errors, cap=self.settings.error_backoff_cap_s)
        self.error_until[entity_id] = self.clock.now() + delay
        if errors == 1:
            log.exception("%s %d: step failed; backing off", self.loop.kind, entity_id)
        else:
            log.warning("%s %d: step failed again (%d in a row; next try in %.1f s): %s: %s",
                        self.loop.kind, entity_id, errors, delay, type(exc).__name__,
                        exc)  # fmt: skip


def worker_prefix(owner: str) -> str:
    """The start of every worker name of ``owner`` on this host (``owner@host:``)."""
    return f"{owner}@{socket.gethostname()}:"


class ClaimedLoop(ABC, Generic[SnapT, ActT]):
    """A loop class on the skeleton: an :class:`EntityLoop` over the rows of ``model``, claimed
    by this process's worker (``owner@host:pid``) and driven by its :class:`Skeleton`.
    ``_held`` is the claim of the entity being applied (for :func:`held_session`)."""

    kind: str
    model: Claimable

    def __init__(
        self, engine: Engine, *, clock: Clock, owner: str, settings: LoopSettings | None = None
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.owner = owner
        self.worker = f"{worker_prefix(owner)}{os.getpid()}"
        self.skeleton: Skeleton[SnapT, ActT] = Skeleton(
            self, engine, clock=clock, worker=self.worker, settings=settings
        )
        self.settings = self.skeleton.settings
        self._held: Claim | None = None

    @abstractmethod
    def due(self) -> list[int]: ...

    @abstractmethod
    def snapshot(self, entity_id: int, retry_at: float | None) -> SnapT | None: ...

    @abstractmethod
    def decide(self, snap: SnapT) -> Sequence[ActT]: ...

    @abstractmethod
    def apply(self, snap: SnapT, actions: Sequence[ActT], held: Claim) -> StepOutcome: ...

    def run_pass(self) -> bool:
        """One step for every due entity; True when any step changed something."""
        return self.skeleton.run_pass()

    def step(self, entity_id: int) -> bool:
        """Claim the entity, take one step, release it."""
        return self.skeleton.step(entity_id)


@contextmanager
def held_session(engine: Engine, held: Claim | None) -> Iterator[Session]:
    """A write transaction of a step: raises :class:`~gpulease.state.LostRace` when the step's
    claim ``held`` is gone (no check without one)."""
    with session_scope(engine) as session:
        if held is not None:
            check_held(session, held)
        yield session
