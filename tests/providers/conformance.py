"""The provider conformance suite: what every provider (local now; sim, aws against moto, slurm
later) must do, written once.

To run it for a provider, subclass :class:`ProviderConformance` in
``tests/providers/test_<name>_conformance.py`` and give it a ``harness`` fixture returning a
:class:`Harness` (the provider, plus how to wait on it and, where nodes are processes here, how
to find them). Capability tests (stop/start) run only where the provider has the mixin.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpulease.providers.base import (
    TAG_CLUSTER,
    TAG_NODE_RANK,
    TAG_OWNER,
    TAG_REQUEST,
    EventKind,
    Instance,
    InstanceState,
    LaunchRequest,
    Provider,
    ProviderEvent,
    SupportsStopStart,
)
from tests.waiting import wait_until

GONE = {InstanceState.TERMINATED}


@dataclass
class Harness:
    """A provider under test and what the suite needs to know about it.

    ``settle`` lets time pass (the sim provider advances its clock; real providers do nothing);
    ``node_processes`` returns the pids still alive for the given instances (None where nodes
    are not processes on this machine); ``has_agents`` says whether RUNNING nodes carry an
    ``agent_url``.
    """

    provider: Provider
    settle: Callable[[], None] = lambda: None
    node_processes: Callable[[list[Instance]], list[int]] | None = None
    has_agents: bool = True
    timeout: float = 15.0
    owner: str = field(default_factory=lambda: f"owner-{uuid.uuid4().hex[:8]}")
    launched: list[str] = field(default_factory=list)

    def request(self, **kw: Any) -> LaunchRequest:
        kw.setdefault("request_id", f"req-{uuid.uuid4().hex[:10]}")
        kw.setdefault("cluster", f"c-{uuid.uuid4().hex[:6]}")
        kw.setdefault("owner", self.owner)
        return LaunchRequest(**kw)

    def launch(self, request: LaunchRequest) -> list[Instance]:
        instances = self.provider.launch(request)
        self.launched.extend(i.id for i in instances)
        return instances

    def wait_for(self, check: Callable[[], Any], what: str) -> Any:
        """``wait_until`` that lets the provider's time pass (``settle``) before each check."""

        def settled() -> Any:
            self.settle()
            return check()

        return wait_until(settled, self.timeout, what, base=0.01, cap=0.2)

    def states(self, ids: Iterable[str]) -> dict[str, InstanceState]:
        wanted = set(ids)
        listed = self.provider.list_instances({TAG_OWNER: self.owner})
        return {i.id: i.state for i in listed if i.id in wanted}

    def wait_gone(self, ids: list[str]) -> None:
        """Until ``list_instances`` no longer shows them, or shows them TERMINATED."""
        self.wait_for(
            lambda: all(s in GONE for s in self.states(ids).values()), f"{ids} to be terminated"
        )

    def wait_running(self, ids: list[str]) -> list[Instance]:
        def check() -> list[Instance] | None:
            listed = [i for i in self.provider.list_instances({TAG_OWNER: self.owner})
                      if i.id in ids]  # fmt: skip
            ok = len(listed) == len(ids) and all(i.state is InstanceState.RUNNING for i in listed)
            return listed if ok else None

        found: list[Instance] = self.wait_for(check, f"{ids} to run")
        return found

    def cleanup(self) -> None:
        if self.launched:
            self.provider.terminate(self.launched)
            self.wait_gone(self.launched)


