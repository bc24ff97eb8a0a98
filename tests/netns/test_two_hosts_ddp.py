"""The 2-node training example across two hosts: two network namespaces made by this test, joined
by a bridge, each running a real gpulease agent; torchrun (gloo) in each, rendezvous over the
namespaces' own addresses. Root and iproute2 only (CI runs as root); skipped with one line
saying which is missing otherwise (``tests/components.py``; under ``CI=true`` it fails).

The addresses are on a private /24 between this test's own namespaces only; nothing outside the
machine is addressed, and everything is torn down at the end.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpulease.agent.client import AgentClient
from gpulease.wire import NodeTask
from tests.components import require, require_root
from tests.waiting import wait_until

pytest.importorskip("torch")
pytest.importorskip("sklearn")

ROOT = Path(__file__).resolve().parents[2]
SUBNET = "10.231.{n}"
TERMINAL = {"SUCCEEDED", "FAILED", "PREEMPTED", "CANCELLED"}


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = ["ip", "netns", "exec", ns, "ip", *args] if ns else ["ip", *args]
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)


@dataclass
class Host:
    ns: str
    address: str
    node_dir: Path
    proc: subprocess.Popen[bytes]
    client: AgentClient


class TwoHosts:
    """Two namespaces (eth0 in each) on a bridge in the root namespace."""

    def __init__(self, tmp: Path) -> None:
        tag = f"{os.getpid() % 10000}"
        self.bridge = f"glbr{tag}"
        self.names = [f"gl{tag}a", f"gl{tag}b"]
        self.subnet = SUBNET.format(n=os.getpid() % 200 + 20)
        self.tmp = tmp
        self.hosts: list[Host] = []

    def up(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for k, ns in enumerate(self.names):
            outer, inner = f"{ns}o", f"{ns}i"
            subprocess.run(["ip", "netns", "add", ns], check=True, timeout=30)
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", outer, "master", self.bridge)
            _ip("link", "set", outer, "up")
            _ip("link", "set", inner, "netns", ns)
            _ip("link", "set", inner, "name", "eth0", ns=ns)
            _ip("addr", "add", f"{self.subnet}.{k + 1}/24", "dev", "eth0", ns=ns)
            _ip("link", "set", "eth0", "up", ns=ns)
            _ip("link", "set", "lo", "up", ns=ns)

    def start_agents(self) -> None:
        for k, ns in enumerate(self.names):
            root = self.tmp / ns
            root.mkdir()
            token = secrets.token_urlsafe(24)
            (root / "token").write_text(token)
            (root / "token").chmod(0o600)
            address = f"{self.subnet}.{k + 1}"
            log = (root / "agent.log").open("ab")
            proc = subprocess.Popen(
                ["ip", "netns", "exec", ns, sys.executable, "-m", "gpulease.agent", "serve",
                 "--host", address, "--port", "0", "--port-file", str(root / "port"),
                 "--token-file", str(root / "token"), "--node-dir", str(root / "node"),
                 "--node-rank", str(k)],
                stdout=log, stderr=log, start_new_session=True,
            )  # fmt: skip
            port_file = root / "port"
            port = wait_until(
                lambda f=port_file: f.exists() and f.read_text().strip(), 20, f"agent {k}'s port"
            )
            client = AgentClient(f"http://{address}:{port}", token, timeout=10.0)
            wait_until(client.health, 20, f"agent {k}'s health")
            self.hosts.append(Host(ns, address, root / "node", proc, client))

    def down(self) -> None:
        for host in self.hosts:
            host.client.close()
            _kill_session(host.proc)
        for ns in self.names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30, check=False)
        subprocess.run(
            ["ip", "link", "del", self.bridge], capture_output=True, timeout=30, check=False
        )


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    for pid_dir in Path("/proc").iterdir():
        if pid_dir.name.isdigit():
            try:
                if os.getsid(int(pid_dir.name)) == proc.pid:
                    os.kill(int(pid_dir.name), 9)
            except (ProcessLookupError, PermissionError):
                continue
    proc.wait(10)


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[TwoHosts]:
    require_root("network namespaces (ip netns add)")
    require("iproute2")
    net = TwoHosts(tmp_path)
    try:
        net.up()
        net.start_agents()
        yield net
    finally:
        net.down()


@pytest.mark.xdist_group("torch-ddp")  # multi-process torch runs one at a time
def test_ddp_example_trains_across_two_namespaced_hosts(hosts: TwoHosts) -> None:
    addresses = [h.address for h in hosts.hosts]
    run = (
        'torchrun --nnodes="$NNODES" --node_rank="$NODE_RANK" --nproc_per_node=1 '
        '--master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" '
        "--local_addr={addr} train_digits.py --epochs 5"
    )
    for rank, host in enumerate(hosts.hosts):
        host.client.submit(NodeTask(
            task_id="ddp", run=run.replace("{addr}", host.address), node_rank=rank, num_nodes=2,
            node_ips=addresses, master_port=29611, workdir=str(ROOT / "examples" / "train"),
            envs={"GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1",
                  "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"},
        ))  # fmt: skip
    states = [
        wait_until(lambda h=h: (s := h.client.status("ddp"))["state"] in TERMINAL and s, 240, "ddp")
        for h in hosts.hosts
    ]
    logs = hosts.hosts[0].client.logs("ddp", 0).data.decode()
    assert [s["state"] for s in states] == ["SUCCEEDED", "SUCCEEDED"], logs
    assert "(world size 2)" in logs
    # the second host trained too: rank 1 saw the other host as MASTER_ADDR
    env = hosts.hosts[1].client.exec("ddp", "echo $MASTER_ADDR $NODE_RANK").output.split()
    assert env == [addresses[0], "1"]
