"""The relay's passes on SQLite and a real PostgreSQL, in virtual time, against scripted agents
(a double of the agent's ``GET /v1/metrics``: samples after ``since``, or no answer): samples
folded into 10 s and 60 s points per node, a bucket rebuilt as its samples arrive, a restarted
relay resuming from the newest stored bucket without double counting, ``gpu_active_at``
stamped by the GPUs or the train step, a silent agent skipped and logged once per outage,
retention pruning in the pass, the newest raw samples and the rendered ``/metrics`` text."""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, select, text
from sqlalchemy.exc import DBAPIError

from gpulease.agent.client import AgentUnavailable
from gpulease.clock import VirtualClock
from gpulease.controller import NodeRef
from gpulease.server.telemetry import TelemetrySettings
from gpulease.server.telemetry.fold import bucket_start
from gpulease.server.telemetry.relay import BATCH_NODES, Relay
from gpulease.server.telemetry.store import PointRow, upsert_points
from gpulease.state import ClusterStatus, NodeState, ensure_node, session_scope
from gpulease.state.models import Cluster, Node, TelemetryPoint
from tests.dbfixtures import db_kind, engine, postgres_server, postgres_url, sqlite_template
from tests.server.test_telemetry_store import T0, sample
from tests.state.helpers import force_status, new_cluster

__all__ = ["db_kind", "engine", "postgres_server", "postgres_url", "sqlite_template"]


@dataclass
class ScriptedAgents:
    """Per instance id: the samples its agent holds, and whether it answers."""

    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)
    asked: list[tuple[str, float | None]] = field(default_factory=list)
    interval_s: float | None = None  # the agents' sampling period, as they report it

    def metrics(self, node: NodeRef, since: float | None) -> Mapping[str, Any]:
        self.asked.append((node.instance_id, since))
        if node.instance_id in self.down:
            raise AgentUnavailable("no answer from the agent")
        held = self.samples.get(node.instance_id, [])
        fresh = [s for s in held if since is None or s["at"] > since]
        return {"interval_s": self.interval_s, "samples": fresh}


def _cluster(engine: Engine, clock: VirtualClock, name: str, nodes: int = 2) -> int:
    cluster_id, _ = new_cluster(engine, clock, name)
    force_status(engine, Cluster, cluster_id, ClusterStatus.RUNNING)
    with session_scope(engine) as session:
        cluster = session.get_one(Cluster, cluster_id)
        for rank in range(nodes):
            url = f"http://n/{rank}"
            node = ensure_node(session, cluster, instance_id=f"{name}-{rank}", node_rank=rank,
                               actor="t", now=clock.now(), agent_url=url)  # fmt: skip
            node.state = NodeState.READY
    return cluster_id


def _relay(engine: Engine, agents: ScriptedAgents, clock: VirtualClock, **kw: Any) -> Relay:
    settings = TelemetrySettings(interval_s=10.0, **kw)
    return Relay(engine, agents, settings, clock=clock, rng=random.Random(7))


def _points(engine: Engine) -> dict[tuple[int, int, float], tuple[int, float]]:
    with session_scope(engine) as session:
        return {(p.node_rank, p.resolution_s, p.at):
                (p.samples, p.data["gpus"][0]["utilization_pct"])
                for p in session.scalars(select(TelemetryPoint))}  # fmt: skip


def _feed(agents: ScriptedAgents, name: str, start: float, utils: list[float]) -> None:
    for rank in (0, 1):
        held = agents.samples.setdefault(f"{name}-{rank}", [])
        held.extend(sample(start + 5 * i, u + rank) for i, u in enumerate(utils))


def test_passes_fold_per_node_and_rebuild_open_buckets(engine: Engine) -> None:
    clock = VirtualClock(T0 + 20)
    _cluster(engine, clock, "c1")
    agents = ScriptedAgents()
    relay = _relay(engine, agents, clock)
    _feed(agents, "c1", T0 + 20, [10, 30, 50])  # at +20, +25, +30
    assert relay.run_pass() == 6
    clock.advance(10)
    _feed(agents, "c1", T0 + 35, [70])  # +35: the second 10 s bucket and the 60 s bucket grow
    assert relay.run_pass() == 2
    assert relay.run_pass() == 0  # nothing new: nothing written again
    assert _points(engine) == {
        (0, 10, T0 + 20): (2, 20.0), (0, 10, T0 + 30): (2, 60.0), (0, 60, T0 - 20): (4, 40.0),
        (1, 10, T0 + 20): (2, 21.0), (1, 10, T0 + 30): (2, 61.0), (1, 60, T0 - 20): (4, 41.0),
    }  # fmt: skip
    assert sorted(agents.asked[-2:]) == [("c1-0", T0 + 35), ("c1-1", T0 + 35)]  # pulled at once


