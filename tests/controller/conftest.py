"""Fixtures of the reconciler tests: a migrated SQLite DB per test, a virtual clock, the provider
and agent doubles, and a helper that writes a cluster the way the server does."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from gpulease.clock import VirtualClock
from gpulease.controller import LaunchDocument, LoopSettings, Reconciler
from gpulease.state import (
    Cluster,
    LaunchTarget,
    create_cluster,
    make_engine,
    session_scope,
    upgrade,
)
from tests.controller.doubles import FakeAgents, FakeProvider

OWNER = "gl-owner"


def target(region: str = "r1", nodes: int = 1, provider: str = "fake") -> LaunchTarget:
    return LaunchTarget(provider=provider, region=region, instance_type="t1", num_nodes=nodes)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "state.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    engine.dispose()
    return path


@pytest.fixture
def engine(sqlite_template: Path, tmp_path: Path) -> Iterator[Engine]:
    path = tmp_path / "state.db"
    shutil.copyfile(sqlite_template, path)
    eng = make_engine(f"sqlite:///{path}", busy_timeout_s=10)
    yield eng
    eng.dispose()


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
    spec: dict[str, object] | None = None,
    autostop: int | None = None,
    down: bool = False,
) -> int:
    doc = LaunchDocument(spec=spec or {"name": name, "run": "python train.py"}, plans=plans)
    with session_scope(engine) as session:
        cluster, _intent = create_cluster(
            session,
            name=name,
            target=plans[0],
            task=doc.to_json(),
            owner=OWNER,
            actor="test",
            now=clock.now(),
            workdir="/src",
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
