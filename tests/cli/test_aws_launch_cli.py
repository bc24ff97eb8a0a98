"""`gpulease launch --provider aws` end to end against a real moto server process: the server
plans, creates tagged spot instances in the planned region and zone, `status` shows them, and
`down` leaves no instance, security group or key pair with gpulease tags (checked with boto3).
With ``tunnels: false`` nothing reaches the instance and the cluster stays provisioning: the
EC2 side alone. The node side on aws — moto's instances made VMs — is tests/cli/test_aws_vm_*.py
(docs/aws.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.awsfixtures import aws_client, aws_env, moto_server, reset_moto  # noqa: F401
from tests.cli.conftest import Cli
from tests.server.conftest import wait_until

TAG_OWNER = "gpulease-owner"


@pytest.fixture
def user(cli: Cli, aws_env: str) -> Iterator[Cli]:  # noqa: F811 - fixture
    reset_moto(aws_env)
    cli.home.mkdir(parents=True, exist_ok=True)
    (cli.home / "config.yaml").write_text("providers:\n  aws:\n    tunnels: false\n")
    yield cli
    cli("server", "stop")


def _tagged(ec2: Any, kind: str) -> list[dict[str, Any]]:
    if kind == "instances":
        found = [
            i
            for r in ec2.describe_instances()["Reservations"]
            for i in r["Instances"]
            if i["State"]["Name"] != "terminated"
        ]
    elif kind == "groups":
        found = ec2.describe_security_groups()["SecurityGroups"]
    else:
        found = ec2.describe_key_pairs()["KeyPairs"]
    return [x for x in found if any(t["Key"] == TAG_OWNER for t in x.get("Tags", []))]


@pytest.mark.slow
def test_launch_status_down_on_aws(user: Cli, aws_env: str, tmp_path: Any) -> None:  # noqa: F811
    task = tmp_path / "t4.yaml"
    task.write_text(
        "name: awsjob\nresources:\n  accelerators: T4:1\n  use_spot: true\n"
        "  providers: [aws]\n  regions: [us-east-1]\nrun: echo hi\n"
    )
    plan = json.loads(user("plan", str(task), "--json", check=True).stdout)
    first = next(p for p in plan["plans"] if p["launchable"])
    out = user("launch", str(task), "-d")
    assert out.returncode == 0, out.stderr
    ec2 = aws_client("ec2", aws_env)
    wait_until(lambda: _tagged(ec2, "instances") or None, 30, "the instance")
    (instance,) = _tagged(ec2, "instances")
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags["gpulease-cluster"] == "awsjob" and tags.get("gpulease-request")
    assert instance.get("InstanceLifecycle") == "spot"
    assert instance["InstanceType"] == first["instance_type"]
    zones = ec2.describe_availability_zones()["AvailabilityZones"]
    zone_id = {z["ZoneName"]: z["ZoneId"] for z in zones}[instance["Placement"]["AvailabilityZone"]]
    assert first["zone"] in (None, zone_id)
    assert _tagged(ec2, "groups") and _tagged(ec2, "keys")

    view = json.loads(user("status", "awsjob", "--json", check=True).stdout)["clusters"][0]
    assert view["provider"] == "aws" and view["region"] == "us-east-1"
    assert [n["instance_id"] for n in view["nodes"]] == [instance["InstanceId"]]

    down = user("down", "awsjob")
    assert down.returncode == 0, down.stderr
    assert "terminated" in down.stdout
    assert _tagged(ec2, "instances") == []
    wait_until(lambda: not _tagged(ec2, "groups") or None, 30, "the security group to go")
    assert _tagged(ec2, "keys") == []


@pytest.mark.slow
def test_a_skypilot_image_id_disk_size_and_disk_tier_shape_the_instance(
    user: Cli,
    aws_env: str,  # noqa: F811 - fixture
    tmp_path: Any,
) -> None:
    ec2 = aws_client("ec2", aws_env)
    ami = ec2.describe_images(Owners=["amazon"])["Images"][-1]["ImageId"]
    task = tmp_path / "sky.yaml"
    task.write_text(
        "name: skydisk\nresources:\n  accelerators: T4:1\n"
        f"  image_id: {{us-east-1: {ami}}}\n  disk_size: 120\n  disk_tier: high\nrun: echo hi\n"
    )
    plan = json.loads(user("plan", str(task), "--json", check=True).stdout)
    assert {p["provider"] for p in plan["plans"]} == {"aws"}  # an AMI limits the task to aws
    assert {p["region"] for p in plan["plans"]} == {"us-east-1"}  # and to its regions
    out = user("launch", str(task), "-d")
    assert out.returncode == 0, out.stderr
    assert "disk_tier" not in out.stderr  # aws honours it: no warning
    wait_until(lambda: _tagged(ec2, "instances") or None, 30, "the instance")
    (instance,) = _tagged(ec2, "instances")
    assert instance["ImageId"] == ami
    (mapping,) = instance["BlockDeviceMappings"]
    (volume,) = ec2.describe_volumes(VolumeIds=[mapping["Ebs"]["VolumeId"]])["Volumes"]
    assert (volume["Size"], volume["VolumeType"]) == (120, "gp3")
    assert user("down", "skydisk").returncode == 0
    assert _tagged(ec2, "instances") == []
    gone = [{"Name": "volume-id", "Values": [volume["VolumeId"]]}]
    assert ec2.describe_volumes(Filters=gone)["Volumes"] == []  # deleted with the instance


@pytest.mark.slow
def test_a_cpu_only_task_launches_a_cpu_instance_with_the_cpu_image(
    user: Cli,
    aws_env: str,  # noqa: F811 - fixture
    tmp_path: Any,
) -> None:
    """A task without accelerators (a CPU service) plans the cheapest CPU instance, not a GPU,
    and launches it on-demand with no accelerator: the CPU AMI family, 0 GPUs."""
    task = tmp_path / "svc.yaml"
    task.write_text(
        "name: cpusvc\nresources:\n  cpus: 2+\n  providers: [aws]\n  regions: [us-east-1]\n"
        "run: echo hi\n"
    )
    plan = json.loads(user("plan", str(task), "--json", check=True).stdout)
    first = next(p for p in plan["plans"] if p["launchable"])
    assert first["cpu_only"] and first["gpus_per_node"] == 0 and first["accelerator"] == "CPU"
    assert first["instance_type"] in {"c6i.large", "m6i.large"} and first["vcpus"] == 2
    assert any(r["reason"].startswith("has GPUs, the task asks for none") for r in plan["rejected"])
    out = user("launch", str(task), "-d")
    assert out.returncode == 0, out.stderr
    ec2 = aws_client("ec2", aws_env)
    wait_until(lambda: _tagged(ec2, "instances") or None, 30, "the instance")
    (instance,) = _tagged(ec2, "instances")
    assert instance["InstanceType"] == first["instance_type"]
    assert instance.get("InstanceLifecycle") != "spot"  # on-demand: the plan's pricing
    (image,) = ec2.describe_images(ImageIds=[instance["ImageId"]])["Images"]
    assert image["Name"].startswith(("al2023-ami-", "amzn2-ami-hvm-"))  # the CPU AMI family
    view = json.loads(user("status", "cpusvc", "--json", check=True).stdout)["clusters"][0]
    assert view["accelerator"] is None and view["instance_type"] == first["instance_type"]
    down = user("down", "cpusvc")
    assert down.returncode == 0, down.stderr
    assert _tagged(ec2, "instances") == []
