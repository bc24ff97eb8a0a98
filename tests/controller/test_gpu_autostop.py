"""Autostop's load rule: a RUNNING cluster whose GPUs stay below ``autostop_gpu_below`` for
``autostop_minutes`` is stopped (or downed), with the reason in its history. Real ``run_pass``es
on a real SQLite DB in virtual time; the telemetry relay's part (telemetry points, the
``gpu_active_at`` stamp) is written into the DB as the relay writes it."""

from __future__ import annotations

from sqlalchemy import Engine

from gpulease.clock import VirtualClock
from gpulease.controller import ClusterView, LaunchDocument, Reconciler, Snapshot, decide
from gpulease.controller.actions import SetCluster
from gpulease.controller.lifecycle import TELEMETRY_FRESH_S
from gpulease.state import ClusterStatus, history, session_scope
from gpulease.state.models import Cluster, TelemetryPoint
from gpulease.wire import RunSpec
from tests.controller.conftest import OWNER, cluster_row, new_cluster, target
from tests.controller.doubles import FakeAgents, FakeProvider
from tests.controller.test_reconciler import run, run_until

C = ClusterStatus
MIN = 60.0


def _rule(engine: Engine, cid: int, *, below: float | None = 5.0) -> None:
    with session_scope(engine) as session:
        row = session.get(Cluster, cid)
        assert row is not None
        row.autostop_gpu_below = below


def _relay(
    engine: Engine, cid: int, clock: VirtualClock, *, util: float, below: float = 5.0
) -> None:
    """What the relay writes on one pass: a 10 s point with the node's GPUs, and the busy stamp
    when a GPU is at or above the threshold."""
    now = clock.now()
    gpus = [{"index": 0, "utilization_pct": util}] if util >= 0 else []
    with session_scope(engine) as session:
        session.add(TelemetryPoint(cluster_id=cid, cluster_name="c1", job_id=None, node_rank=0,
                                   resolution_s=10, at=now - now % 10, samples=1,
                                   data={"gpus": gpus}))  # fmt: skip
        if util >= below:
            row = session.get(Cluster, cid)
            assert row is not None
            row.gpu_active_at = now


def _watch(
    reconciler: Reconciler,
    engine: Engine,
    cid: int,
    clock: VirtualClock,
    minutes: float,
    *,
    util: float,
) -> None:
    """``minutes`` of virtual time, a relay pass and a reconcile pass every 30 s."""
    for _ in range(int(minutes * 2)):
        _relay(engine, cid, clock, util=util)
        run(reconciler, clock, step=30.0)


def _running(reconciler: Reconciler, engine: Engine, clock: VirtualClock, **kw: object) -> int:
    cid = new_cluster(engine, clock, **kw)  # type: ignore[arg-type]
    _rule(engine, cid)
    run_until(reconciler, clock, engine, cid, C.RUNNING)
    return cid


def _reasons(engine: Engine, cid: int) -> list[str]:
    with session_scope(engine) as session:
        row = session.get(Cluster, cid)
        assert row is not None
        return [change.reason for change in history(session, row)]


def test_gpus_below_the_threshold_for_the_idle_minutes_stop_a_running_cluster(
    engine: Engine, reconciler: Reconciler, provider: FakeProvider, clock: VirtualClock
) -> None:
    cid = _running(reconciler, engine, clock, autostop=30)
    _watch(reconciler, engine, cid, clock, 29, util=1.0)
    assert cluster_row(engine, cid).status is C.RUNNING  # not idle long enough yet
    _watch(reconciler, engine, cid, clock, 1.5, util=1.0)
    row = run_until(reconciler, clock, engine, cid, C.STOPPED)
    assert "autostop: GPUs below 5% for 30 min" in _reasons(engine, cid)
    assert provider.live() and row.nodes[0].state.value == "stopped"


def test_busy_gpus_keep_it_running_and_idleness_counts_from_the_last_busy_moment(
    engine: Engine, reconciler: Reconciler, clock: VirtualClock
) -> None:
    cid = _running(reconciler, engine, clock, autostop=10)
    _watch(reconciler, engine, cid, clock, 60, util=50.0)
    assert cluster_row(engine, cid).status is C.RUNNING
    _watch(reconciler, engine, cid, clock, 9, util=0.0)  # the load fell 9 min ago
    assert cluster_row(engine, cid).status is C.RUNNING
    _watch(reconciler, engine, cid, clock, 2, util=0.0)
    assert cluster_row(engine, cid).status in (C.STOPPING, C.STOPPED)