def test_a_restarted_relay_resumes_from_the_newest_bucket_without_double_counting(
    engine: Engine,
) -> None:
    b = T0 + 40  # a 60 s bucket starts here
    clock = VirtualClock(b + 60)
    _cluster(engine, clock, "c1")
    agents = ScriptedAgents()
    _feed(agents, "c1", b, [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120])
    _relay(engine, agents, clock).run_pass()  # samples b … b+55: one 60 s bucket
    before = _points(engine)
    _feed(agents, "c1", b + 60, [130, 140])  # the next 60 s bucket
    fresh = _relay(engine, agents, clock)  # a new server: no memory of the first
    fresh.run_pass()
    assert agents.asked[-1] == ("c1-1", b - 1e-3)  # re-read the newest stored bucket
    after = _points(engine)
    assert after[(0, 60, b)] == before[(0, 60, b)] == (12, 65.0)
    assert after[(0, 60, b + 60)] == (2, 135.0) and after[(0, 10, b + 60)] == (2, 135.0)
    assert len(after) == len(before) + 2 * 2


def test_gpu_active_at_is_stamped_by_busy_gpus_or_an_advancing_step(engine: Engine) -> None:
    clock = VirtualClock(T0)
    idle, busy, training, old = (
        _cluster(engine, clock, n, nodes=1) for n in ("idle", "busy", "tr", "old")
    )
    with session_scope(engine) as session:
        session.get_one(Cluster, busy).autostop_gpu_below = 50.0
    agents = ScriptedAgents()
    idle_sample = {**sample(T0, 2), "gpus": [sample(T0, 2)["gpus"][0]]}
    agents.samples["idle-0"] = [idle_sample]
    agents.samples["busy-0"] = [sample(T0, 55)]  # GPU 1 at 45: one GPU ≥ 50 is enough
    agents.samples["tr-0"] = [{**idle_sample, "train": {"step": 3}}]
    agents.samples["old-0"] = [sample(T0 - 100, 90)]  # busy long ago (a resumed node): not now
    relay = _relay(engine, agents, clock)
    relay.run_pass()
    clock.advance(10)
    agents.samples["tr-0"].append({**idle_sample, "at": T0 + 5, "train": {"step": 4}})
    relay.run_pass()
    with session_scope(engine) as session:
        stamped = {c.name: c.gpu_active_at for c in session.scalars(select(Cluster))}
    assert stamped == {"idle": None, "busy": T0, "tr": T0 + 10, "old": None}
    assert len({idle, busy, training, old}) == 4


