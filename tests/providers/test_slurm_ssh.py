"""``login: {ssh: user@host}``: the Slurm commands run on a login node over ssh. Here the login
node is this machine behind a real ``sshd`` the test starts on 127.0.0.1 (key auth only,
``AcceptEnv SLURM_CONF``), in front of the real dev Slurm cluster: a launch, listing and
terminate all go through ssh."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.providers.base import InstanceState
from gpulease.providers.slurm import SlurmProvider, SlurmSettings
from tests.components import require
from tests.providers.test_slurm_provider import _request
from tests.slurmfixtures import slurm_cluster, slurm_env  # noqa: F401 - fixtures
from tests.waiting import wait_until

pytestmark = pytest.mark.xdist_group("slurm")
SSHD = "/usr/sbin/sshd"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _keygen(path: Path) -> None:
    argv = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)]
    subprocess.run(argv, check=True, timeout=30)


@pytest.fixture
def login_node(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A real sshd on a free 127.0.0.1 port admitting root with a fresh key: (port, key)."""
    require("openssh-server")
    d = tmp_path / "sshd"
    d.mkdir()
    _keygen(d / "host")
    _keygen(d / "client")
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    port = _free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nStrictModes no\nUsePAM no\nAcceptEnv SLURM_CONF\n"
        f"PidFile {d / 'sshd.pid'}\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # its privilege-separation directory
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")],
                            stderr=(d / "sshd.log").open("wb"))  # fmt: skip
    try:
        wait_until(lambda: _listening(port), 10, "sshd to listen")
        yield port, d / "client"
    finally:
        proc.terminate()
        proc.wait(10)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


def test_commands_run_on_the_login_node_over_ssh(
    slurm_env: str,  # noqa: F811 - fixture
    login_node: tuple[int, Path],
    tmp_path: Path,
) -> None:
    port, key = login_node
    options = ["-p", str(port), "-i", str(key), "-o", "StrictHostKeyChecking=no",
               "-o", f"UserKnownHostsFile={tmp_path / 'known_hosts'}"]  # fmt: skip
    settings = SlurmSettings.from_mapping(
        {"login": {"ssh": "root@127.0.0.1"}, "ssh_options": options, "slurm_conf": slurm_env}
    )
    provider = SlurmProvider(tmp_path / "slurm", settings)
    argv = provider.cli._over_ssh(["squeue", "--json"])  # type: ignore[attr-defined]
    assert argv[:3] == ["ssh", "-o", "BatchMode=yes"] and f"SetEnv=SLURM_CONF={slurm_env}" in argv
    assert provider.cli.cluster_name()  # sinfo/scontrol through ssh
    request = _request(num_nodes=1)
    instances = provider.launch(request)
    assert len(instances) == 1
    running = wait_until(
        lambda: [i for i in provider.list_instances({}) if i.id == instances[0].id
                 and i.state is InstanceState.RUNNING],
        60, "the node to run",
    )  # fmt: skip
    assert running[0].agent_url
    provider.terminate([instances[0].id])
    wait_until(
        lambda: all(i.state is InstanceState.TERMINATED for i in provider.list_instances({})
                    if i.id == instances[0].id),
        60, "the allocation to end",
    )  # fmt: skip
    provider.close()
