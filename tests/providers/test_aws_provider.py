"""The aws provider against a real moto server process: idempotent launches, spot and zones,
tags on instances and volumes, the owner's key pair and security group, injected throttling and
capacity faults, settings validation, node tokens, the orphan sweep, and user-data."""

from __future__ import annotations

import itertools
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulease.errors import UserInputError
from gpulease.providers.aws import AwsProvider, AwsSettings
from gpulease.providers.aws.userdata import user_data
from gpulease.providers.base import (
    TAG_OWNER,
    TAG_REQUEST,
    CapacityError,
    InstanceState,
    LaunchRequest,
    ProviderError,
)
from tests.awsfixtures import aws_client, aws_env, ec2_env, moto_server  # noqa: F401 - fixtures

OWNER = "gl-test"


@pytest.fixture
def provider(ec2_env: str, tmp_path: Path) -> Iterator[AwsProvider]:  # noqa: F811 - fixture
    made = AwsProvider(
        tmp_path / "aws", AwsSettings(tunnels=False, ssh_cidr="198.51.100.7/32"), retry_base=0.01
    )
    yield made
    made.close()


@pytest.fixture
def ec2(ec2_env: str) -> Any:  # noqa: F811 - fixture
    return aws_client("ec2", ec2_env)


def _request(n: int = 1, **kw: Any) -> LaunchRequest:
    kw.setdefault("request_id", f"req-{next(_ids)}")
    kw.setdefault("cluster", "c1")
    kw.setdefault("owner", OWNER)
    return LaunchRequest(num_nodes=n, **kw)


_ids = itertools.count()


def _count_calls(provider: AwsProvider, operation: str, region: str = "us-east-1") -> list[int]:
    calls: list[int] = []
    events = provider.ec2.client(region).meta.events
    events.register(f"before-call.ec2.{operation}", lambda **_: calls.append(1))
    return calls


def _fail(provider: AwsProvider, operation: str, code: str, when: Any) -> list[int]:
    """Make ``operation`` raise ClientError ``code`` whenever ``when(params)`` is true."""
    from botocore.exceptions import ClientError

    raised: list[int] = []

    def handler(params: dict[str, Any], **_: Any) -> None:
        if when(params.get("body") or {}):
            raised.append(1)
            raise ClientError({"Error": {"Code": code, "Message": "injected"}}, operation)

    provider.ec2.client("us-east-1").meta.events.register(f"before-call.ec2.{operation}", handler)
    return raised


def test_a_repeated_launch_returns_the_same_instances_from_one_run_instances(
    provider: AwsProvider,
) -> None:
    runs = _count_calls(provider, "RunInstances")
    request = _request(2)
    first = provider.launch(request)
    again = provider.launch(request)
    assert [i.id for i in again] == [i.id for i in first]
    assert [i.node_rank for i in first] == [0, 1]
    assert len(runs) == 1


def test_a_spot_launch_is_spot_in_the_requested_zone_and_cannot_stop(
    provider: AwsProvider, ec2: Any
) -> None:
    (inst,) = provider.launch(_request(spot=True, zone="us-east-1b", instance_type="p3.2xlarge"))
    described = ec2.describe_instances(InstanceIds=[inst.id])["Reservations"][0]["Instances"][0]
    assert described["InstanceLifecycle"] == "spot"
    assert described["Placement"]["AvailabilityZone"] == "us-east-1b"
    assert inst.spot and inst.zone == "us-east-1b" and inst.instance_type == "p3.2xlarge"
    with pytest.raises(ProviderError, match="spot"):
        provider.stop([inst.id])


def test_request_tags_are_on_instances_and_volumes(provider: AwsProvider, ec2: Any) -> None:
    request = _request(2, tags={"team": "vision"})
    ids = {i.id for i in provider.launch(request)}
    filters = [{"Name": f"tag:{TAG_REQUEST}", "Values": [request.request_id]}]
    volumes = ec2.describe_volumes(Filters=filters)["Volumes"]
    assert {v["Attachments"][0]["InstanceId"] for v in volumes} == ids
    for volume in volumes:
        tags = {t["Key"]: t["Value"] for t in volume["Tags"]}
        assert tags["team"] == "vision" and tags[TAG_OWNER] == OWNER