def test_without_gpu_telemetry_or_with_stale_telemetry_the_rule_does_nothing(
    engine: Engine, reconciler: Reconciler, clock: VirtualClock
) -> None:
    cid = _running(reconciler, engine, clock, autostop=1)
    run(reconciler, clock, passes=20, step=60.0)  # no relay at all: unknown counts as busy
    assert cluster_row(engine, cid).status is C.RUNNING
    _relay(engine, cid, clock, util=-1)  # a point without GPUs (a CPU node)
    run(reconciler, clock, passes=5, step=60.0)
    assert cluster_row(engine, cid).status is C.RUNNING
    _relay(engine, cid, clock, util=0.0)
    clock.advance(TELEMETRY_FRESH_S + 20)  # the relay stopped after that point
    run(reconciler, clock, passes=3)
    assert cluster_row(engine, cid).status is C.RUNNING


def test_with_down_it_terminates(
    engine: Engine, reconciler: Reconciler, provider: FakeProvider, clock: VirtualClock
) -> None:
    cid = _running(reconciler, engine, clock, autostop=1, down=True)
    _watch(reconciler, engine, cid, clock, 2, util=0.0)
    run_until(reconciler, clock, engine, cid, C.TERMINATED)
    assert provider.live() == []
    assert "autostop: GPUs below 5% for 1 min" in _reasons(engine, cid)


def test_a_cluster_without_the_rule_is_never_stopped_while_running(
    engine: Engine, reconciler: Reconciler, agents: FakeAgents, clock: VirtualClock
) -> None:
    cid = _running(reconciler, engine, clock, autostop=1)
    _rule(engine, cid, below=None)
    _watch(reconciler, engine, cid, clock, 5, util=0.0)
    assert cluster_row(engine, cid).status is C.RUNNING
    agents.finish_all()  # the classic rule still applies once the task ended
    run_until(reconciler, clock, engine, cid, C.SUCCEEDED)
    clock.advance(2 * MIN)
    run_until(reconciler, clock, engine, cid, C.STOPPED)


def _view(**kw: object) -> ClusterView:
    fields: dict[str, object] = dict(
        id=1, name="c", owner=OWNER, status=C.RUNNING, status_changed_at=0.0, target=target(),
        document=LaunchDocument(RunSpec(run="x"), (target(),)), failovers=0,
        autostop_minutes=10, autostop_down=False, last_activity_at=0.0,
        autostop_gpu_below=5.0, gpu_active_at=None, gpu_seen_at=1190.0,
    )  # fmt: skip
    fields.update(kw)
    return ClusterView(**fields)  # type: ignore[arg-type]


def _decide(now: float, can_stop: bool = True, **kw: object) -> list[SetCluster]:
    snap = Snapshot(now=now, cluster=_view(**kw), nodes=(), intents=(), can_stop=can_stop)
    return [a for a in decide(snap) if isinstance(a, SetCluster)]


def test_idleness_counts_from_the_latest_of_busy_running_and_activity() -> None:
    why = "autostop: GPUs below 5% for 10 min"
    assert _decide(1200.0) == [SetCluster(C.STOPPING, why)]
    assert _decide(1200.0, can_stop=False) == [SetCluster(C.TERMINATING, why)]
    assert _decide(1200.0, autostop_down=True) == [SetCluster(C.TERMINATING, why)]
    assert _decide(1200.0, gpu_active_at=700.0) == []  # busy 500 s ago
    assert _decide(1200.0, status_changed_at=900.0) == []  # running for only 300 s
    assert _decide(1200.0, last_activity_at=1000.0) == []  # autostop was set 200 s ago
    assert _decide(1200.0, autostop_minutes=None) == []
    assert _decide(1200.0, gpu_seen_at=None) == []
    assert _decide(1200.0 + TELEMETRY_FRESH_S, gpu_seen_at=1190.0) == []
