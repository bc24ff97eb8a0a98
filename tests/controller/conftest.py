"""Fixtures of the reconciler tests: a migrated DB per test (SQLite, and the session's real
PostgreSQL server — tests/dbfixtures.py), a virtual clock, the provider and agent doubles, and a
helper that writes a cluster the way the server does."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from gpulease.clock import VirtualClock
from gpulease.controller import LaunchDocument, LoopSettings, Reconciler
from gpulease.state import (
    Cluster,
    LaunchTarget,
    create_cluster,
    session_scope,
)
from gpulease.wire import RunSpec
from tests.controller.doubles import FakeAgents, FakeProvider

# every reconciler test runs on SQLite and on the session's real PostgreSQL server
from tests.dbfixtures import (
    db_kind,
    engine,
    postgres_server,
    postgres_url,
    sqlite_template,
)

OWNER = "gl-owner"


def target(region: str = "r1", nodes: int = 1, provider: str = "fake") -> LaunchTarget:
    return LaunchTarget(provider=provider, region=region, instance_type="t1", num_nodes=nodes)


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def provider() -> FakeProvider:
    return FakeProvider()


@pytest.fixture
def agents() -> FakeAgents:
    return FakeAgents()


@pytest.fixture
def reconciler(
    engine: Engine, provider: FakeProvider, agents: FakeAgents, clock: VirtualClock
) -> Reconciler:
    return Reconciler(
        engine,
        {provider.name: provider},
        agents,
        clock=clock,
        owner=OWNER,
        settings=LoopSettings(resting_every_s=0.0),
    )


def new_cluster(
    engine: Engine,
    clock: VirtualClock,
    *,
    name: str = "c1",
    plans: tuple[LaunchTarget, ...] = (target(),),
    run: RunSpec | None = None,
    autostop: int | None = None,
    down: bool = False,
) -> int:
    run = run or RunSpec(run="python train.py", workdir="/src")
    doc = LaunchDocument(run=run, plans=plans, spec={"name": name, "run": run.run})
    with session_scope(engine) as session:
        cluster, _intent = create_cluster(
            session,
            name=name,
            target=plans[0],
            task=doc.to_json(),
            owner=OWNER,
            actor="test",
            now=clock.now(),
            autostop_minutes=autostop,
            autostop_down=down,
        )
        return cluster.id


def cluster_row(engine: Engine, cluster_id: int) -> Cluster:
    with session_scope(engine) as session:
        row = session.get(Cluster, cluster_id)
        assert row is not None
        _ = row.nodes, row.intents  # load while the session is open
        return row
