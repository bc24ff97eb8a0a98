"""The reconcile skeleton every loop runs on: claim → snapshot → decide → apply → per-entity
backoff, with one "lost the race" exception. Checked with a small loop over real job rows (SQLite
and PostgreSQL), a virtual clock, and then on the two real loops (clusters and managed jobs)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from sqlalchemy import Engine

from gpulease.clock import VirtualClock
from gpulease.controller import LoopSettings, Reconciler, Skeleton, StepOutcome
from gpulease.controller.job_loop import JobReconciler
from gpulease.state import Claim, Job, LostRace, claim, create_job, session_scope
from gpulease.state.claims import Claimable
from tests.controller.doubles import FakeAgents, FakeProvider
from tests.controller.test_job_rules import OWNER, make_doc, new_job


@dataclass
class CountingLoop:
    """Steps job rows; what ``apply`` does next is scripted per entity."""

    engine: Engine
    kind: str = "job"
    model: Claimable = Job
    script: dict[int, list[str]] = field(default_factory=dict)  # "ok" | "race" | "boom" | "idle"
    snapshots: list[int] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)

    def due(self) -> list[int]:
        return sorted(self.script)

    def snapshot(self, entity_id: int, retry_at: float | None) -> int | None:
        self.snapshots.append(entity_id)
        return entity_id

    def decide(self, snap: int) -> list[str]:
        return [self.script[snap].pop(0)] if self.script[snap] else []

    def apply(self, snap: int, actions: Sequence[str], held: Claim) -> StepOutcome:
        self.claims.append(held)
        for action in actions:
            if action == "race":
                raise LostRace("moved")
            if action == "boom":
                raise RuntimeError("a bug")
            if action == "later":
                return StepOutcome(retry_after=5.0)
        return StepOutcome(progress=actions == ["ok"])


def _jobs(engine: Engine, clock: VirtualClock, n: int) -> list[int]:
    with session_scope(engine) as session:
        rows = [create_job(session, name=f"j{i}", task={}, owner=OWNER, actor="t",
                           now=clock.now()) for i in range(n)]  # fmt: skip
        return [r.id for r in rows]


def _skeleton(loop: CountingLoop, clock: VirtualClock, worker: str = "w1") -> Skeleton[int, str]:
    return Skeleton(loop, loop.engine, clock=clock, worker=worker,
                    settings=LoopSettings(error_backoff_cap_s=8.0))  # fmt: skip


def test_a_step_claims_the_row_and_always_releases_it(engine: Engine, clock: VirtualClock) -> None:
    (jid,) = _jobs(engine, clock, 1)
    loop = CountingLoop(engine, script={jid: ["ok", "boom", "race"]})
    skeleton = _skeleton(loop, clock)
    assert skeleton.step(jid)
    for _ in range(2):
        clock.advance(60.0)
        assert not skeleton.step(jid)
    assert [c.kind for c in loop.claims] == ["job"] * 3
    assert len({c.token for c in loop.claims}) == 3  # a fresh claim each step
    with session_scope(engine) as session:
        row = session.get(Job, jid)
        assert row is not None and row.lock_token is None and row.last_processed_at == clock.now()


def test_an_entity_claimed_elsewhere_is_skipped(engine: Engine, clock: VirtualClock) -> None:
    (jid,) = _jobs(engine, clock, 1)
    loop = CountingLoop(engine, script={jid: ["ok"]})
    with session_scope(engine) as session:
        assert claim(session, jid, "other", until=clock.now() + 60, now=clock.now(), model=Job)
    assert not _skeleton(loop, clock).step(jid)
    assert loop.snapshots == []  # not even looked at
    clock.advance(61.0)  # the other worker's claim expired (it died)
    assert _skeleton(loop, clock).step(jid)


def test_a_lost_race_ends_the_step_quietly_without_backoff(
    engine: Engine, clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    (jid,) = _jobs(engine, clock, 1)
    loop = CountingLoop(engine, script={jid: ["race", "ok"]})
    skeleton = _skeleton(loop, clock)
    with caplog.at_level(logging.INFO, logger="gpulease.controller"):
        assert not skeleton.step(jid)
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]
    assert skeleton.step(jid)  # at once: a race is no error


def test_an_error_backs_the_entity_off_with_one_traceback_then_one_liners(
    engine: Engine, clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    first, other = _jobs(engine, clock, 2)
    loop = CountingLoop(engine, script={first: ["boom", "boom", "ok"], other: ["ok", "ok"]})
    skeleton = _skeleton(loop, clock)
    with caplog.at_level(logging.WARNING, logger="gpulease.controller"):
        assert skeleton.run_pass()  # the other entity's step still ran
        assert loop.snapshots == [first, other]
        assert not skeleton.step(first)  # backing off: not even a snapshot
        assert loop.snapshots == [first, other]
        clock.advance(skeleton.error_until[first] - clock.now())
        assert not skeleton.step(first)  # fails again: a longer wait
        wait = skeleton.error_until[first] - clock.now()
        assert 0.0 < wait <= 8.0
        clock.advance(wait)
        assert skeleton.step(first)
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and "a bug" in caplog.text and "2 in a row" in caplog.text
    assert first not in skeleton.errors and first not in skeleton.error_until


def test_a_domain_backoff_is_handed_to_the_next_snapshot(
    engine: Engine, clock: VirtualClock
) -> None:
    (jid,) = _jobs(engine, clock, 1)
    seen: list[float | None] = []

    class Remembering(CountingLoop):
        def snapshot(self, entity_id: int, retry_at: float | None) -> int | None:
            seen.append(retry_at)
            return entity_id

    loop = Remembering(engine, script={jid: ["later", "idle"]})
    skeleton = _skeleton(loop, clock)
    skeleton.step(jid)
    skeleton.step(jid)
    assert seen == [None, clock.now() + 5.0]


def test_the_jobs_loop_backs_off_a_failing_job_and_steps_the_others(
    engine: Engine, clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A job whose step raises (here: a document the loop cannot read) no longer retries with a
    traceback on every pass: it backs off, and the other jobs go on."""
    good = new_job(engine, clock, make_doc(), name="good")
    bad = new_job(engine, clock, make_doc(), name="bad")
    with session_scope(engine) as session:
        row = session.get(Job, bad)
        assert row is not None
        row.task = {"version": 2, "run": {"run": 3}}  # no task_id, a run that is no text
    provider = FakeProvider("sim")
    jobs = JobReconciler(engine, {"sim": provider}, FakeAgents(), clock=clock, owner=OWNER)
    with caplog.at_level(logging.WARNING, logger="gpulease.controller"):
        for _ in range(5):
            jobs.run_pass()
    assert len([r for r in caplog.records if r.exc_info]) == 1
    assert bad in jobs.skeleton.error_until
    with session_scope(engine) as session:
        assert (g := session.get(Job, good)) is not None and g.attempt == 1  # it went on


def test_the_cluster_loop_runs_on_the_same_skeleton(reconciler: Reconciler) -> None:
    assert isinstance(reconciler.skeleton, Skeleton) and reconciler.skeleton.loop is reconciler
