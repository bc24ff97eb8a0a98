"""The pool sizing function straight from its inputs, in virtual time: it grows one node per job
waiting beyond the idle and booting nodes, shrinks nodes idle past the timeout (oldest first,
never those waiting jobs take next), and a property: the pool it asks for stays within [min,
max] and it never removes a busy or booting node."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulease.clock import VirtualClock
from gpulease.controller.pool_sizing import PoolNode, SizingPolicy, size_pool

POLICY = SizingPolicy(min_nodes=1, max_nodes=4, idle_timeout_s=300.0)


def _idle(i: int, since: float) -> PoolNode:
    return PoolNode(i, "idle", since)


def test_an_empty_pool_is_brought_up_to_min() -> None:
    decision = size_pool(0.0, 0, [], POLICY)
    assert (decision.add, decision.remove, decision.desired) == (1, (), 1)
    assert "below min 1" in decision.reason


def test_it_grows_one_node_per_waiting_job_beyond_idle_and_booting_nodes() -> None:
    nodes = [PoolNode(1, "busy"), PoolNode(2, "provisioning"), _idle(3, 0.0)]
    decision = size_pool(10.0, 4, nodes, POLICY)
    # 4 waiting: one takes the idle node, one the booting one; 2 need a node, 1 fits under max
    assert decision.add == 1 and decision.desired == 4
    assert decision.reason == "4 job(s) waiting, 2 without a node (capped at max)"
    assert size_pool(10.0, 2, nodes, POLICY).add == 0  # the idle and booting ones serve them


def test_it_never_grows_past_max() -> None:
    busy = [PoolNode(i, "busy") for i in range(4)]
    decision = size_pool(0.0, 10, busy, POLICY)
    assert not decision.changes and decision.desired == 4


def test_idle_nodes_go_after_the_timeout_oldest_first_down_to_min() -> None:
    clock = VirtualClock(start=1000.0)
    nodes = [_idle(1, 1000.0), _idle(2, 1100.0), PoolNode(3, "busy")]
    assert not size_pool(clock.now(), 0, nodes, POLICY).changes
    clock.advance(299.0)
    assert not size_pool(clock.now(), 0, nodes, POLICY).changes  # not idle long enough yet
    clock.advance(1.0)
    first = size_pool(clock.now(), 0, nodes, POLICY)
    assert first.remove == (1,) and first.desired == 2
    assert "idle for 300 s" in first.reason
    clock.advance(100.0)
    both = size_pool(clock.now(), 0, nodes, POLICY)
    assert both.remove == (1, 2) and both.desired == 1  # the busy one stays: min is kept
    only_idle = [_idle(1, 0.0), _idle(2, 0.0)]
    assert size_pool(clock.now(), 0, only_idle, POLICY).remove == (1,)  # min 1


def test_an_expired_idle_node_a_waiting_job_will_take_is_kept() -> None:
    nodes = [_idle(1, 0.0), _idle(2, 50.0), PoolNode(3, "busy")]
    decision = size_pool(1000.0, 1, nodes, POLICY)
    assert decision.remove == (1,)  # node 2 (the newest idle) is the waiting job's
    assert not size_pool(1000.0, 2, nodes, POLICY).changes


def test_above_max_idle_nodes_go_at_once() -> None:
    nodes = [_idle(i, 990.0) for i in range(6)]
    decision = size_pool(1000.0, 0, nodes, POLICY)
    assert len(decision.remove) == 2 and decision.desired == 4


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="bounds"):
        SizingPolicy(min_nodes=3, max_nodes=2)
    with pytest.raises(ValueError, match="bounds"):
        SizingPolicy(min_nodes=0, max_nodes=0)


_NODE = st.builds(
    lambda kind, since: (kind, since),
    st.sampled_from(["provisioning", "busy", "idle"]),
    st.floats(min_value=0.0, max_value=5000.0),
)


@settings(max_examples=300, deadline=None)
@given(
    bounds=st.tuples(st.integers(0, 6), st.integers(0, 6)).map(lambda b: (min(b), max(*b, 1))),
    raw=st.lists(_NODE, max_size=8),
    waiting=st.integers(0, 12),
    timeout=st.floats(min_value=0.0, max_value=3000.0),
    now=st.floats(min_value=0.0, max_value=10_000.0),
)
def test_property_within_bounds_and_never_removes_a_busy_node(
    bounds: tuple[int, int],
    raw: list[tuple[str, float]],
    waiting: int,
    timeout: float,
    now: float,
) -> None:
    low, high = bounds
    policy = SizingPolicy(min_nodes=low, max_nodes=high, idle_timeout_s=timeout)
    nodes = [
        PoolNode(i, kind, since if kind == "idle" else None)  # type: ignore[arg-type]
        for i, (kind, since) in enumerate(raw[:high])  # the loop never holds more than max
    ]
    decision = size_pool(now, waiting, nodes, policy)
    assert low <= decision.desired <= high
    assert decision.desired == len(nodes) + decision.add - len(decision.remove)
    assert not (decision.add and decision.remove)
    by_id = {n.id: n for n in nodes}
    assert all(by_id[i].state == "idle" for i in decision.remove)
    assert len(set(decision.remove)) == len(decision.remove)
    idle = sum(1 for n in nodes if n.state == "idle")
    assert len(decision.remove) <= max(0, idle - waiting)  # waiting jobs keep their nodes
    booting = sum(1 for n in nodes if n.state == "provisioning")
    if waiting > idle + booting and len(nodes) < high:
        assert decision.add >= 1  # a job waits with no node coming: the pool grows
