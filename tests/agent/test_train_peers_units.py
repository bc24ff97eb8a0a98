"""In process: the agent's parser of the train stats file (property tests), the peer prober with
an injected probe, a refused connect as a round trip, the sample's JSON keys, the submission's
``agent_ports`` / ``accelerator`` (validation, the body older agents accept, the job's env) and
the controller's agent ports by rank."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gpulease.agent.env import job_env
from gpulease.agent.telemetry import NodeSample, Peer, PeerProber, PeerRtt, Sample
from gpulease.agent.telemetry.peers import connect_rtt
from gpulease.agent.telemetry.train import TRAIN_KEYS, BadStats, TrainStatsReader, parse_train_stats
from gpulease.controller.rules import agent_ports
from gpulease.controller.snapshot import NodeView
from gpulease.state import NodeState
from gpulease.wire import NodeTask

finite = st.floats(min_value=0, max_value=1e12, allow_nan=False)
share = st.floats(min_value=0, max_value=1, allow_nan=False)
report = st.fixed_dictionaries(
    {"step": st.integers(0, 10**12), "updated_at": finite},
    optional={"step_time_s": finite | st.none(), "samples_per_s": finite | st.none(),
              "tokens_per_s": finite | st.none(), "mfu": share | st.none(),
              "data_wait_ratio": share | st.none(),
              "checkpoint_step": st.integers(0, 10**12) | st.none(),
              "checkpoint_at": finite | st.none(), "interval_s": finite, "other": st.text()},
)  # fmt: skip


@given(report)
def test_a_valid_report_parses_to_exactly_the_contract_keys(data: dict[str, object]) -> None:
    parsed = parse_train_stats(json.dumps(data))
    assert tuple(parsed) == TRAIN_KEYS
    for key in TRAIN_KEYS:
        value = data.get(key)
        assert parsed[key] == value
        assert value is None or type(parsed[key]) is (int if key.endswith("step") else float)


@given(report, st.sampled_from(TRAIN_KEYS), st.sampled_from(["x", True, -1, [1], 1e400]))
def test_a_wrong_field_is_named(data: dict[str, object], key: str, bad: object) -> None:
    data = {**data, key: bad}
    with pytest.raises(BadStats, match=f"^{key}: "):
        parse_train_stats(json.dumps(data))


@pytest.mark.parametrize("text", ["", "[]", "{", '{"updated_at": 1}', '{"step": 1}'])
def test_not_a_report(text: str) -> None:
    with pytest.raises(BadStats):
        parse_train_stats(text)


def test_the_reader_drops_stale_reports_and_honours_a_longer_interval(tmp_path: Path) -> None:
    path = tmp_path / "train.json"
    reader = TrainStatsReader(lambda: path)
    assert reader.read(1000.0) is None  # no file yet
    path.write_text(json.dumps({"step": 1, "updated_at": 1000.0}))
    assert reader.read(1300.0) is not None and reader.read(1300.1) is None  # 5 min
    path.write_text(json.dumps({"step": 1, "updated_at": 1000.0, "interval_s": 60}))
    assert reader.read(1600.0) is not None and reader.read(1600.1) is None  # 10 x 60 s
    assert TrainStatsReader(lambda: None).read(0.0) is None  # no task


def test_the_prober_keeps_the_latest_round_by_rank() -> None:
    targets = [Peer(2, "10.0.0.3", 7070), Peer(0, "10.0.0.1", 7070)]
    answers = {"10.0.0.1": 0.004, "10.0.0.3": None}
    asked: list[tuple[str, int, float]] = []

    def probe(host: str, port: int, timeout: float) -> float | None:
        asked.append((host, port, timeout))
        return answers[host]

    prober = PeerProber(lambda: targets, interval_s=5.0, timeout_s=0.5, probe=probe)
    assert prober.latest() == ()
    assert prober.probe_once() == (PeerRtt(0, 0.004), PeerRtt(2, None))
    assert prober.latest() == (PeerRtt(0, 0.004), PeerRtt(2, None))
    assert {t for *_, t in asked} == {0.5}
    targets.clear()
    assert prober.probe_once() == ()


def test_a_refused_connect_is_a_round_trip() -> None:
    with socket.socket() as s:  # a port nothing listens on (bound, not listening)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        rtt = connect_rtt("127.0.0.1", port, 1.0)
    assert rtt is not None and rtt >= 0


def test_the_sample_json_has_train_and_peers() -> None:
    train = {"step": 3, "updated_at": 1.0}
    data = Sample(at=1.0, node=NodeSample(), train=train, peers=(PeerRtt(1, 0.02),)).to_json()
    assert data["train"] == train and data["peers"] == [{"node_rank": 1, "rtt_s": 0.02}]
    assert Sample(at=1.0, node=NodeSample()).to_json()["peers"] == []


def test_agent_ports_and_accelerator_on_the_submission(tmp_path: Path) -> None:
    ips = ("10.0.0.1", "10.0.0.2")
    sub = NodeTask(task_id="t", run="true", num_nodes=2, node_ips=ips, agent_ports=(7070, None),
                   accelerator="T4")  # fmt: skip
    assert sub.wire()["agent_ports"] == [7070, None] and sub.wire()["accelerator"] == "T4"
    plain = NodeTask(task_id="t", run="true")
    assert "agent_ports" not in plain.wire() and "accelerator" not in plain.wire()
    with pytest.raises(ValidationError, match="agent_ports"):
        NodeTask(task_id="t", run="true", num_nodes=2, node_ips=ips, agent_ports=(1,))
    with pytest.raises(ValidationError, match="agent_ports"):
        NodeTask(task_id="t", run="true", num_nodes=2, node_ips=ips, agent_ports=(0, 1))
    places = {"work_dir": tmp_path, "checkpoint_dir": tmp_path / "c",
              "preemption_file": tmp_path / "t" / "preempted"}  # fmt: skip
    env = job_env({}, sub, **places)
    assert env["GPULEASE_ACCELERATOR"] == "T4"
    assert env["GPULEASE_TRAIN_STATS_FILE"] == str(tmp_path / "t" / "train.json")
    bare = job_env({"GPULEASE_ACCELERATOR": "H100"}, plain, **places)
    assert bare["GPULEASE_ACCELERATOR"] == ""  # a node variable: the task's, never inherited


def _node(rank: int, url: str | None) -> NodeView:
    return NodeView(id=rank, rank=rank, instance_id=f"i{rank}", provider="x",
                    state=NodeState.READY, status_changed_at=0.0, agent_url=url,
                    missed_heartbeats=0, last_heartbeat_at=None, exit_code=None)  # fmt: skip


def test_the_controller_gives_the_ports_of_agents_on_the_nodes_own_address() -> None:
    nodes = [_node(1, "http://127.0.0.1:4002"), _node(0, "http://127.0.0.1:4001")]
    assert agent_ports(nodes, ("127.0.0.1", "127.0.0.1")) == (4001, 4002)
    tunnelled = [_node(0, "http://127.0.0.1:5000"), _node(1, None)]
    assert agent_ports(tunnelled, ("10.0.0.1", "10.0.0.2")) == (None, None)
