"""A task on an AWS node, end to end: the real CLI and server, the aws provider against moto,
and moto's instance made a real VM by tests/awsvm.py (network and mount namespaces, sshd,
user-data, IMDS). The server brings its own gpulease over SSH (the image has none), the task's
output comes back through the SSH tunnel, ``logs``, ``exec`` and ``ssh`` reach the VM, and
``down`` leaves no instance, namespace, key pair or security group."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulease.providers.wheel import own_version
from tests.awsvm import AwsVms, aws_vms, vm_config, vm_image, vm_moto, vm_network  # noqa: F401
from tests.cli.conftest import Cli
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("awsvm")]

TASK = """name: awsvm
resources:
  providers: [aws]
  regions: [us-east-1]
run: |
  echo "rank $GPULEASE_NODE_RANK at $GPULEASE_NODE_IPS"
  python -c 'import importlib.metadata as m; print("gpulease", m.version("gpulease"))'
"""


@pytest.fixture
def user(cli: Cli, aws_vms: AwsVms) -> Iterator[Cli]:  # noqa: F811 - fixture
    cli.home.mkdir(parents=True, exist_ok=True)
    (cli.home / "config.yaml").write_text(vm_config(aws_vms.cloud))
    yield cli
    cli("server", "stop")


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result


def _tagged(ec2: Any, kind: str) -> list[dict[str, Any]]:
    found = (ec2.describe_security_groups()["SecurityGroups"] if kind == "groups"
             else ec2.describe_key_pairs()["KeyPairs"])  # fmt: skip
    return [x for x in found if any(t["Key"] == "gpulease-owner" for t in x.get("Tags", []))]


def test_a_task_runs_on_a_vm_with_the_servers_own_gpulease(
    user: Cli,
    aws_vms: AwsVms,  # noqa: F811 - fixture
    tmp_path: Path,
) -> None:
    task = tmp_path / "awsvm.yaml"
    task.write_text(TASK)
    launched = _ok(user("launch", str(task), timeout=180))
    ((instance_id, vm),) = aws_vms.cloud.vms.items()
    print(f"\nVM boot to agent start: {vm.agent_started_after():.1f} s")
    assert f"rank 0 at {vm.address}" in launched.stdout  # the address map is the node's IP
    assert f"gpulease {own_version()}" in launched.stdout  # exactly the server's wheel
    assert "awsvm: succeeded" in launched.stderr
    assert f"gpulease {own_version()}" in _ok(user("logs", "awsvm")).stdout

    out = _ok(user("exec", "awsvm", "echo $MASTER_ADDR; cat /opt/gpulease/agent.version")).stdout
    assert out.split() == [vm.address, own_version()]  # /opt/gpulease is the VM's own
    image_python = aws_vms.cloud.image.python
    shell = _ok(user("ssh", "awsvm", "--command",
                     f"echo $NODE_RANK; cat /opt/gpulease/agent.version; ip -o -4 addr show eth0;"
                     f" {image_python} -c 'import torch, gpulease' 2>&1 | tail -n 1"))  # fmt: skip
    rank, version, *rest = shell.stdout.splitlines()
    assert (rank, version) == ("0", own_version())
    assert f"inet {vm.address}/" in rest[0]  # a real ssh session inside the VM's namespace
    assert "No module named 'gpulease'" in rest[1]  # the image has torch, not gpulease

    assert "awsvm: terminated" in _ok(user("down", "awsvm")).stdout
    state = aws_vms.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]
    assert state["Instances"][0]["State"]["Name"] == "terminated"
    wait_until(lambda: not aws_vms.cloud.namespaces() or None, 30, "the VM's namespace to go")
    wait_until(lambda: not _tagged(aws_vms.ec2, "groups") or None, 30, "the security group")
    assert _tagged(aws_vms.ec2, "keys") == []