def test_a_silent_agent_is_skipped_logged_once_and_retried_with_backoff(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    clock = VirtualClock(T0)
    _cluster(engine, clock, "c1")
    agents = ScriptedAgents(down={"c1-1"})
    _feed(agents, "c1", T0, [40])
    relay = _relay(engine, agents, clock)
    caplog.set_level(logging.INFO, "gpulease.server.telemetry")
    for _ in range(6):
        relay.run_pass()
        clock.advance(10)
    warnings = [r for r in caplog.records if "no answer" in r.getMessage()]
    assert len(warnings) == 1 and "c1/1" in warnings[0].getMessage()
    tries = [i for i, _ in agents.asked if i == "c1-1"]
    assert 1 < len(tries) < 6  # backing off: not asked on every pass
    assert relay.latest.get((_id(engine, "c1"), 0)) is not None
    agents.down.clear()
    clock.advance(600)
    relay.run_pass()
    assert any("relayed again" in r.getMessage() for r in caplog.records)
    assert {k[0] for k in _points(engine)} == {0, 1}


def test_a_node_sending_what_cannot_be_read_backs_off_alone(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    clock = VirtualClock(T0)
    _cluster(engine, clock, "c1")
    agents = ScriptedAgents()
    agents.samples["c1-0"] = [sample(T0, 40)]
    agents.samples["c1-1"] = [{"at": T0, "gpus": 5}]  # not a list of GPUs
    relay = _relay(engine, agents, clock)
    relay.run_pass()
    assert set(_points(engine)) == {(0, 10, T0), (0, 60, T0 - 20)}
    assert any("c1/1" in r.getMessage() and "failed" in r.getMessage() for r in caplog.records)


def test_a_pass_whose_write_fails_is_pulled_again(engine: Engine) -> None:
    clock = VirtualClock(T0)
    _cluster(engine, clock, "c1", nodes=1)
    agents = ScriptedAgents()
    agents.samples["c1-0"] = [sample(T0, 40)]
    relay = _relay(engine, agents, clock)
    relay.run_pass()
    agents.samples["c1-0"].append(sample(T0 + 5, 60))
    with engine.begin() as conn:  # the table away: the pass cannot store what it pulled
        conn.execute(text("ALTER TABLE telemetry_points RENAME TO telemetry_away"))
    with pytest.raises(DBAPIError):
        relay.run_pass()
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE telemetry_away RENAME TO telemetry_points"))
    relay.run_pass()
    # first asked from the 60 s bucket holding "a minute ago" (not the whole ring); after the
    # failed write, from the open buckets' start: they are rebuilt whole
    assert agents.asked == [("c1-0", T0 - 80 - 1e-3), ("c1-0", T0), ("c1-0", T0 - 20 - 1e-3)]
    assert _points(engine) == {(0, 10, T0): (2, 50.0), (0, 60, T0 - 20): (2, 50.0)}


def test_retention_prunes_and_gone_nodes_drop_out(engine: Engine) -> None:
    clock = VirtualClock(T0)
    cluster_id = _cluster(engine, clock, "c1")
    agents = ScriptedAgents()
    _feed(agents, "c1", T0, [40])
    relay = _relay(engine, agents, clock, retention_s={10: 60.0, 60: 600.0})
    relay.run_pass()
    assert len(_points(engine)) == 4
    clock.advance(120)
    with session_scope(engine) as session:
        for node in session.scalars(select(Node).where(Node.node_rank == 1)):
            node.state = NodeState.TERMINATED
    relay.run_pass()  # the 10 s points are past their hour (here a minute); rank 1 is gone
    assert set(_points(engine)) == {(0, 60, T0 - 20), (1, 60, T0 - 20)}
    assert [n.node_rank for n in relay.latest.of_cluster(cluster_id)] == [0]


def test_the_rendered_text_has_the_documented_series_and_drops_stale_nodes(
    engine: Engine,
) -> None:
    clock = VirtualClock(T0 + 1)
    cluster_id = _cluster(engine, clock, "c1")
    agents = ScriptedAgents()
    full = sample(T0, 40, ecc=2, throttle=("sw_thermal",), step=9, rtt=0.004)
    full["train"]["checkpoint_at"] = T0 - 30
    agents.samples["c1-0"] = [full]
    agents.samples["c1-1"] = [sample(T0 - 25, 10)]  # older than 3 intervals at the next pass
    relay = _relay(engine, agents, clock)
    clock.advance(10)
    relay.run_pass()
    families = {f.name: f for f in text_string_to_metric_families(relay.metrics.text().decode())}
    util = {(s.labels["node_rank"], s.labels["gpu"]): s.value
            for s in families["gpulease_gpu_utilization_percent"].samples}  # fmt: skip
    assert util == {("0", "0"): 40.0, ("0", "1"): 60.0}
    labels = families["gpulease_gpu_utilization_percent"].samples[0].labels
    assert labels == {"cluster": "c1", "job_id": "", "node_rank": "0", "provider": "sim",
                      "region": "us-east-1", "instance_type": "p4d.24xlarge", "spot": "true",
                      "gpu": "0"}  # fmt: skip
    assert "job" not in labels
    mem = families["gpulease_gpu_memory_used_bytes"].samples[0].value
    assert mem == 400.0 * 1_000_000
    throttled = {s.labels["reason"]: s.value for s in families["gpulease_gpu_throttled"].samples
                 if s.labels["gpu"] == "0"}  # fmt: skip
    assert throttled["sw_thermal"] == 1.0 and throttled["hw_slowdown"] == 0.0
    ecc = families["gpulease_gpu_ecc_errors"].samples
    assert ecc[0].name == "gpulease_gpu_ecc_errors_total" and ecc[0].value == 2.0
    assert families["gpulease_node_cpu_percent"].samples[0].value == 20.0
    assert families["gpulease_node_peer_rtt_seconds"].samples[0].labels["peer_rank"] == "1"
    assert families["gpulease_train_step"].samples[0].value == 9.0
    assert families["gpulease_train_checkpoint_age_seconds"].samples[0].value == 41.0
    avail = families["gpulease_node_gpu_metrics_available"].samples[0]
    assert avail.labels["source"] == "fake" and avail.value == 1.0
    assert families["gpulease_node_last_sample_timestamp_seconds"].samples[0].value == T0
    relay_hist = families["gpulease_telemetry_relay_seconds"].samples
    assert any(s.name.endswith("_count") and s.value == 1.0 for s in relay_hist)
    assert cluster_id > 0


def test_a_node_sampled_slowly_stays_for_three_of_its_own_periods(engine: Engine) -> None:
    clock = VirtualClock(T0 + 11)
    _cluster(engine, clock, "c1", nodes=1)
    agents = ScriptedAgents(interval_s=20.0)  # the agent samples every 20 s: 60 s of grace
    agents.samples["c1-0"] = [sample(T0 - 25, 10)]
    relay = _relay(engine, agents, clock)
    relay.run_pass()
    assert b'gpulease_gpu_utilization_percent{cluster="c1"' in relay.metrics.text()
    clock.advance(30)
    relay.run_pass()
    assert b'gpulease_gpu_utilization_percent{cluster="c1"' not in relay.metrics.text()


def _id(engine: Engine, name: str) -> int:
    with session_scope(engine) as session:
        return session.scalars(select(Cluster.id).where(Cluster.name == name)).one()


def test_a_first_pull_asks_for_the_last_minutes_not_the_whole_ring(engine: Engine) -> None:
    now = T0 + 3600.0
    clock = VirtualClock(now)
    _cluster(engine, clock, "c1")  # rank 0: never stored; rank 1: stored two hours ago
    agents = ScriptedAgents()
    for rank in (0, 1):  # an agent up for an hour: its whole ring, 720 samples 5 s apart
        agents.samples[f"c1-{rank}"] = [sample(now - 5 * i, 50) for i in range(720)][::-1]
    old = T0 - 7200 - 20  # a 60 s bucket start, long before the window
    with session_scope(engine) as session:
        row = PointRow(
            _id(engine, "c1"), "c1", None, 1, 60, old, 12, {"gpus": [{"utilization_pct": 7}]}
        )
        upsert_points(session, [row])
    relay = _relay(engine, agents, clock)
    folded = relay.run_pass()
    window = bucket_start(now - 60, 60) - 1e-3  # the 60 s bucket holding "a minute ago"
    assert sorted(agents.asked) == [("c1-0", window), ("c1-1", window)]
    assert folded == 2 * len([s for s in agents.samples["c1-0"] if s["at"] > window]) <= 2 * 25
    points = _points(engine)
    assert min(at for (_, res, at) in points if res == 60 and at != old) == window + 1e-3
    with session_scope(engine) as session:  # the old row is not replaced by a partial one
        kept = session.scalars(select(TelemetryPoint).where(TelemetryPoint.at == old)).one()
        assert (kept.samples, kept.data) == (12, row.data)


@dataclass
class WatchedAgents(ScriptedAgents):
    """Also records, at each ask, how many nodes already have stored points."""

    engine: Engine | None = None
    stored_when_asked: dict[str, int] = field(default_factory=dict)

    def metrics(self, node: NodeRef, since: float | None) -> Mapping[str, Any]:
        assert self.engine is not None
        with session_scope(self.engine) as session:
            ranks = session.scalars(select(TelemetryPoint.node_rank).distinct()).all()
        self.stored_when_asked[node.instance_id] = len(ranks)
        return super().metrics(node, since)


def test_a_pass_folds_and_writes_a_batch_before_pulling_the_next(engine: Engine) -> None:
    clock = VirtualClock(T0)
    nodes = 2 * BATCH_NODES + 5
    _cluster(engine, clock, "big", nodes=nodes)
    agents = WatchedAgents(engine=engine)
    for rank in range(nodes):
        agents.samples[f"big-{rank}"] = [sample(T0, rank % 100)]
    relay = _relay(engine, agents, clock)
    assert relay.run_pass() == nodes
    seen = agents.stored_when_asked
    assert {seen[f"big-{r}"] for r in range(BATCH_NODES)} == {0}
    assert {seen[f"big-{r}"] for r in range(BATCH_NODES, 2 * BATCH_NODES)} == {BATCH_NODES}
    assert seen[f"big-{nodes - 1}"] == 2 * BATCH_NODES
    assert {rank for rank, _, _ in _points(engine)} == set(range(nodes))
    relay.close()


def test_a_node_without_new_samples_keeps_its_rendered_text(engine: Engine) -> None:
    clock = VirtualClock(T0 + 1)
    _cluster(engine, clock, "c1", nodes=1)
    agents = ScriptedAgents()
    trained = sample(T0, 40, step=3, rtt=0.01)
    trained["train"]["checkpoint_at"] = T0 - 9
    agents.samples["c1-0"] = [trained]
    relay = _relay(engine, agents, clock)
    relay.run_pass()
    first = relay.metrics.text().decode()
    clock.advance(10)
    assert relay.run_pass() == 0  # nothing new: the node's piece is served again
    second = relay.metrics.text().decode()

    def lines(text: str, name: str) -> list[str]:
        return [ln for ln in text.splitlines() if ln.startswith(name + "{")]

    util = "gpulease_gpu_utilization_percent"
    assert lines(first, util) == lines(second, util) and len(lines(first, util)) == 2
    age = "gpulease_train_checkpoint_age_seconds"
    assert [ln.rsplit(" ", 1)[1] for ln in lines(first, age) + lines(second, age)] == [
        "10.0",
        "20.0",
    ]  # the checkpoint's age is of now, each pass