def _groups(ec2: Any) -> list[dict[str, Any]]:
    return [g for g in ec2.describe_security_groups()["SecurityGroups"]
            if g["GroupName"] == f"gpulease-{OWNER}"]  # fmt: skip


def test_key_pair_and_group_are_made_once_per_region_and_removed_when_unused(
    provider: AwsProvider, ec2: Any, tmp_path: Path
) -> None:
    ids = [i.id for r in (_request(), _request(2)) for i in provider.launch(r)]
    keys = ec2.describe_key_pairs(KeyNames=[f"gpulease-{OWNER}"])["KeyPairs"]
    assert len(keys) == 1 and len(_groups(ec2)) == 1
    pem = tmp_path / "aws" / f"us-east-1-{OWNER}.pem"
    assert stat.S_IMODE(pem.stat().st_mode) == 0o600
    (group,) = _groups(ec2)
    rules = sorted(
        (p["IpProtocol"], p.get("FromPort"), [r["CidrIp"] for r in p["IpRanges"]],
         sorted({g["GroupId"] for g in p["UserIdGroupPairs"]}))
        for p in group["IpPermissions"]
    )  # fmt: skip
    # SSH from the server only; everything from the group's own members (node to node)
    assert rules == [("-1", None, [], [group["GroupId"]]), ("tcp", 22, ["198.51.100.7/32"], [])]
    provider.terminate(ids[:1])
    provider.poll_events()
    assert len(_groups(ec2)) == 1  # still used by the other launch
    provider.terminate(ids[1:])
    provider.poll_events()
    assert _groups(ec2) == [] and not pem.exists()
    assert ec2.describe_key_pairs()["KeyPairs"] == []


def test_launch_succeeds_while_half_of_the_calls_are_throttled(provider: AwsProvider) -> None:
    flip = itertools.cycle([True, False])
    raised = _fail(provider, "*", "RequestLimitExceeded", lambda _body: next(flip))
    instances = provider.launch(_request(2))
    assert len(instances) == 2 and raised
    assert len(provider.list_instances({TAG_OWNER: OWNER})) == 2


def test_throttling_that_never_ends_is_provider_unavailable_after_bounded_attempts(
    provider: AwsProvider,
) -> None:
    from gpulease.providers.base import ProviderUnavailable

    raised = _fail(provider, "DescribeInstances", "Throttling", lambda _body: True)
    with pytest.raises(ProviderUnavailable):
        provider.list_instances({TAG_OWNER: OWNER})
    assert len(raised) == provider.ec2.attempts


def test_no_capacity_in_one_zone_is_a_capacity_error_naming_it(provider: AwsProvider) -> None:
    def in_zone_a(body: Any) -> bool:
        return "us-east-1a" in str(body)

    _fail(provider, "RunInstances", "InsufficientInstanceCapacity", in_zone_a)
    with pytest.raises(CapacityError) as caught:
        provider.launch(_request(zone="us-east-1a"))
    assert (caught.value.region, caught.value.zone) == ("us-east-1", "us-east-1a")
    (inst,) = provider.launch(_request(zone="us-east-1b"))  # the failover target works
    assert inst.zone == "us-east-1b"


def test_stop_and_start_on_demand(provider: AwsProvider) -> None:
    (inst,) = provider.launch(_request())
    provider.stop([inst.id])
    (listed,) = provider.list_instances({TAG_REQUEST: inst.tags[TAG_REQUEST]})
    assert listed.state in (InstanceState.STOPPING, InstanceState.STOPPED)
    provider.start([inst.id])


def test_node_tokens_are_per_request_and_survive_a_restart(
    provider: AwsProvider, tmp_path: Path
) -> None:
    a = provider.launch(_request(2))
    (b,) = provider.launch(_request())
    token = provider.node_token(a[0].id).get_secret_value()
    assert provider.node_token(a[1].id).get_secret_value() == token
    assert provider.node_token(b.id).get_secret_value() != token
    restarted = AwsProvider(tmp_path / "aws", AwsSettings(tunnels=False))
    assert restarted.node_token(a[0].id).get_secret_value() == token
    with pytest.raises(ProviderError):
        restarted.node_token("i-0000000000000000")