class ProviderConformance:
    """The contract of :mod:`gpulease.providers.base`, as tests."""

    @pytest.fixture
    def h(self, harness: Harness) -> Any:
        yield harness
        harness.cleanup()

    def test_launch_returns_one_instance_per_node_with_distinct_ranks(self, h: Harness) -> None:
        instances = h.launch(h.request(num_nodes=3))
        assert len(instances) == 3
        assert sorted(i.node_rank for i in instances) == [0, 1, 2]
        assert len({i.id for i in instances}) == 3
        assert sorted(i.tags[TAG_NODE_RANK] for i in instances) == ["0", "1", "2"]
        assert all(i.provider == h.provider.name for i in instances)

    def test_launch_is_idempotent_by_request_id(self, h: Harness) -> None:
        request = h.request(num_nodes=2)
        first = h.launch(request)
        again = h.launch(request)
        assert [i.id for i in again] == [i.id for i in first]
        listed = h.provider.list_instances({TAG_REQUEST: request.request_id})
        assert sorted(i.id for i in listed) == sorted(i.id for i in first)  # no duplicates

    def test_every_instance_carries_the_request_tags(self, h: Harness) -> None:
        request = h.request(num_nodes=2, tags={"team": "vision"})
        h.launch(request)
        listed = h.provider.list_instances({TAG_REQUEST: request.request_id})
        assert len(listed) == 2
        for instance in listed:
            assert instance.tags[TAG_CLUSTER] == request.cluster
            assert instance.tags[TAG_OWNER] == request.owner
            assert instance.tags[TAG_REQUEST] == request.request_id
            assert instance.tags["team"] == "vision"

    def test_list_instances_filters_by_tags_and_owner(self, h: Harness, harness: Harness) -> None:
        mine = h.launch(h.request(cluster="alpha"))
        other = Harness(harness.provider, settle=harness.settle, timeout=harness.timeout)
        try:
            theirs = other.launch(other.request(cluster="alpha"))
            alpha_mine = h.provider.list_instances({TAG_CLUSTER: "alpha", TAG_OWNER: h.owner})
            assert [i.id for i in alpha_mine] == [mine[0].id]
            owned = {i.id for i in h.provider.list_instances({TAG_OWNER: h.owner})}
            assert theirs[0].id not in owned
            assert h.provider.list_instances({TAG_CLUSTER: "no-such-cluster"}) == []
        finally:
            other.cleanup()

    def test_instances_come_up_running(self, h: Harness) -> None:
        ids = [i.id for i in h.launch(h.request(num_nodes=2))]
        running = h.wait_running(ids)
        if h.has_agents:
            assert all(i.agent_url for i in running)
            assert len({i.agent_url for i in running}) == 2

    def test_terminate_is_confirmed_by_list_instances(self, h: Harness) -> None:
        ids = [i.id for i in h.launch(h.request(num_nodes=2))]
        assert h.provider.terminate(ids) is None  # accepted, not confirmed
        h.wait_gone(ids)
        h.provider.terminate(ids)  # again: a no-op
        assert all(s in GONE for s in h.states(ids).values())

    def test_terminate_is_a_noop_for_missing_instances(self, h: Harness) -> None:
        h.provider.terminate(["no-such-instance"])
        h.provider.terminate([])

    def test_events_come_back_as_data(self, h: Harness) -> None:
        ids = [i.id for i in h.launch(h.request())]
        h.provider.terminate(ids)
        h.wait_gone(ids)
        events = h.provider.poll_events()
        assert isinstance(events, list)
        assert all(isinstance(e, ProviderEvent) and isinstance(e.kind, EventKind) for e in events)
        mine = [e for e in events if e.instance_id in ids]
        assert any(e.kind is EventKind.STATE_CHANGE for e in mine)
        again = [e for e in h.provider.poll_events() if e.instance_id in ids]
        assert again == []  # each change is reported once

    def test_launch_then_terminate_leaves_no_process(self, h: Harness) -> None:
        if h.node_processes is None:
            pytest.skip("this provider's nodes are not processes on this machine")
        instances = h.launch(h.request(num_nodes=2))
        h.wait_running([i.id for i in instances])
        assert h.node_processes(instances)  # the nodes really are processes
        h.provider.terminate([i.id for i in instances])
        h.wait_gone([i.id for i in instances])
        assert h.node_processes(instances) == []

    def test_stop_keeps_the_instance_and_start_brings_it_back(self, h: Harness) -> None:
        if not isinstance(h.provider, SupportsStopStart):
            pytest.skip("no stop/start")
        ids = [i.id for i in h.launch(h.request())]
        h.wait_running(ids)
        h.provider.stop(ids)
        h.wait_for(lambda: h.states(ids) == {ids[0]: InstanceState.STOPPED}, "stopped")
        h.provider.start(ids)
        h.wait_running(ids)
