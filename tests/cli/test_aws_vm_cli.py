"""The README's examples on AWS nodes, end to end: the real CLI and server, the aws provider
against moto, and moto's instances made real VMs by tests/awsvm.py (network and mount
namespaces, sshd, user-data, IMDS; the VMs see neither the repository nor the server's home).
The examples are kept to us-east-1, the one region the harness boots VMs in (a CPU task's
cheapest instance may be elsewhere).

``examples/quickstart.yaml --provider aws`` trains to its accuracy line: the server brought its
own gpulease over SSH (the image has torch and no gpulease), the workdir travelled through the
agent, the output came back through the SSH tunnel; ``logs``, ``exec`` and ``ssh`` reach the VM
and ``down`` leaves no instance, VM, key pair or security group. ``examples/ddp-2node.yaml``
trains with DDP across two VMs (torchrun's rendezvous and gloo over the VMs' own addresses).
The quickstart carries a canary secret (``--secret``): the job on the VM sees it, no file of the
VM or of the server's home holds it once the task ended."""

from __future__ import annotations

import hashlib
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpulease.providers.wheel import own_version
from tests.awsvm import AwsVms, aws_vms, vm_config, vm_image, vm_moto, vm_network, vm_user  # noqa: F401
from tests.cli.conftest import ROOT, Cli
from tests.server.test_secrets_canary import files_holding
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("awsvm")]


def _in_us_east_1(example: str, folder: Path) -> str:
    """A copy of the example kept to us-east-1 (the harness's region); relative paths in it
    still resolve from the repository, where the CLI runs."""
    task = yaml.safe_load((ROOT / "examples" / example).read_text())
    task.setdefault("resources", {})["regions"] = ["us-east-1"]
    copy = folder / example
    copy.write_text(yaml.safe_dump(task, sort_keys=False))
    return str(copy)


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result


def _tagged(ec2: Any, kind: str) -> list[dict[str, Any]]:
    found = (ec2.describe_security_groups()["SecurityGroups"] if kind == "groups"
             else ec2.describe_key_pairs()["KeyPairs"])  # fmt: skip
    return [x for x in found if any(t["Key"] == "gpulease-owner" for t in x.get("Tags", []))]


def test_the_quickstart_trains_on_a_vm_with_the_servers_own_gpulease(
    user: Cli,
    aws_vms: AwsVms,  # noqa: F811 - fixture
    tmp_path: Path,
) -> None:
    quickstart = _in_us_east_1("quickstart.yaml", tmp_path)
    canary = secrets.token_hex(16)  # a secret through the SSH tunnel to the VM's agent (issue 20)
    task = yaml.safe_load(Path(quickstart).read_text())
    task["run"] = 'printf %s "$CANARY_TOKEN" | sha256sum; ' + task["run"]
    Path(quickstart).write_text(yaml.safe_dump({**task, "secrets": {"CANARY_TOKEN": None}}))
    launched = _ok(user("launch", quickstart, "--provider", "aws", "--secret",
                        f"CANARY_TOKEN={canary}", timeout=300))  # fmt: skip
    assert "test accuracy" in launched.stdout and "quickstart: succeeded" in launched.stderr
    assert hashlib.sha256(canary.encode()).hexdigest() in launched.stdout  # the job saw it
    assert "launching quickstart on aws/us-east-1" in launched.stderr
    ((instance_id, vm),) = aws_vms.cloud.vms.items()
    print(f"\nVM boot to agent start: {vm.agent_started_after():.1f} s")
    assert "test accuracy" in _ok(user("logs", "quickstart")).stdout

    version = "import importlib.metadata as m; print(m.version('gpulease'))"
    out = _ok(user("exec", "quickstart", f'echo $MASTER_ADDR; python -c "{version}"')).stdout
    assert out.split() == [vm.address, own_version()]  # the address map; exactly the server's
    shell = _ok(user("ssh", "quickstart", "--command",
                     "echo $NODE_RANK; cat /opt/gpulease/agent.version; ip -o -4 addr show eth0;"
                     f" {aws_vms.cloud.image.python} -c 'import torch, gpulease' 2>&1 | tail -n 1;"
                     " ls train_digits.py"))  # fmt: skip
    rank, agent, addr, image, workdir = shell.stdout.splitlines()
    assert (rank, agent, workdir) == ("0", own_version(), "train_digits.py")  # the task's dir
    assert f"inet {vm.address}/" in addr  # a real ssh session inside the VM's namespace
    assert "No module named 'gpulease'" in image  # the image has torch, not gpulease
    assert canary not in launched.stdout + launched.stderr + shell.stdout
    assert files_holding(vm.folder, canary) == []  # the VM's files, the task ended
    assert files_holding(user.home, canary) == []  # the server's DB, logs, keys

    assert "quickstart: terminated" in _ok(user("down", "quickstart")).stdout
    state = aws_vms.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]
    assert state["Instances"][0]["State"]["Name"] == "terminated"
    wait_until(lambda: not aws_vms.cloud.namespaces() or None, 30, "the VM's namespace to go")
    wait_until(lambda: not _tagged(aws_vms.ec2, "groups") or None, 30, "the security group")
    assert _tagged(aws_vms.ec2, "keys") == []


def test_the_ddp_example_trains_across_two_vms(
    user: Cli,
    aws_vms: AwsVms,  # noqa: F811 - fixture
    tmp_path: Path,
) -> None:
    ddp = _in_us_east_1("ddp-2node.yaml", tmp_path)
    out = _ok(user("launch", ddp, "--provider", "aws", timeout=300))
    assert "(world size 2)" in out.stdout, out.stdout + out.stderr
    head = _ok(user("exec", "ddp-2node", "hostname -I", "--rank", "0")).stdout.split()
    other = _ok(user("exec", "ddp-2node", "echo $MASTER_ADDR $NODE_RANK; hostname -I", "--rank",
                     "1")).stdout.split()  # fmt: skip
    assert {head[0], other[2]} == {vm.address for vm in aws_vms.cloud.vms.values()}  # two VMs
    assert other[:2] == [head[0], "1"]  # rank 1 trained with rank 0's VM as its master
    _ok(user("down", "ddp-2node"))
