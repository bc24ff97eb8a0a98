"""The pools loop with the cluster and jobs loops on a real DB (SQLite and PostgreSQL), in
virtual time, with the provider double and agents that keep one task per task id: a pool grows
with a queue of managed jobs (up to max), a node whose job succeeded takes the next job (its
setup ran once) and bills each job for the time it held the node, idle nodes go after the idle
timeout down to min — measured on the loops' clock —, a node whose job failed or was cancelled
goes back to the pool idle (the task stopped, its checkpoints cleaned), a preempted node's job
recovers onto a new node, and ``pool down`` terminates every node (the jobs on it and queued for
it then fail) and leaves nothing running."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy import Engine, select

from gpulease.clock import VirtualClock
from gpulease.controller import AgentReport, Liveness, LoopSettings, NodeRef, Reconciler
from gpulease.controller.job_document import JobDocument
from gpulease.controller.job_loop import JobReconciler, job_task_id
from gpulease.controller.pool_loop import PoolReconciler, create_pool
from gpulease.controller.pool_return import CLEAN_CHECKPOINTS
from gpulease.controller.pool_rules import PoolDocument
from gpulease.controller.pool_sizing import SizingPolicy
from gpulease.state import (
    Cluster,
    ClusterStatus,
    Job,
    JobStatus,
    LaunchTarget,
    NodeState,
    Pool,
    PoolStatus,
    create_job,
    hash_token,
    history,
    list_nodes,
    session_scope,
    set_status,
)
from gpulease.state.ledger import job_spend
from gpulease.state.models import LedgerEntry
from gpulease.wire import NO_RUN, ExecResult, LogChunk, NodeTask, RunSpec, TaskState
from tests.controller.conftest import OWNER
from tests.controller.doubles import FakeProvider

PLAN = LaunchTarget("fake", "r1", None, "t1", num_nodes=1, price_per_hour=1.0)
C, J, P = ClusterStatus, JobStatus, PoolStatus


@dataclass
class TaskAgents:
    """Agents that hold one task per task id (a pool node runs many); a task whose run is
    ``:`` (a pool node's own: setup only) succeeds at once, others run until the test ends
    them."""

    tasks: dict[str, dict[str, str]] = field(default_factory=dict)  # instance → task id → state
    submitted: list[tuple[str, str]] = field(default_factory=list)  # (instance, task id)
    execs: list[tuple[str, str, str]] = field(default_factory=list)  # (instance, task id, command)

    def agent(self, node: NodeRef) -> _Port:
        return _Port(self, node.instance_id)

    def token_hash(self, provider: str, instance_id: str) -> str | None:
        return hash_token(f"token-{instance_id}")

    def forget(self, node: NodeRef) -> None:
        pass

    def finish(self, task_id: str, state: str = "SUCCEEDED") -> None:
        for tasks in self.tasks.values():
            if tasks.get(task_id) == "RUNNING":
                tasks[task_id] = state


@dataclass
class _Port:
    agents: TaskAgents
    instance: str

    def poll(self, task_id: str) -> AgentReport:
        state = self.agents.tasks.get(self.instance, {}).get(task_id)
        if state is None:
            return AgentReport(Liveness.ALIVE)
        code = {"SUCCEEDED": 0, "FAILED": 1}.get(state)
        return AgentReport(Liveness.ALIVE, TaskState(state), code)

    def submit(self, task: NodeTask) -> None:
        tasks = self.agents.tasks.setdefault(self.instance, {})
        if task.task_id not in tasks:
            tasks[task.task_id] = "SUCCEEDED" if task.run == NO_RUN else "RUNNING"
            self.agents.submitted.append((self.instance, task.task_id))

    def cancel(self, task_id: str) -> None:
        self.agents.tasks.get(self.instance, {})[task_id] = "CANCELLED"

    def preempt(self, task_id: str, grace_s: float) -> None:
        pass

    def logs(self, task_id: str, offset: int, limit: int | None = None) -> LogChunk:
        return LogChunk(b"", offset, offset, False, TaskState.RUNNING)

    def exec(self, task_id: str, command: str, timeout_s: float) -> ExecResult:
        self.agents.execs.append((self.instance, task_id, command))
        return ExecResult(0, "", False)


class _Pass(Protocol):
    def run_pass(self) -> bool: ...


@dataclass
class World:
    engine: Engine
    clock: VirtualClock
    provider: FakeProvider
    agents: TaskAgents
    loops: Sequence[_Pass]

    def until(self, done: Callable[[], bool], what: str, *, step_s: float = 1.0) -> int:
        """Run passes of the three loops (the clock moving ``step_s`` after each) until
        ``done()``; the passes it took."""
        for passes in range(1, 40):
            for loop in self.loops:
                loop.run_pass()
            self.clock.advance(step_s)
            if done():
                return passes
        raise AssertionError(f"not reached in 40 passes: {what}")

    def status(self, job_id: int) -> JobStatus:
        return self.job(job_id).status

    def pool(self) -> Pool:
        with session_scope(self.engine) as session:
            row = session.scalars(select(Pool).where(Pool.name == "p")).one()
            session.expunge(row)
            return row

    def nodes(self) -> list[Cluster]:
        """Every node cluster the pool ever had, oldest first."""
        with session_scope(self.engine) as session:
            rows = list(session.scalars(select(Cluster).where(Cluster.pool_id.is_not(None))
                                        .order_by(Cluster.id)))  # fmt: skip
            session.expunge_all()
            return rows

    def job(self, job_id: int) -> Job:
        with session_scope(self.engine) as session:
            row = session.get(Job, job_id)
            assert row is not None
            session.expunge(row)
            return row

    def new_job(self, name: str) -> int:
        with session_scope(self.engine) as session:
            job = create_job(session, name=name, task={}, owner=OWNER, actor="test",
                             now=self.clock.now())  # fmt: skip
            doc = JobDocument(
                run=RunSpec(run="python train.py"),
                task_id=job_task_id(name, job.id),
                on_demand=(PLAN,),
                pool="p",
            )
            job.task = doc.to_json()  # fmt: skip
            return job.id

    def cancel(self, job_id: int) -> None:
        with session_scope(self.engine) as session:
            row = session.get(Job, job_id)
            assert row is not None
            row.cancel_requested = True

    def pool_down(self) -> None:
        with session_scope(self.engine) as session:
            row = session.scalars(select(Pool).where(Pool.name == "p")).one()
            assert set_status(session, row, P.SHUTTING_DOWN, actor="user", reason="pool down",
                              now=self.clock.now())  # fmt: skip


def _world(engine: Engine, *, min_nodes: int, max_nodes: int, idle_s: float = 300.0) -> World:
    clock = VirtualClock()
    provider, agents = FakeProvider(), TaskAgents()
    settings = LoopSettings(resting_every_s=0.0)
    loops: list[_Pass] = [
        Reconciler(engine, {"fake": provider}, agents, clock=clock, owner=OWNER, settings=settings),
        JobReconciler(engine, {"fake": provider}, agents, clock=clock, owner=OWNER),
        PoolReconciler(engine, clock=clock, owner=OWNER),
    ]
    sizing = SizingPolicy(min_nodes=min_nodes, max_nodes=max_nodes, idle_timeout_s=idle_s)
    doc = PoolDocument(run=RunSpec(setup="pip install deps", run="ignored"), plans=(PLAN,),
                       sizing=sizing, spec={"name": "p"})  # fmt: skip
    with session_scope(engine) as session:
        create_pool(session, name="p", doc=doc, owner=OWNER, actor="test", now=clock.now())
    return World(engine, clock, provider, agents, loops)


def _on(world: World, job_id: int) -> int:
    job = world.job(job_id)
    assert job.status is J.RUNNING, (job.status, job.events)
    assert job.cluster_id is not None
    return job.cluster_id


def test_a_pool_grows_with_the_queue_reuses_nodes_and_shrinks_when_idle(engine: Engine) -> None:
    world = _world(engine, min_nodes=0, max_nodes=2)
    jobs = [world.new_job(f"train{i}") for i in range(3)]
    world.until(lambda: world.status(jobs[0]) is world.status(jobs[1]) is J.RUNNING, "two run")
    nodes = world.nodes()
    assert len(nodes) == 2  # three jobs wait, max is 2
    first, second = _on(world, jobs[0]), _on(world, jobs[1])
    assert {first, second} == {n.id for n in nodes}
    assert world.job(jobs[2]).status is J.RECOVERING  # queued for a node
    pool = world.pool()
    assert pool.status is P.READY and pool.desired_nodes == 2
    assert pool.decisions[0]["add"] == 2 and pool.decisions[0]["waiting"] == 3
    setups = [i for i, t in world.agents.submitted if not t.startswith("job-")]
    assert len(setups) == 2  # the pool's setup: once per node

    world.agents.finish(job_task_id("train0", jobs[0]))
    world.until(lambda: world.status(jobs[2]) is J.RUNNING, "the queued job to run")
    assert world.job(jobs[0]).status is J.SUCCEEDED
    assert _on(world, jobs[2]) == first  # the freed node took the queued job
    assert len(world.nodes()) == 2  # and no node was added for it
    setups = [i for i, t in world.agents.submitted if not t.startswith("job-")]
    assert len(setups) == 2

    for i, job_id in enumerate(jobs):
        world.agents.finish(job_task_id(f"train{i}", job_id))
    world.until(lambda: all(world.status(j) is J.SUCCEEDED for j in jobs), "every job ends")
    world.until(lambda: all(n.job_id is None for n in world.nodes()), "the nodes to be idle")
    assert all(n.status is C.SUCCEEDED for n in world.nodes())
    passes = world.until(lambda: all(n.status is C.TERMINATED for n in world.nodes()),
                         "the idle nodes to go", step_s=60.0)  # fmt: skip
    assert passes >= 5  # not before the idle timeout (300 s)
    assert [n.status for n in world.nodes()] == [C.TERMINATED, C.TERMINATED]
    assert world.provider.live() == []
    pool = world.pool()
    assert pool.desired_nodes == 0 and pool.decisions[-1]["remove"]
    assert "idle for 300 s" in pool.decisions[-1]["reason"]
    with session_scope(engine) as session:  # the ledger: each job billed while it held a node
        rows = list(session.scalars(select(LedgerEntry).where(LedgerEntry.cluster_id == first)
                                    .order_by(LedgerEntry.started_at)))  # fmt: skip
        owners = [r.job_id for r in rows]
        assert owners.index(jobs[0]) < owners.index(jobs[2]) and owners[-1] is None
        assert all(a.ended_at == b.started_at for a, b in itertools.pairwise(rows))
        assert all(r.closed for r in rows)
        assert all(job_spend(session, j) > 0 for j in jobs)


def test_a_preempted_node_s_job_recovers_on_a_new_node_and_pool_down_ends_it(
    engine: Engine,
) -> None:
    world = _world(engine, min_nodes=0, max_nodes=1)
    job_id = world.new_job("spot")
    world.until(lambda: world.status(job_id) is J.RUNNING, "the job to run")
    lost = _on(world, job_id)
    with session_scope(engine) as session:  # what the provider-event relay writes
        (node,) = list_nodes(session, lost)
        set_status(session, node, NodeState.PREEMPTED, actor="jobs", reason="spot reclaimed",
                   now=world.clock.now())  # fmt: skip
    world.until(lambda: world.job(job_id).attempt == 2 and world.status(job_id) is J.RUNNING,
                "the job to run again")  # fmt: skip
    job = world.job(job_id)
    now_on = _on(world, job_id)
    assert now_on != lost and job.recoveries == 1
    by_id = {n.id: n for n in world.nodes()}
    assert by_id[lost].status in (C.TERMINATING, C.TERMINATED) and by_id[now_on].pool_id

    queued = world.new_job("queued")  # max 1: it waits
    world.until(lambda: world.status(queued) is J.RECOVERING, "the second job to queue")
    world.pool_down()
    world.until(lambda: world.pool().status is P.DOWN, "the pool to be down")
    assert all(n.status is C.TERMINATED for n in world.nodes())
    assert world.provider.live() == []
    world.until(lambda: world.status(job_id) is J.FAILED, "the job on it to fail")
    for gone in (job_id, queued):
        job = world.job(gone)
        assert job.status is J.FAILED and "pool p is" in (job.last_error or ""), job.events


def test_a_failed_or_cancelled_job_s_node_goes_back_to_the_pool_idle(engine: Engine) -> None:
    world = _world(engine, min_nodes=0, max_nodes=1)
    failing = world.new_job("failing")
    world.until(lambda: world.status(failing) is J.RUNNING, "the job to run")
    node = _on(world, failing)
    (instance,) = world.agents.tasks
    failing_task = job_task_id("failing", failing)
    world.agents.finish(failing_task, "FAILED")
    world.until(lambda: world.status(failing) is J.FAILED and world.nodes()[0].job_id is None,
                "the job to fail and give its node back")  # fmt: skip
    (back,) = world.nodes()
    assert back.id == node and back.status is C.SUCCEEDED and back.failure is None
    assert (instance, failing_task, CLEAN_CHECKPOINTS) in world.agents.execs  # before the next
    with session_scope(engine) as session:
        moves = [(h.from_status, h.to_status) for h in history(session, back)]
        assert ("failed", "succeeded") in moves

    cancelled = world.new_job("cancelled")
    world.until(lambda: world.status(cancelled) is J.RUNNING, "the next job to run")
    assert _on(world, cancelled) == node and len(world.nodes()) == 1  # the same node, reused
    world.cancel(cancelled)
    world.until(lambda: world.status(cancelled) is J.CANCELLED, "the job to be cancelled")
    cancelled_task = job_task_id("cancelled", cancelled)
    assert world.agents.tasks[instance][cancelled_task] == "CANCELLED"  # stopped before handed
    assert (instance, cancelled_task, CLEAN_CHECKPOINTS) in world.agents.execs
    (back,) = world.nodes()
    assert back.id == node and back.status is C.SUCCEEDED and back.job_id is None
    assert world.provider.live() != []  # never torn down
    setups = [t for _, t in world.agents.submitted if not t.startswith("job-")]
    assert len(setups) == 1  # one node, set up once, for every job

    early = world.new_job("early")  # cancelled as soon as it took the node (setting up)
    world.until(lambda: world.status(early) is J.STARTING, "the job to take the node")
    world.cancel(early)
    world.until(lambda: world.status(early) is J.CANCELLED, "the early job to be cancelled")
    assert world.agents.tasks[instance].get(job_task_id("early", early)) == "CANCELLED"
    (back,) = world.nodes()
    assert back.id == node and back.status is C.SUCCEEDED and back.job_id is None

    third = world.new_job("third")
    world.until(lambda: world.status(third) is J.RUNNING, "a third job to run")
    assert _on(world, third) == node


def test_the_idle_timeout_is_measured_on_the_loops_clock(engine: Engine) -> None:
    world = _world(engine, min_nodes=0, max_nodes=1, idle_s=60.0)
    job_id = world.new_job("once")
    world.until(lambda: world.status(job_id) is J.RUNNING, "the job to run")
    world.agents.finish(job_task_id("once", job_id))
    world.until(lambda: world.nodes()[0].job_id is None, "the node to be idle")
    (idle,) = world.nodes()
    since = idle.status_changed_at  # stamped by the loops, on their (virtual) clock
    assert since <= world.clock.now() < since + 60.0
    while world.clock.now() < since + 60.0:  # never removed before: a pass each 5 virtual s
        assert world.nodes()[0].status is C.SUCCEEDED, world.clock.now() - since
        for loop in world.loops:
            loop.run_pass()
        world.clock.advance(5.0)
    world.until(lambda: world.nodes()[0].status is not C.SUCCEEDED, "the idle node to go")
    removal = world.pool().decisions[-1]
    assert removal["remove"] == [idle.id] and removal["at"] >= since + 60.0
    assert removal["at"] < since + 60.0 + 5.0  # at the first pass past the timeout
