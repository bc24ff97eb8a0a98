"""SSH tunnels to agents: the command line, and the lifecycle with a fake ``ssh`` (a script that
serves HTTP on the forwarded local port, as an agent behind a tunnel answers). Real ssh into
real sshd "VMs" is tested end to end (tests/cli/test_aws_vm_cli.py, tests/awsvm.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil

from gpulease.providers.aws.tunnel import Tunnels, free_port, reap_leftovers, ssh_command
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


def _orphan(command: list[str]) -> int:
    """Start ``command`` as a killed server leaves its tunnels: in a session of its own, its
    parent gone (a middle process that exits at once); its pid."""
    spawn = ("import subprocess, sys; p = subprocess.Popen(sys.argv[1:], start_new_session=True,"
             " stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL);"
             " print(p.pid)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", spawn, *command], capture_output=True, text=True,
                         check=True)  # fmt: skip
    return int(out.stdout)


def test_a_previous_servers_tunnels_are_reaped_and_no_other(tmp_path: Path) -> None:
    ssh, _log = _fake_ssh(tmp_path, 200)
    mine, other = _target(tmp_path), _target(tmp_path / "other-home")
    left = _orphan(ssh_command(mine, local_port=free_port(), agent_port=7070, ssh=str(ssh)))
    kept = _orphan(ssh_command(other, local_port=free_port(), agent_port=7070, ssh=str(ssh)))
    tunnels = Tunnels(agent_port=7070, ssh=str(ssh))  # this server's own tunnel is kept too
    try:
        wait_until(lambda: tunnels.agent_url("i-1", mine), 10, "this server's tunnel")
        wait_until(lambda: (psutil.pid_exists(left) and psutil.pid_exists(kept)) or None, 10,
                   "the leftovers running")  # fmt: skip
        assert reap_leftovers(mine.known_hosts) == 1
        assert not psutil.pid_exists(left) or psutil.Process(left).status() == "zombie"
        assert psutil.pid_exists(kept) and tunnels.agent_url("i-1", mine) is not None
        assert reap_leftovers(mine.known_hosts) == 0
    finally:
        tunnels.close()
        psutil.Process(kept).kill()
