"""The README's examples on aws VMs (tests/awsvm.py), through the real CLI and server:
``examples/quickstart.yaml`` trains to its accuracy line on one VM, ``examples/ddp-2node.yaml``
trains with DDP across two VMs (torchrun's rendezvous and gloo over the VMs' own addresses, the
node-to-node traffic the security group's self rule admits on EC2). The VMs do not see the
client's files: the workdir travels through the agent (the file upload of ``gpulease.filesync``;
skipped until that is installed)."""

from __future__ import annotations

import importlib.util
import subprocess
from collections.abc import Iterator

import pytest

from tests.awsvm import AwsVms, aws_vms, vm_config, vm_image, vm_moto, vm_network  # noqa: F401
from tests.cli.conftest import Cli

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("awsvm"),
    pytest.mark.skipif(
        importlib.util.find_spec("gpulease.filesync") is None,
        reason="needs the workdir upload through the agent (gpulease.filesync)",
    ),
]


@pytest.fixture
def user(cli: Cli, aws_vms: AwsVms) -> Iterator[Cli]:  # noqa: F811 - fixture
    cli.home.mkdir(parents=True, exist_ok=True)
    (cli.home / "config.yaml").write_text(vm_config(aws_vms.cloud))
    yield cli
    cli("server", "stop")


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result


def test_the_quickstart_trains_on_an_aws_vm(user: Cli, aws_vms: AwsVms) -> None:  # noqa: F811
    out = _ok(user("launch", "examples/quickstart.yaml", "--provider", "aws", timeout=240))
    assert "test accuracy" in out.stdout and "quickstart: succeeded" in out.stderr
    assert "launching quickstart on aws/us-east-1" in out.stderr
    assert [vm.instance_id for vm in aws_vms.cloud.booted] == list(aws_vms.cloud.vms)
    _ok(user("down", "quickstart"))


def test_the_ddp_example_trains_across_two_aws_vms(user: Cli, aws_vms: AwsVms) -> None:  # noqa: F811
    out = _ok(user("launch", "examples/ddp-2node.yaml", "--provider", "aws", timeout=300))
    assert "(world size 2)" in out.stdout, out.stdout + out.stderr
    head = _ok(user("exec", "ddp-2node", "hostname -I", "--rank", "0")).stdout.split()
    other = _ok(user("exec", "ddp-2node", "echo $MASTER_ADDR $NODE_RANK; hostname -I", "--rank",
                     "1")).stdout.split()  # fmt: skip
    addresses = {vm.address for vm in aws_vms.cloud.vms.values()}
    assert {head[0], other[2]} == addresses  # two VMs
    assert other[:2] == [head[0], "1"]  # rank 1 trained with rank 0's VM as its master
    _ok(user("down", "ddp-2node"))
