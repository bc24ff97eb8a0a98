"""SSH tunnels to agents: the command line, and the lifecycle with a fake ``ssh`` (a script that
serves HTTP on the forwarded local port, as an agent behind a tunnel answers). Real ssh into
real sshd "VMs" is tested end to end (tests/cli/test_aws_vm_cli.py, tests/awsvm.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from gpulease.providers.aws.tunnel import Tunnels, ssh_command
from gpulease.providers.ssh import SshTarget
from tests.waiting import wait_until

FAKE_SSH = """#!{python}
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
spec = sys.argv[sys.argv.index("-L") + 1]
open({log!r}, "a").write(" ".join(sys.argv[1:]) + "\\n")
class Agent(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response({status})
        self.send_header("Content-Length", "0")
        self.end_headers()
HTTPServer(("127.0.0.1", int(spec.split(":")[0])), Agent).serve_forever()
"""


def _target(tmp_path: Path) -> SshTarget:
    return SshTarget("203.0.113.9", "ec2-user", tmp_path / "k.pem", tmp_path / "known_hosts",
                     alias="i-1")  # fmt: skip


def test_the_command_forwards_a_local_port_to_the_agent_on_the_vm_loopback(
    tmp_path: Path,
) -> None:
    command = ssh_command(_target(tmp_path), local_port=4000, agent_port=7070)
    assert command[:4] == ["ssh", "-N", "-L", "4000:127.0.0.1:7070"]
    assert "StrictHostKeyChecking=accept-new" in command
    assert f"UserKnownHostsFile={tmp_path / 'known_hosts'}" in command
    assert "HostKeyAlias=i-1" in command  # host keys pinned per instance, not per address
    assert "IdentitiesOnly=yes" in command and "BatchMode=yes" in command
    assert command[command.index("-i") + 1] == str(tmp_path / "k.pem")
    assert command[-1] == "ec2-user@203.0.113.9"


def _fake_ssh(tmp_path: Path, status: int) -> tuple[Path, Path]:
    log = tmp_path / "ssh.log"
    ssh = tmp_path / "ssh"
    ssh.write_text(FAKE_SSH.format(python=sys.executable, log=str(log), status=status))
    ssh.chmod(0o755)
    return ssh, log


def test_a_tunnel_comes_up_once_the_agent_answers_is_reused_and_closes(tmp_path: Path) -> None:
    ssh, log = _fake_ssh(tmp_path, 401)  # the probe carries no token: any answer is an agent
    tunnels = Tunnels(agent_port=7070, ssh=str(ssh))
    target = _target(tmp_path)
    try:
        url = wait_until(lambda: tunnels.agent_url("i-1", target), 10, "the tunnel")
        assert url.startswith("http://127.0.0.1:")
        assert tunnels.agent_url("i-1", target) == url  # the same tunnel
        assert tunnels.open_ids() == ["i-1"]
        procs = [t.proc for t in tunnels._tunnels.values()]
    finally:
        tunnels.close()
    assert tunnels.open_ids() == [] and all(p.poll() is not None for p in procs)
    assert log.read_text().count("-N -L") == 1
