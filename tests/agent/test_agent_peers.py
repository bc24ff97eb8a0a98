"""The peers' round trip on real agents: each agent of a multi-node task measures a TCP connect to
every other node's agent and reports it in its samples' ``peers``.

- Two agents on 127.0.0.1: each reports the other's rank with a round trip; a one-node task has
  no peers.
- Two agents in two network namespaces made by this test, joined by a point-to-point link on a
  private /24 chosen here (10.233.N.0/24) that delays every packet from the first to the second
  by 20 ms (``tests/agent/tun_link.py``: this machine's kernel has no ``sch_netem``, so the
  ``tc … netem delay 20ms`` of a veth is done by a process between two TUN devices). Both report
  a round trip of at least 0.02 s: a lower bound from the injected delay, not a timing bound on
  the test. Needs root and iproute2 (``tests/components.py``: skipped with one line otherwise,
  a failure under ``CI=true``). Everything it makes is removed at the end.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from gpulease.wire import NodeTask
from tests.agent.conftest import AgentProcess
from tests.components import require, require_root, unavailable
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
FAST = ("--metrics-interval", "0.1")
DELAY_S = 0.02


def _peers_of(samples: list[Any]) -> list[Any] | None:
    peers = samples[-1]["peers"] if samples else None
    return peers if peers and all(p["rtt_s"] is not None for p in peers) else None


def test_two_agents_on_loopback_report_each_other(
    agent_factory: Callable[..., AgentProcess],
) -> None:
    agents = [agent_factory(f"n{k}", rank=k, args=FAST) for k in range(2)]
    ports = tuple(urlsplit(a.url).port for a in agents)
    ips = ("127.0.0.1", "127.0.0.1")
    for k, agent in enumerate(agents):
        sub = NodeTask(task_id="pair", run="sleep 30", num_nodes=2, node_rank=k, node_ips=ips,
                       agent_ports=ports)  # fmt: skip
        agent.api.submit(sub)
    for k, agent in enumerate(agents):
        peers = wait_until(lambda a=agent: _peers_of(a.api.metrics()["samples"]), what="peers")
        assert [p["node_rank"] for p in peers] == [1 - k]
        assert peers[0]["rtt_s"] > 0
        agent.api.cancel("pair", 1.0)
    solo = agent_factory("solo", args=FAST)
    solo.api.submit(NodeTask(task_id="solo", run="true"))
    solo.wait_state("solo")
    samples = wait_until(lambda: solo.api.metrics()["samples"], what="a sample")
    assert samples[-1]["peers"] == []


CALL = """
import json, sys
from gpulease.agent.client import AgentClient
from gpulease.wire import NodeTask
client = AgentClient(sys.argv[1], sys.argv[2], timeout=10.0)
if sys.argv[3] == "submit":
    client.submit(NodeTask.model_validate_json(sys.argv[4]))
    print("{}")
else:
    print(json.dumps(client.health() if sys.argv[3] == "health" else client.metrics()))
