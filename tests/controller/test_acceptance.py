"""Acceptance on launch against the provider double and bench-running agent doubles, in virtual
time on the real state DB: every node is benched before setup; a node far below its peer is
terminated and replaced by a node of the same rank, and the bench runs again; past
``max_replacements`` the target is given up (failover, then FAILED); the offer that delivered
the failing node is ranked last; a bench without a report fails its node. The judging itself
(peers, ``min_ratio``, minimums, families) is tested as the pure function it is."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from sqlalchemy import Engine

from gpulease.bench.report import BenchReport, Check
from gpulease.clock import VirtualClock
from gpulease.controller import Reconciler
from gpulease.controller.acceptance import AcceptancePolicy, judged
from gpulease.controller.acceptance_store import degraded_offers
from gpulease.controller.ports import AgentReport, Liveness, NodeRef
from gpulease.state import ClusterStatus, IntentStatus, NodeState, history, session_scope
from gpulease.state.bench import list_bench_runs
from gpulease.state.models import Cluster, Node
from gpulease.wire import LogChunk, NodeTask, RunSpec, TaskState
from tests.controller.conftest import cluster_row, new_cluster, target
from tests.controller.doubles import FakeAgents, FakeProvider, _Port

C = ClusterStatus


def _report(node: str, speed: float, disk: float = 2000.0, started: float = 0.0) -> BenchReport:
    checks = (
        Check.measured("matmul.fp32", 0.05 * speed),
        Check.measured("disk.seq_read", disk),
        Check.skipped("gpu.count", "no GPU on this node"),
    )
    return BenchReport(node, started, 1.0, True, "cpu", None, 0, checks)


@dataclass
class BenchAgents(FakeAgents):
    """Agents whose acceptance tasks end at once with a report: ``speed`` (by instance id, 1.0
    unless set) scales the matmul figure; an instance in ``silent`` prints no report."""

    speed: dict[str, float] = field(default_factory=dict)
    silent: set[str] = field(default_factory=set)
    benched: dict[str, list[NodeTask]] = field(default_factory=dict)

    def agent(self, node: NodeRef) -> _Port:
        return _BenchPort(self[node.instance_id], self, node.instance_id)


@dataclass
class _BenchPort(_Port):
    agents: BenchAgents
    instance_id: str

    def _bench(self, task_id: str) -> NodeTask | None:
        done = self.agents.benched.get(self.instance_id, [])
        return next((t for t in done if t.task_id == task_id), None)

    def poll(self, task_id: str) -> AgentReport:
        if "-accept-" not in task_id:
            return super().poll(task_id)
        found = self._bench(task_id)
        state = TaskState.SUCCEEDED if found else None
        return AgentReport(Liveness.ALIVE, state, 0 if found else None)

    def submit(self, task: NodeTask) -> None:
        if "-accept-" not in task.task_id:
            return super().submit(task)
        self.agents.benched.setdefault(self.instance_id, []).append(task)

    def logs(self, task_id: str, offset: int, limit: int | None = None) -> LogChunk:
        if "-accept-" not in task_id:
            return super().logs(task_id, offset, limit)
        speed = self.agents.speed.get(self.instance_id, 1.0)
        text = "matmul ...\n"
        if self.instance_id not in self.agents.silent:
            ids = [t.task_id for t in self.agents.benched[self.instance_id]]
            started = 1.0 + ids.index(task_id)  # each round's run starts at its own time
            text += _report(self.instance_id, speed, started=started).marker_line() + "\n"
        data = text.encode()[offset:]
        return LogChunk(data, offset, offset + len(data), True, TaskState.SUCCEEDED)


ACCEPT = {"min_ratio": 0.5, "minimums": {}, "max_replacements": 1, "checks": None,
          "degraded_for_s": 3600.0}  # fmt: skip


def _cluster(engine: Engine, clock: VirtualClock, plans: int = 1, **accept: object) -> int:
    run = RunSpec(run="python train.py", acceptance={**ACCEPT, **accept})
    regions = [f"r{i + 1}" for i in range(plans)]
    return new_cluster(engine, clock, plans=tuple(target(r, nodes=2) for r in regions), run=run)


def _reconciler(engine: Engine, provider: FakeProvider, agents: BenchAgents,
                clock: VirtualClock) -> Reconciler:  # fmt: skip
    from gpulease.controller import LoopSettings

    return Reconciler(engine, {provider.name: provider}, agents, clock=clock, owner="gl-owner",
                      settings=LoopSettings(resting_every_s=0.0))  # fmt: skip


def _until(rec: Reconciler, clock: VirtualClock, engine: Engine, cid: int, status: C, *,
           passes: int = 40) -> Cluster:  # fmt: skip
    for _ in range(passes):
        row = cluster_row(engine, cid)
        if row.status is status:
            return row
        rec.run_pass()
        clock.advance(1.0)
    raise AssertionError(f"cluster stayed {cluster_row(engine, cid).status}, wanted {status}")


def _node_reasons(engine: Engine, cid: int) -> list[str]:
    with session_scope(engine) as session:
        nodes = session.query(Node).filter(Node.cluster_id == cid).all()
        return [h.reason for n in nodes for h in history(session, n)]


def _cluster_reasons(engine: Engine, cid: int) -> list[str]:
    with session_scope(engine) as session:
        row = session.get(Cluster, cid)
        assert row is not None
        return [h.reason for h in history(session, row)]


def test_a_slow_node_is_replaced_then_the_task_runs_on_the_accepted_nodes(
    engine: Engine, provider: FakeProvider, clock: VirtualClock
) -> None:
    agents = BenchAgents()
    rec = _reconciler(engine, provider, agents, clock)
    cid = _cluster(engine, clock)
    _until(rec, clock, engine, cid, C.SETTING_UP)
    first, second = provider.live()
    agents.speed[second] = 0.2  # a fifth of its peer: below min_ratio 0.5
    _until(rec, clock, engine, cid, C.PROVISIONING)
    assert [t.run.split()[:5] for t in agents.benched[first]] == [
        ["python", "-m", "gpulease.bench", "--json", "--quick"]
    ]
    bench = agents.benched[second][0]
    assert bench.task_id.endswith("-accept-0") and "--rendezvous 10.0.0.1:" in bench.run
    assert "--rank 1 --world 2" in bench.run and bench.setup is None
    assert agents[first].task is None  # no setup before acceptance passed

    row = _until(rec, clock, engine, cid, C.RUNNING)
    live = provider.live()
    assert second not in live and first in live and len(live) == 2
    replacement = next(i for i in live if i != first)
    assert [t.task_id[-9:] for t in agents.benched[replacement]] == ["-accept-1"]
    assert [t.task_id[-9:] for t in agents.benched[first]] == ["-accept-0", "-accept-1"]
    ranks = {n.instance_id: n.node_rank for n in row.nodes}
    assert ranks[replacement] == 1 and ranks[first] == 0
    task = agents[replacement].task
    assert task is not None and task.run == "python train.py" and task.node_rank == 1
    assert [i.status for i in row.intents] == [IntentStatus.DONE, IntentStatus.DONE]
    assert row.intents[1].num_nodes == 1
    failed = [r for r in _node_reasons(engine, cid) if r.startswith("acceptance failed")]
    assert len(failed) == 1 and "matmul.fp32 0.01 TFLOP/s, 0.20 of peers (0.05)" in failed[0]
    assert any("replacing 1 (replacements 1 of 1)" in r for r in _cluster_reasons(engine, cid))
    kept = row.task["acceptance"]
    assert kept["passed"] is True and kept["round"] == 1
    assert [(r["rank"], r["passed"]) for r in kept["reports"]] == [(0, True), (1, True)]
    matmul = kept["reports"][1]["checks"]["matmul.fp32"]
    assert matmul["source"] == "peers" and matmul["ratio"] == pytest.approx(1.0)
    with session_scope(engine) as session:
        runs = {(r.instance_id, r.node_rank, r.started_at, r.verdict)
                for r in list_bench_runs(session, cluster="c1")}  # fmt: skip
        assert runs == {(first, 0, 1.0, "pass"), (second, 1, 1.0, "fail"),
                        (first, 0, 2.0, "pass"), (replacement, 1, 1.0, "pass")}  # fmt: skip
        degraded = degraded_offers(session, clock.now())
        assert list(degraded) == [("fake", "r1", "t1")]
        assert "matmul.fp32" in degraded[("fake", "r1", "t1")]
        assert degraded_offers(session, clock.now() + 3601.0) == {}


def test_past_its_replacements_the_target_is_given_up_then_the_cluster_fails(
    engine: Engine, provider: FakeProvider, clock: VirtualClock
) -> None:
    agents = BenchAgents()
    rec = _reconciler(engine, provider, agents, clock)
    cid = _cluster(engine, clock, plans=2, max_replacements=0)
    _until(rec, clock, engine, cid, C.SETTING_UP)
    agents.speed[provider.live()[1]] = 0.1
    row = _until(rec, clock, engine, cid, C.PROVISIONING)
    assert [f["region"] for f in row.failover_history] == ["r1"]
    assert "node 1 failed: matmul.fp32" in row.failover_history[0]["error"]
    assert "no replacement left" in row.failover_history[0]["error"]
    _until(rec, clock, engine, cid, C.SETTING_UP)
    for iid in provider.live():  # the second target's nodes: the first is slow
        agents.speed[iid] = 0.1 if iid.endswith("-0") else 1.0
    row = _until(rec, clock, engine, cid, C.FAILED)
    assert row.failure == "launch" and "no offer left to try: acceptance round" in \
        _cluster_reasons(engine, cid)[-1]  # fmt: skip
    for _ in range(3):  # the terminations confirmed
        rec.run_pass()
    assert provider.live() == []
    assert all(n.state is NodeState.TERMINATED for n in cluster_row(engine, cid).nodes)
    with session_scope(engine) as session:
        assert set(degraded_offers(session, clock.now())) == {("fake", "r1", "t1"),
                                                              ("fake", "r2", "t1")}  # fmt: skip


def test_a_bench_without_a_report_fails_its_node(
    engine: Engine, provider: FakeProvider, clock: VirtualClock
) -> None:
    agents = BenchAgents()
    rec = _reconciler(engine, provider, agents, clock)
    cid = _cluster(engine, clock, max_replacements=0)
    _until(rec, clock, engine, cid, C.SETTING_UP)
    agents.silent = set(provider.live())
    row = _until(rec, clock, engine, cid, C.FAILED)
    whys = [f["why"] for f in row.task["acceptance"]["failures"]]
    assert len(whys) == 2 and all("SUCCEEDED (exit code 0) without a report: matmul ..." in w
                                  for w in whys)  # fmt: skip
    assert "(every node failed)" in _cluster_reasons(engine, cid)[-1]
    assert all(n.state in (NodeState.TERMINATING, NodeState.TERMINATED) for n in row.nodes)


def test_judging_takes_peers_min_ratio_minimums_and_the_families_that_count() -> None:
    fast, slow = _report("a", 1.0), _report("b", 0.4, disk=800.0)
    loose = AcceptancePolicy(min_ratio=0.3)
    assert [r.failed() for r in judged([fast, slow], loose)] == [[], []]
    ratio = judged([fast, slow], AcceptancePolicy(min_ratio=0.5))[1].check("matmul.fp32")
    assert ratio is not None and ratio.verdict == "fail" and ratio.reference_source == "peers"
    floor = AcceptancePolicy(min_ratio=0.3, minimums={"disk.seq_read": 1000.0})
    fast_judged, slow_judged = judged([fast, slow], floor)
    assert [c.name for c in slow_judged.failed()] == ["disk.seq_read"] and not fast_judged.failed()
    only_disk = AcceptancePolicy(min_ratio=0.5, checks=("disk",))
    bad = judged([fast, slow], only_disk)[1].failed()
    assert {c.name: only_disk.counts(c) for c in bad} == {"matmul.fp32": False,
                                                          "disk.seq_read": True}  # fmt: skip
    alone = judged([slow], AcceptancePolicy())[0]
    assert alone.failed() == []  # one node and no datasheet: nothing to judge it against
    past = {"matmul.fp32": (0.05, 0.048, 0.052)}  # the offer's history: 3 figures or more
    by_history = judged([slow], AcceptancePolicy(), past)[0].check("matmul.fp32")
    assert by_history is not None and by_history.verdict == "fail"
    assert by_history.reference_source == "history" and by_history.reference == 0.05
    assert judged([slow], AcceptancePolicy(), {"matmul.fp32": (0.05, 0.05)})[0].failed() == []


def test_a_refused_terminate_after_the_verdict_is_issued_again_and_nothing_is_doubled(
    engine: Engine, provider: FakeProvider, clock: VirtualClock
) -> None:
    agents = BenchAgents()
    rec = _reconciler(engine, provider, agents, clock)
    cid = _cluster(engine, clock)
    _until(rec, clock, engine, cid, C.SETTING_UP)
    first, second = provider.live()
    assert first != second
    agents.speed[second] = 0.2
    rec.run_pass()  # the benches submitted (and, in the double, done)
    provider.unavailable = 2  # this pass's listing and the terminate after the verdict fail
    rec.run_pass()
    row = cluster_row(engine, cid)
    assert row.status is C.PROVISIONING and second in provider.live()
    assert {n.instance_id: n.state for n in row.nodes}[second] is NodeState.TERMINATING
    row = _until(rec, clock, engine, cid, C.RUNNING)
    assert second not in provider.live() and len(provider.live()) == 2
    assert len(row.intents) == 2 and len(row.task["acceptance"]["failures"]) == 1
    with session_scope(engine) as session:
        assert len(list_bench_runs(session, cluster="c1")) == 4  # two rounds, each report once


def test_a_lone_node_below_a_minimum_is_replaced_too(
    engine: Engine, provider: FakeProvider, clock: VirtualClock
) -> None:
    agents = BenchAgents()
    rec = _reconciler(engine, provider, agents, clock)
    run = RunSpec(run="python train.py", acceptance={**ACCEPT, "minimums": {"matmul.fp32": 0.04}})
    cid = new_cluster(engine, clock, plans=(target(),), run=run)
    _until(rec, clock, engine, cid, C.SETTING_UP)
    (lone,) = provider.live()
    agents.speed[lone] = 0.5  # 0.025 TFLOP/s, below the task's 0.04
    row = _until(rec, clock, engine, cid, C.RUNNING)
    assert lone not in provider.live() and len(row.intents) == 2
    assert any("matmul.fp32 0.025 TFLOP/s, 0.62 of task (0.04)" in r
               for r in _cluster_reasons(engine, cid))  # fmt: skip


def test_a_lone_node_is_judged_by_its_offers_past_runs(
    engine: Engine, provider: FakeProvider, clock: VirtualClock
) -> None:
    agents = BenchAgents()
    rec = _reconciler(engine, provider, agents, clock)
    for name in ("past-1", "past-2", "past-3"):  # three good runs of the same offer
        run = RunSpec(run=":", acceptance={**ACCEPT})
        past = new_cluster(engine, clock, name=name, plans=(target(),), run=run)
        _until(rec, clock, engine, past, C.RUNNING)
    cid = new_cluster(engine, clock, name="lone", plans=(target(),),
                      run=RunSpec(run=":", acceptance={**ACCEPT}))  # fmt: skip
    _until(rec, clock, engine, cid, C.SETTING_UP)
    (lone,) = [i for i in provider.live() if i not in agents.benched]
    agents.speed[lone] = 0.3
    row = _until(rec, clock, engine, cid, C.RUNNING)
    assert lone not in provider.live() and len(row.intents) == 2
    assert any("matmul.fp32 0.015 TFLOP/s, 0.30 of history (0.05)" in r
               for r in _cluster_reasons(engine, cid))  # fmt: skip