def test_regions_used_are_listed_after_a_restart(provider: AwsProvider, tmp_path: Path) -> None:
    (inst,) = provider.launch(_request(region="us-west-2"))
    restarted = AwsProvider(tmp_path / "aws", AwsSettings(tunnels=False))
    listed = restarted.list_instances({TAG_OWNER: OWNER})
    assert [(i.id, i.region) for i in listed] == [(inst.id, "us-west-2")]


def test_the_orphan_sweep_terminates_only_this_owners_instances(
    provider: AwsProvider, tmp_path: Path
) -> None:
    from gpulease.controller.sweep import sweep_orphans
    from gpulease.state import make_engine, upgrade

    engine = make_engine(f"sqlite:///{tmp_path / 'state.db'}")
    upgrade(engine)
    (ours,) = provider.launch(_request())
    (theirs,) = provider.launch(_request(owner="another-server"))
    assert sweep_orphans(engine, {"aws": provider}, OWNER) == [ours.id]
    states = {i.id: i.state for i in provider.list_instances({})}
    assert states[ours.id] in (InstanceState.TERMINATING, InstanceState.TERMINATED)
    assert states[theirs.id] is InstanceState.RUNNING
    engine.dispose()


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"regions": ["nowhere"]}, "providers.aws.regions"),
        ({"ami": "img-1"}, "providers.aws.ami"),
        ({"ssh_cidr": "the office"}, "providers.aws.ssh_cidr"),
        ({"agent_port": 0}, "providers.aws.agent_port"),
        ({"subnets": {"us-east-1a": "vpc-1"}}, "providers.aws.subnets"),
        ({"tunnels": "yes"}, "providers.aws.tunnels"),
        ({"install": "conda"}, "providers.aws.install"),
        ({"python": ""}, "providers.aws.python"),
        ({"address_map": 7}, "providers.aws.address_map"),
        ({"placement_group": "no"}, "providers.aws.placement_group"),
        ({"colour": "blue"}, "providers.aws.colour"),
    ],
)
def test_bad_settings_name_the_field(section: dict[str, Any], field: str) -> None:
    with pytest.raises(UserInputError, match=field):
        AwsSettings.from_mapping(section)


def test_settings_defaults_and_values() -> None:
    settings = AwsSettings.from_mapping({"regions": ["eu-west-1"], "ssh_cidr": "203.0.113.7"})
    assert settings.regions == ("eu-west-1",) and settings.ssh_cidr == "203.0.113.7/32"
    assert AwsSettings.from_mapping(None).ssh_cidr == "127.0.0.1/32"


def test_user_data_prepares_the_vm_and_leaves_installing_to_the_server() -> None:
    from pydantic import SecretStr

    script = user_data(SecretStr("s3cr3t"), 7070, python="/opt/pytorch/bin/python3")
    assert script.startswith("#!/bin/bash")
    assert "/opt/pytorch/bin/python3 -m venv --system-site-packages" in script
    assert "pip install" not in script and "gpulease.agent" not in script
    assert script.rstrip().endswith("touch $G/ready")


def test_user_data_with_install_pypi_pins_the_version_and_binds_the_agent_to_loopback() -> None:
    from pydantic import SecretStr

    script = user_data(SecretStr("s3cr3t"), 7070, install="pypi", version="1.2.3")
    assert "'gpulease[aws]==1.2.3'" in script
    assert "--host 127.0.0.1" in script and "--port 7070" in script and "--imds" in script


def test_a_node_of_a_task_with_an_image_gets_the_engine_step(
    provider: AwsProvider, ec2: Any
) -> None:
    import base64

    def script(request: LaunchRequest) -> str:
        (inst,) = provider.launch(request)
        data = ec2.describe_instance_attribute(InstanceId=inst.id, Attribute="userData")
        return base64.b64decode(data["UserData"]["Value"]).decode()

    gpu = script(_request(image="ghcr.io/org/img:v1", gpus_per_node=8))
    assert "have podman || have docker" in gpu and "nvidia-ctk cdi generate" in gpu
    assert "have podman" not in script(_request(gpus_per_node=8))


