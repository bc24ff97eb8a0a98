"""The server's cluster bench through its REST routes, in process over a real SQLite DB, with
scripted node agents whose exec answers what ``python -m gpulease.bench --json`` prints (a
report built from the contract's classes): every node asked at once with what its offer sold
and a rendezvous on node 0, the reports judged against each other and the instance type's
history, stored, listed, summarised into observed.json; a cluster that is not up is a 409, an
unknown family a 422, a node without a report fails without losing the other's."""

from __future__ import annotations

import json
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy import Engine

from gpulease.bench.observed import OBSERVED_FILE, read_observed
from gpulease.bench.report import BenchReport, Check
from gpulease.clock import VirtualClock
from gpulease.controller import NodeRef
from gpulease.controller.acceptance_store import keep_runs
from gpulease.errors import Retryable
from gpulease.server.api import create_app
from gpulease.server.bench import FREE_PORT, BenchService
from gpulease.server.service import ClusterService
from gpulease.state import (
    ClusterStatus,
    LaunchTarget,
    NodeState,
    create_cluster,
    ensure_node,
    session_scope,
)
from gpulease.wire import ExecResult

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

TOKEN = "t0ken-for-bench"
P5 = LaunchTarget(provider="aws", region="us-east-1", instance_type="p5.48xlarge",
                  accelerator="H100", gpus_per_node=8, num_nodes=2)  # fmt: skip


def report(node: str, *, matmul: float, disk: float) -> BenchReport:
    checks = (
        Check.measured("matmul.bf16", matmul, reference=989.4, reference_source="datasheet"),
        Check.measured("disk.seq_read", disk),  # no datasheet: peers and history judge it
        Check.skipped("store.read", "no checkpoint store"),
    )
    return BenchReport(node=node, started_at=1.0, wall_s=2.0, quick=True, device="cuda",
                       accelerator="H100", gpu_count=8, checks=checks,
                       instance_type="p5.48xlarge")  # fmt: skip


@dataclass
class BenchAgents:
    """Node agents whose exec prints a node's report after some noise (or nothing usable)."""

    outputs: dict[str, Callable[[], str]]
    commands: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    at_once: threading.Barrier = field(default_factory=lambda: threading.Barrier(2, timeout=10))

    def agent(self, node: NodeRef) -> BenchAgents.Port:
        return BenchAgents.Port(self, node.instance_id)

    def token_hash(self, provider: str, instance_id: str) -> str | None:
        return None

    def forget(self, node: NodeRef) -> None:
        pass

    @dataclass
    class Port:
        agents: BenchAgents
        instance_id: str

        def exec(self, task_id: str, command: str, timeout_s: float) -> ExecResult:
            with self.agents.lock:
                self.agents.commands.append((self.instance_id, command))
            if command == FREE_PORT:
                return ExecResult(0, "41234\n", False)
            self.agents.at_once.wait()  # both nodes run at the same time, or this times out
            return ExecResult(0, "numpy 2.x\nmeasuring...\n" + self.agents.outputs[
                self.instance_id]() + "\n", False)  # fmt: skip


@pytest.fixture
def setup(engine: Engine, tmp_path: Path) -> tuple[TestClient, BenchAgents, Path]:
    clock = VirtualClock(start=1_800_000_000.0)
    slow = {"i-0": lambda: report("n0", matmul=900, disk=2000).marker_line(),
            "i-1": lambda: report("n1", matmul=890, disk=200).marker_line()}  # fmt: skip
    agents = BenchAgents(slow)
    service = ClusterService(engine, {}, agents, clock=clock, owner="gl-test")  # type: ignore[arg-type]
    home = tmp_path / "home"
    benches = BenchService(engine, service, home=home, clock=clock)
    with session_scope(engine) as session:
        cluster, _ = create_cluster(session, name="p5", target=P5, task={}, owner="gl-test",
                                    actor="t", now=clock.now())  # fmt: skip
        cluster.status = ClusterStatus.RUNNING
        session.flush()
        for rank in range(2):
            node = ensure_node(session, cluster, instance_id=f"i-{rank}", node_rank=rank,
                               actor="t", now=clock.now(), agent_url=f"http://n{rank}")  # fmt: skip
            node.state = NodeState.READY
        _idle, _ = create_cluster(session, name="idle", target=P5, task={}, owner="gl-test",
                                 actor="t", now=clock.now())  # fmt: skip
    http = TestClient(create_app(service, SecretStr(TOKEN), benches=benches))
    http.headers["Authorization"] = f"Bearer {TOKEN}"
    return http, agents, home


