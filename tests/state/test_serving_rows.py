"""Services and pools in the state DB (migration 0011): rows through their status machines,
with history rows, and the reconcile claim of the shared skeleton on them."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from gpulease.state import InvalidTransition, claim, history, session_scope
from gpulease.state import set_status as move
from gpulease.state.machines import PoolStatus, ServiceStatus
from gpulease.state.models import Cluster, Pool, Service
from gpulease.state.status import record_created

NOW = 1_800_000_000.0


def _service(name: str) -> Service:
    return Service(name=name, owner="o", status=ServiceStatus.PENDING, status_changed_at=NOW,
                   task={"spec": {"name": name}}, version=1, endpoint_port=None,
                   desired_replicas=1, autoscale={}, decisions=[], created_at=NOW,
                   updated_at=NOW)  # fmt: skip


def test_a_service_moves_through_its_machine_under_a_claim(engine: Engine) -> None:
    with session_scope(engine) as session:
        service = _service("digits")
        record_created(session, service, actor="user", reason="serve up")
        service_id = service.id
    with session_scope(engine) as session:
        held = claim(session, service_id, "w1", until=NOW + 60, now=NOW, model=Service)
        assert held is not None and held.kind == "service"
        assert claim(session, service_id, "w2", until=NOW + 60, now=NOW, model=Service) is None
    with session_scope(engine) as session:
        row = session.get(Service, service_id)
        assert row is not None
        for to in (ServiceStatus.STARTING, ServiceStatus.READY, ServiceStatus.SHUTTING_DOWN):
            assert move(session, row, to, actor="service", reason="test", now=NOW, claim=held)
        with pytest.raises(InvalidTransition):
            move(session, row, ServiceStatus.READY, actor="service", reason="no", now=NOW)
        changes = [(c.from_status, c.to_status) for c in history(session, row)]
    assert changes == [(None, "pending"), ("pending", "starting"), ("starting", "ready"),
                       ("ready", "shutting_down")]  # fmt: skip


def test_a_pool_and_its_nodes(engine: Engine) -> None:
    with session_scope(engine) as session:
        pool = Pool(
            name="train",
            owner="o",
            status=PoolStatus.PENDING,
            status_changed_at=NOW,
            task={},
            desired_nodes=0,
            decisions=[],
            created_at=NOW,
            updated_at=NOW,
        )
        record_created(session, pool, actor="user", reason="pool up")
        assert move(session, pool, PoolStatus.READY, actor="pool", reason="up", now=NOW)
        node = Cluster(name="train-1", owner="o", status="pending", status_changed_at=NOW,
                       provider="sim", gpus_per_node=8, num_nodes=1, pricing="spot", task={},
                       autostop_down=False, failover_history=[], pool_id=pool.id,
                       created_at=NOW, updated_at=NOW)  # fmt: skip
        session.add(node)
        session.flush()
        assert node.pool_id == pool.id and node.service_id is None and node.job_id is None