def test_the_server_builds_aws_only_from_a_providers_aws_section(
    ec2_env: str,  # noqa: F811 - fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpulease.server.providers import build_providers, describe, provider_settings

    monkeypatch.setenv("GPULEASE_HOME", str(tmp_path / "home"))
    config = {"providers": {"aws": {"regions": ["us-east-1"], "tunnels": False}}}
    built = build_providers(config)
    try:
        assert isinstance(built["aws"], AwsProvider)
        assert built["aws"].root == tmp_path / "home" / "aws"
        rows = {r["name"]: r for r in describe(built, provider_settings(config))}
        assert rows["aws"]["enabled"] and rows["aws"]["spot"] and rows["aws"]["stop_start"]
    finally:
        for made in built.values():
            made.close()
    rows = {r["name"]: r for r in describe(build_providers({}), provider_settings({}))}
    assert rows["aws"] == {
        "name": "aws", "enabled": False,
        "reason": "no providers.aws section in the config (see docs/aws.md)",
    }  # fmt: skip
    with pytest.raises(UserInputError, match=r"providers\.aws\.regions"):
        build_providers({"providers": {"aws": {"regions": "mars"}}})


# --- a task's image_id (provider_config.aws.ami) and its root disk (disk_gb, disk_tier) --------

AMI_A, AMI_B = "ami-03cf127a", "ami-12c6146b"  # moto's stock images, in every region


def _described(ec2: Any, instance_id: str) -> dict[str, Any]:
    found = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return dict(found)


def _ec2_in(ec2: Any, region: str) -> Any:
    import boto3

    return boto3.client(
        "ec2", endpoint_url=ec2.meta.endpoint_url, region_name=region,
        aws_access_key_id="testing", aws_secret_access_key="testing",
    )  # fmt: skip


def test_an_instance_starts_from_the_tasks_ami_also_from_a_per_region_mapping(
    provider: AwsProvider, ec2: Any
) -> None:
    (one,) = provider.launch(_request(provider_config={"aws": {"ami": AMI_B}}))
    assert _described(ec2, one.id)["ImageId"] == AMI_B
    per_region = {"aws": {"ami": {"us-east-1": AMI_A, "us-west-2": AMI_B}}}
    (east,) = provider.launch(_request(provider_config=per_region))
    (west,) = provider.launch(_request(provider_config=per_region, region="us-west-2"))
    assert _described(ec2, east.id)["ImageId"] == AMI_A
    assert _described(_ec2_in(ec2, "us-west-2"), west.id)["ImageId"] == AMI_B
    with pytest.raises(ProviderError, match=r"provider_config\.aws\.ami has no AMI for eu-west-1"):
        provider.launch(_request(provider_config=per_region, region="eu-west-1"))


def _root_volume(ec2: Any, instance_id: str) -> dict[str, Any]:
    instance = _described(ec2, instance_id)
    (mapping,) = instance["BlockDeviceMappings"]
    assert mapping["DeviceName"] == "/dev/sda1"  # the AMI's RootDeviceName
    (volume,) = ec2.describe_volumes(VolumeIds=[mapping["Ebs"]["VolumeId"]])["Volumes"]
    return dict(volume)


def _sent_mappings(provider: AwsProvider) -> list[Any]:
    """The BlockDeviceMappings each RunInstances call sent (moto keeps no Iops/Throughput)."""
    sent: list[Any] = []
    events = provider.ec2.client("us-east-1").meta.events
    events.register(
        "provide-client-params.ec2.RunInstances",
        lambda params, **_: sent.append(params.get("BlockDeviceMappings")),
    )
    return sent


@pytest.mark.parametrize(
    ("disk_gb", "tier", "size", "volume_type", "iops", "throughput"),
    [
        (100.0, "high", 100, "gp3", 7000, 437),
        (250.5, "medium", 251, "gp3", 3500, 218),
        (64.0, "low", 64, "standard", None, None),
        (8.0, None, 15, None, None, None),  # never below the AMI's 15 GiB root snapshot
        (None, "high", 15, "gp3", 7000, 437),  # the AMI's size, the tier's type
    ],
)
def test_the_root_volume_has_the_tasks_size_and_tier(  # noqa: PLR0917 - parametrized
    provider: AwsProvider, ec2: Any, disk_gb: float | None, tier: str | None, size: int,
    volume_type: str | None, iops: int | None, throughput: int | None,
) -> None:  # fmt: skip
    sent = _sent_mappings(provider)
    request = _request(2, disk_gb=disk_gb, disk_tier=tier, provider_config={"aws": {"ami": AMI_A}})
    instances = provider.launch(request)
    for inst in instances:
        volume = _root_volume(ec2, inst.id)
        assert volume["Size"] == size
        if volume_type:
            assert volume["VolumeType"] == volume_type
        tags = {t["Key"]: t["Value"] for t in volume["Tags"]}
        assert tags[TAG_REQUEST] == request.request_id
    (mappings,) = sent
    ebs = mappings[0]["Ebs"]
    assert ebs["DeleteOnTermination"] is True
    assert (ebs.get("Iops"), ebs.get("Throughput")) == (iops, throughput)
    provider.terminate([i.id for i in instances])
    assert (
        ec2.describe_volumes(
            Filters=[{"Name": f"tag:{TAG_REQUEST}", "Values": [request.request_id]}]
        )["Volumes"]
        == []
    )  # deleted with the instances


def test_without_disk_or_tier_the_launch_sends_no_mapping(provider: AwsProvider) -> None:
    sent = _sent_mappings(provider)
    provider.launch(_request())
    assert sent == [None]


def test_the_tiers_map_as_skypilots_aws_backend() -> None:
    from gpulease.providers.aws.volumes import RootDevice, root_volume, tier_spec

    table = {t: tier_spec(t) for t in ("low", "medium", "high", "ultra", "best")}
    assert {t: (s.volume_type, s.iops, s.throughput) for t, s in table.items()} == {
        "low": ("standard", None, None), "medium": ("gp3", 3500, 218),
        "high": ("gp3", 7000, 437), "ultra": ("io2", 20000, None), "best": ("io2", 20000, None),
    }  # fmt: skip
    root = RootDevice("/dev/xvda", 8)
    # io2 at 20000 IOPS needs 40 GiB (500 IOPS per GiB): the volume is made that large
    ultra = {"DeleteOnTermination": True, "VolumeSize": 40, "VolumeType": "io2", "Iops": 20000}
    assert root_volume(root, None, "ultra") == [{"DeviceName": "/dev/xvda", "Ebs": ultra}]
    assert root_volume(root, 500, "best")[0]["Ebs"]["VolumeSize"] == 500
    assert root_volume(root, 20, None) == [
        {"DeviceName": "/dev/xvda", "Ebs": {"DeleteOnTermination": True, "VolumeSize": 20}}
    ]
    image = {"RootDeviceName": "/dev/sda1", "BlockDeviceMappings": [
        {"DeviceName": "/dev/sdb", "Ebs": {"VolumeSize": 100}},
        {"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 45}},
    ]}  # fmt: skip
    assert RootDevice.of_image(image) == RootDevice("/dev/sda1", 45)


def test_an_ami_setting_may_be_per_region_and_names_the_bad_entry() -> None:
    settings = AwsSettings.from_mapping({"ami": {"us-east-1": AMI_A}})
    assert settings.ami == {"us-east-1": AMI_A}
    with pytest.raises(UserInputError, match=r"providers\.aws\.ami\.us-east-1: expected an AMI"):
        AwsSettings.from_mapping({"ami": {"us-east-1": "img-1"}})
    with pytest.raises(UserInputError, match=r"providers\.aws\.ami: 'mars' is not a region"):
        AwsSettings.from_mapping({"ami": {"mars": AMI_A}})
