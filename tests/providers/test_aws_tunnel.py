"""SSH tunnels to agents: the command line, and the lifecycle with a fake ``ssh`` (a script
that listens on the forwarded local port). A real ssh to a real VM is not tested here."""

from __future__ import annotations

import sys
from pathlib import Path

from gpulease.providers.aws.tunnel import Tunnels, ssh_command
from tests.waiting import wait_until

FAKE_SSH = """#!{python}
import socket, sys, time
spec = sys.argv[sys.argv.index("-L") + 1]
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", int(spec.split(":")[0])))
sock.listen()
open({log!r}, "a").write(" ".join(sys.argv[1:]) + "\\n")
time.sleep(60)
"""


def test_the_command_forwards_a_local_port_to_the_agent_on_the_vm_loopback(
    tmp_path: Path,
) -> None:
    command = ssh_command(
        host="203.0.113.9", user="ec2-user", key=tmp_path / "k.pem",
        known_hosts=tmp_path / "known_hosts", local_port=4000, agent_port=7070,
    )  # fmt: skip
    assert command[:4] == ["ssh", "-N", "-L", "4000:127.0.0.1:7070"]
    assert "StrictHostKeyChecking=accept-new" in command
    assert f"UserKnownHostsFile={tmp_path / 'known_hosts'}" in command
    assert command[command.index("-i") + 1] == str(tmp_path / "k.pem")
    assert command[-1] == "ec2-user@203.0.113.9"


def test_a_tunnel_comes_up_is_reused_and_closes(tmp_path: Path) -> None:
    log = tmp_path / "ssh.log"
    ssh = tmp_path / "ssh"
    ssh.write_text(FAKE_SSH.format(python=sys.executable, log=str(log)))
    ssh.chmod(0o755)
    tunnels = Tunnels(tmp_path / "known_hosts", user="ec2-user", agent_port=7070, ssh=str(ssh))
    key = tmp_path / "k.pem"
    try:
        url = wait_until(lambda: tunnels.agent_url("i-1", "203.0.113.9", key), 10, "the tunnel")
        assert url.startswith("http://127.0.0.1:")
        assert tunnels.agent_url("i-1", "203.0.113.9", key) == url  # the same tunnel
        assert tunnels.open_ids() == ["i-1"]
        procs = [t.proc for t in tunnels._tunnels.values()]
    finally:
        tunnels.close()
    assert tunnels.open_ids() == [] and all(p.poll() is not None for p in procs)
    assert log.read_text().count("-N -L") == 1