"""


class Namespaces:
    """Two namespaces joined by the delaying link, an agent in each (rank = index)."""

    def __init__(self, tmp: Path) -> None:
        tag = f"{os.getpid() % 10000}{secrets.token_hex(2)}"
        self.names = [f"glp{tag}a", f"glp{tag}b"]
        self.devs = [f"gpt{tag}a", f"gpt{tag}b"]
        self.subnet = f"10.233.{os.getpid() % 200 + 20}"
        self.addresses = [f"{self.subnet}.1", f"{self.subnet}.2"]
        self.tmp = tmp
        self.link: subprocess.Popen[str] | None = None
        self.agents: list[subprocess.Popen[bytes]] = []
        self.urls: list[str] = []
        self.tokens: list[str] = []

    def up(self) -> None:
        for ns in self.names:
            _run("ip", "netns", "add", ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        self.link = subprocess.Popen(
            [sys.executable, "-m", "tests.agent.tun_link", self.names[0], self.devs[0],
             self.names[1], self.devs[1], str(DELAY_S)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.link.stdout is not None and self.link.stdout.readline().strip() == "ready"
        for k, (ns, dev) in enumerate(zip(self.names, self.devs, strict=True)):
            here, there = self.addresses[k], self.addresses[1 - k]
            _run("ip", "-n", ns, "addr", "add", here, "peer", f"{there}/32", "dev", dev)
            _run("ip", "-n", ns, "link", "set", dev, "up")

    def start_agents(self) -> None:
        for k, ns in enumerate(self.names):
            root = self.tmp / ns
            root.mkdir()
            token = secrets.token_urlsafe(24)
            (root / "token").write_text(token)
            (root / "token").chmod(0o600)
            with (root / "agent.log").open("ab") as log:
                self.agents.append(subprocess.Popen(
                    ["ip", "netns", "exec", ns, sys.executable, "-m", "gpulease.agent", "serve",
                     "--host", self.addresses[k], "--port", "0", "--port-file",
                     str(root / "port"), "--token-file", str(root / "token"), "--node-dir",
                     str(root / "node"), "--node-rank", str(k), *FAST],
                    stdout=log, stderr=log, start_new_session=True,
                ))  # fmt: skip
            port = wait_until(lambda f=root / "port": f.exists() and f.read_text().strip(),
                              20, f"agent {k}'s port")  # fmt: skip
            self.urls.append(f"http://{self.addresses[k]}:{port}")
            self.tokens.append(token)
            wait_until(lambda k=k: self.call(k, "health"), 20, f"agent {k}'s health")

    def call(self, k: int, op: str, arg: str = "") -> Any:
        """``op`` (health, submit, metrics) on agent ``k``, from inside its namespace."""
        done = subprocess.run(
            ["ip", "netns", "exec", self.names[k], sys.executable, "-c", CALL, self.urls[k],
             self.tokens[k], op, arg],
            cwd=ROOT, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        return json.loads(done.stdout) if done.returncode == 0 else None

    def down(self) -> None:
        for proc in self.agents:
            _kill_session(proc)
        if self.link is not None:
            self.link.kill()
            self.link.wait(10)
        for ns in self.names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30, check=False)


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    for pid_dir in Path("/proc").iterdir():
        if pid_dir.name.isdigit():
            try:
                if os.getsid(int(pid_dir.name)) == proc.pid:
                    os.kill(int(pid_dir.name), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
    proc.wait(10)


@pytest.fixture
def namespaces(tmp_path: Path) -> Iterator[Namespaces]:
    require("iproute2")
    require_root("network namespaces and TUN devices")
    if not os.path.exists("/dev/net/tun"):
        unavailable("needs /dev/net/tun (the kernel's TUN driver) for the delaying link")
    hosts = Namespaces(tmp_path)
    try:
        hosts.up()
        hosts.start_agents()
        yield hosts
    finally:
        hosts.down()


def test_the_round_trip_over_a_delayed_private_link(namespaces: Namespaces) -> None:
    ports = tuple(int(urlsplit(u).port or 0) for u in namespaces.urls)
    for k in range(2):
        sub = NodeTask(task_id="ring", run="sleep 60", num_nodes=2, node_rank=k,
                       node_ips=tuple(namespaces.addresses), agent_ports=ports)  # fmt: skip
        assert namespaces.call(k, "submit", sub.model_dump_json()) == {}
    for k in range(2):
        peers = wait_until(
            lambda k=k: _peers_of((namespaces.call(k, "metrics") or {}).get("samples", [])),
            60, f"agent {k}'s peers",
        )  # fmt: skip
        assert [p["node_rank"] for p in peers] == [1 - k]
        assert peers[0]["rtt_s"] >= DELAY_S  # the SYN (from a) or the SYN-ACK (to b) waited