def test_every_node_is_benched_at_once_judged_by_its_peer_and_stored(
    setup: tuple[TestClient, BenchAgents, Path],
) -> None:
    http, agents, home = setup
    answer = http.post("/v1/clusters/p5/bench", json={"quick": True, "only": ["matmul", "disk"]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["verdict"] == "fail" and [n["rank"] for n in body["nodes"]] == [0, 1]
    fast, slow = (n["report"] for n in body["nodes"])
    disk = {r["node"]: next(c for c in r["checks"] if c["name"] == "disk.seq_read")
            for r in (fast, slow)}  # fmt: skip
    assert disk["n1"]["reference_source"] == "peers" and disk["n1"]["verdict"] == "fail"
    assert disk["n1"]["reference"] == 2000 and round(disk["n1"]["ratio"], 2) == 0.1
    assert disk["n0"]["verdict"] == "pass" and body["nodes"][0]["verdict"] == "pass"

    bench = {i: c for i, c in agents.commands if c != FREE_PORT}
    assert [i for i, c in agents.commands if c == FREE_PORT] == ["i-0"]  # node 0's free port
    for rank in (0, 1):
        command = bench[f"i-{rank}"]
        assert command.startswith("python -m gpulease.bench --json --quick --only matmul,disk")
        assert "--accelerator H100 --gpus 8 --gpu-memory-gb 80 --interconnect nvlink" in command
        assert "--instance-type p5.48xlarge" in command and "--store" not in command
        assert f'--rendezvous "$MASTER_ADDR:41234" --rank {rank} --world 2' in command
        assert "--workdir ." in command and f"--node p5/{rank}:i-{rank}" in command

    runs = http.get("/v1/bench", params={"instance_type": "p5.48xlarge"}).json()["runs"]
    assert [(r["rank"], r["verdict"], r["quick"]) for r in runs] == [
        (1, "fail", True),
        (0, "pass", True),
    ]
    assert {r["provider"] for r in runs} == {"aws"} and {r["region"] for r in runs} == {"us-east-1"}
    observed = read_observed(home / OBSERVED_FILE)
    assert observed is not None and len(observed) == 1
    assert observed[0].instance_type == "p5.48xlarge" and observed[0].accelerator == "H100"
    assert observed[0].matmul == {"bf16": (895.0, 2)}


def test_history_judges_a_node_once_its_type_has_enough_runs(
    setup: tuple[TestClient, BenchAgents, Path],
) -> None:
    http, agents, home = setup
    for _ in range(2):  # four stored figures of p5.48xlarge's disk: 2000, 200, 2000, 200
        assert http.post("/v1/clusters/p5/bench", json={"quick": True}).status_code == 200
    agents.outputs["i-1"] = lambda: report("n1", matmul=690, disk=2000).marker_line()
    agents.outputs["i-0"] = lambda: report("n0", matmul=100, disk=2000).marker_line()
    body = http.post("/v1/clusters/p5/bench", json={"quick": True}).json()
    n0 = {c["name"]: c for c in body["nodes"][0]["report"]["checks"]}
    n1 = {c["name"]: c for c in body["nodes"][1]["report"]["checks"]}
    assert n1["disk.seq_read"]["verdict"] == "pass"  # its peer and history (median 1100) agree
    assert n0["matmul.bf16"]["verdict"] == "fail"  # 100 of 989 datasheet, peer and history
    full = http.post("/v1/clusters/p5/bench", json={"quick": False}).json()
    assert full["nodes"][0]["report"]["checks"][1]["reference_source"] == "peers"  # no full history
    assert len(http.get("/v1/bench", params={"limit": 100}).json()["runs"]) == 8
    assert len(http.get("/v1/bench", params={"cluster": "p5", "limit": 3}).json()["runs"]) == 3
    summary = json.loads((home / OBSERVED_FILE).read_text())
    assert summary["offers"][0]["matmul"]["bf16"]["samples"] == 8


def test_refusals_name_the_cluster_or_the_field(
    setup: tuple[TestClient, BenchAgents, Path],
) -> None:
    http, agents, _home = setup
    idle = http.post("/v1/clusters/idle/bench", json={})
    assert idle.status_code == 409 and "'idle' is pending" in idle.json()["error"]["message"]
    missing = http.post("/v1/clusters/nope/bench", json={})
    assert missing.status_code == 404 and "nope" in missing.json()["error"]["message"]
    bad = http.post("/v1/clusters/p5/bench", json={"only": ["matmul", "gpu-burn"]})
    assert bad.status_code == 422 and "only: unknown check families gpu-burn" in bad.text
    assert http.get("/v1/bench", params={"limit": 0}).status_code == 422
    assert agents.commands == []


def test_a_node_without_a_report_fails_and_the_other_is_kept(
    setup: tuple[TestClient, BenchAgents, Path],
) -> None:
    http, agents, _home = setup
    agents.outputs["i-1"] = lambda: "Traceback (most recent call last):\nImportError: torch"
    body = http.post("/v1/clusters/p5/bench", json={"quick": True}).json()
    assert body["verdict"] == "fail"
    assert body["nodes"][0]["verdict"] == "pass" and "report" in body["nodes"][0]
    assert "no report in its output" in body["nodes"][1]["error"]
    assert "ImportError: torch" in body["nodes"][1]["error"]
    assert [r["rank"] for r in http.get("/v1/bench").json()["runs"]] == [0]


def test_a_node_whose_agent_does_not_answer_fails_alone(
    setup: tuple[TestClient, BenchAgents, Path],
) -> None:
    http, agents, _home = setup

    def unreachable() -> str:
        raise Retryable("connection refused")

    agents.outputs["i-0"] = unreachable
    body = http.post("/v1/clusters/p5/bench", json={"quick": True}).json()
    assert [n["verdict"] for n in body["nodes"]] == ["fail", "pass"]  # no peer left to judge by
    assert "node 0 did not answer: connection refused" in body["nodes"][0]["error"]
    assert "report" in body["nodes"][1] and len(http.get("/v1/bench").json()["runs"]) == 1


def test_runs_acceptance_kept_reach_the_observed_summary(engine: Engine, tmp_path: Path) -> None:
    """Acceptance on launch stores its rounds from the reconcile loop; the server's periodic
    refresh rewrites observed.json once new runs are there, and only then."""
    clock = VirtualClock(start=1_800_000_000.0)
    service = ClusterService(engine, {}, BenchAgents({}), clock=clock, owner="gl-test")  # type: ignore[arg-type]
    benches = BenchService(engine, service, home=tmp_path / "home", clock=clock)
    assert benches.refresh_observed() is False  # no run stored: nothing to write
    with session_scope(engine) as session:
        cluster, _ = create_cluster(session, name="p5", target=P5, task={}, owner="gl-test",
                                    actor="t", now=clock.now())  # fmt: skip
        runs = [{"rank": rank, "instance_id": f"i-{rank}",
                 "report": report(f"n{rank}", matmul=m, disk=2000).to_json()}
                for rank, m in ((0, 900.0), (1, 880.0))]  # fmt: skip
        assert keep_runs(session, cluster, runs) == 2
    assert benches.refresh_observed() is True
    observed = read_observed(tmp_path / "home" / OBSERVED_FILE)
    assert observed is not None and observed[0].matmul == {"bf16": (890.0, 2)}
    assert benches.refresh_observed() is False  # nothing new since
