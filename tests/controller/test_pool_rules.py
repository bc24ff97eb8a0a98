"""The pools loop's pure step, straight from snapshots: how a node cluster counts (idle, busy,
booting, dead, leaving), a node that could not be launched fails the pool and launches back off,
the PENDING timeout, and ``pool down`` ending DOWN only once no node is left."""

from __future__ import annotations

from gpulease.controller.pool_rules import (
    AddNodes,
    DropNodes,
    NodeClusterView,
    PoolDocument,
    PoolSnapshot,
    PoolView,
    Record,
    SetPool,
    decide_pool,
)
from gpulease.controller.pool_sizing import SizingPolicy
from gpulease.state import ClusterStatus, LaunchTarget, NodeState, PoolStatus
from gpulease.wire import RunSpec

C, N, P = ClusterStatus, NodeState, PoolStatus
DOC = PoolDocument(
    run=RunSpec(setup="pip install x"),
    plans=(LaunchTarget("fake", "r1", None, "t1"),),
    sizing=SizingPolicy(min_nodes=0, max_nodes=3, idle_timeout_s=60.0),
)


def _node(i: int, status: ClusterStatus, *states: NodeState, job: int | None = None,
          failure: str | None = None) -> NodeClusterView:  # fmt: skip
    return NodeClusterView(i, f"n{i}", status, 0.0, job, failure, 1, tuple(states))


def _snap(status: PoolStatus, nodes: list[NodeClusterView], waiting: int = 0, *,
          now: float = 100.0, retry_at: float | None = None) -> PoolSnapshot:  # fmt: skip
    pool = PoolView(1, "p", status, 50.0, DOC, desired_nodes=len(nodes))
    return PoolSnapshot(now, pool, tuple(nodes), waiting, retry_at)


def test_how_a_node_cluster_counts() -> None:
    assert _node(1, C.SUCCEEDED, N.READY).kind == "idle"
    assert _node(1, C.SETTING_UP, N.READY, job=7).kind == "busy"
    assert _node(1, C.PROVISIONING, N.PROVISIONING).kind == "provisioning"
    assert _node(1, C.SUCCEEDED, N.PREEMPTED).kind == "dead"
    assert _node(1, C.FAILED, N.READY).kind == "dead"
    assert _node(1, C.FAILED, N.READY, job=7).kind == "busy"  # its job gives it back or drops it
    assert _node(1, C.TERMINATING, N.TERMINATING).kind == "leaving"
    assert _node(1, C.SUCCEEDED, N.STOPPED).kind == "dead"  # not ready: never handed to a job


def test_a_pending_pool_grows_for_its_queue_and_is_ready() -> None:
    actions = decide_pool(_snap(P.PENDING, [], waiting=2))
    assert actions[0] == AddNodes(2)
    assert isinstance(actions[1], Record) and actions[1].decision.desired == 2
    assert actions[2] == SetPool(P.READY, "the pools loop sizes it")


def test_a_node_that_could_not_launch_fails_the_pool_and_launches_back_off() -> None:
    failed = _node(1, C.FAILED, failure="launch")
    actions = decide_pool(_snap(P.READY, [failed], waiting=2))
    assert actions == [
        DropNodes((1,), "the node is dead (preempted, lost, or failed)", launch_failed=True),
        SetPool(P.FAILED, "node n1 could not be launched"),
    ]
    waiting_out = decide_pool(_snap(P.FAILED, [], waiting=2, retry_at=130.0))
    assert waiting_out == []  # no launch before retry_at
    assert decide_pool(_snap(P.FAILED, [], waiting=2, now=131.0, retry_at=130.0))[0] == AddNodes(2)
    up = decide_pool(_snap(P.FAILED, [_node(2, C.SUCCEEDED, N.READY)], waiting=1))
    assert up == [SetPool(P.READY, "a node is up again")]


def test_a_pending_pool_nobody_stepped_times_out() -> None:
    actions = decide_pool(_snap(P.PENDING, [], now=50.0 + 600.0))
    assert actions == [SetPool(P.FAILED, "timed out: no loop started it")]


def test_pool_down_drops_every_node_then_ends_down_once_none_is_left() -> None:
    nodes = [_node(1, C.RUNNING, N.READY, job=3), _node(2, C.SUCCEEDED, N.READY),
             _node(3, C.TERMINATING, N.TERMINATING)]  # fmt: skip
    assert decide_pool(_snap(P.SHUTTING_DOWN, nodes)) == [DropNodes((1, 2), "pool down")]
    assert decide_pool(_snap(P.SHUTTING_DOWN, nodes[2:])) == []  # waiting for the provider
    done = decide_pool(_snap(P.SHUTTING_DOWN, []))
    assert done == [SetPool(P.DOWN, "every node terminated (the provider confirms)")]
    assert decide_pool(_snap(P.DOWN, [])) == []
