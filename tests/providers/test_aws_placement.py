"""Multi-node launches on aws against a real moto server: the security group admits the nodes
to each other, a cluster placement group per multi-node launch (made once, deleted once unused,
remembered across a restart), EFA interfaces on the types DescribeInstanceTypes says have them,
and the address map.

moto 5.2 does not implement CreatePlacementGroup / DescribePlacementGroups /
DeletePlacementGroup (HTTP 500, NotImplementedError) and ignores ``Placement.GroupName`` and
``InterfaceType``. So :class:`PlacementGroupsModel` answers the three placement-group calls in
the provider's own boto3 client (EC2's documented error codes: ``.Duplicate``, ``.InUse``,
``.Unknown``), with "in use" judged from moto's instances; everything else is moto. What the
provider sends is read from the calls' parameters (``before-parameter-build``)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulease.providers.aws import AwsProvider, AwsSettings
from gpulease.providers.aws.placement import TAG_PLACEMENT, PlacementGroups, group_name
from gpulease.providers.base import LaunchRequest, ProviderError
from tests.awsfixtures import aws_client, aws_env, ec2_env, moto_server  # noqa: F401 - fixtures

OWNER = "gl-place"
_ids = itertools.count()


class PlacementGroupsModel:
    """EC2's placement-group calls for one provider's client, which moto lacks."""

    def __init__(self, provider: AwsProvider, moto: Any) -> None:
        self.moto = moto  # a separate client: describes instances without these hooks
        self.groups: dict[str, dict[str, Any]] = {}
        self.members: dict[str, set[str]] = {}
        self.calls: list[str] = []
        self.runs: list[dict[str, Any]] = []
        events = provider.ec2.client("us-east-1").meta.events
        for operation in ("CreatePlacementGroup", "DeletePlacementGroup"):
            events.register(f"before-call.ec2.{operation}", self._answer)
        events.register("before-parameter-build.ec2.RunInstances", self._run_params)
        events.register("after-call.ec2.RunInstances", self._ran)

    def _run_params(self, params: dict[str, Any], **_: Any) -> None:
        self.runs.append(json.loads(json.dumps(params, default=str)))

    def _ran(self, parsed: dict[str, Any], **_: Any) -> None:
        name = (self.runs[-1].get("Placement") or {}).get("GroupName")
        if name:
            self.members.setdefault(name, set()).update(
                i["InstanceId"] for i in parsed["Instances"]
            )

    def _in_use(self, name: str) -> bool:
        ids = sorted(self.members.get(name, ()))
        if not ids:
            return False
        found = self.moto.describe_instances(InstanceIds=ids)["Reservations"]
        return any(i["State"]["Name"] != "terminated" for r in found for i in r["Instances"])

    def _answer(self, model: Any, params: dict[str, Any], **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse, HTTPHeaders
        from botocore.exceptions import ClientError

        body, operation = params.get("body") or {}, model.name
        name = str(body.get("GroupName"))
        self.calls.append(f"{operation} {name}")

        def fail(code: str) -> None:
            raise ClientError({"Error": {"Code": code, "Message": "model"}}, operation)

        if operation == "CreatePlacementGroup":
            if name in self.groups:
                fail("InvalidPlacementGroup.Duplicate")
            tags = {body[k]: body[k.replace(".Key", ".Value")] for k in body if k.endswith(".Key")}
            self.groups[name] = {"Strategy": body.get("Strategy"), "Tags": tags}
        elif name not in self.groups:
            fail("InvalidPlacementGroup.Unknown")
        elif self._in_use(name):
            fail("InvalidPlacementGroup.InUse")
        else:
            del self.groups[name]
        return AWSResponse("https://ec2", 200, HTTPHeaders(), None), {}


@pytest.fixture
def moto(ec2_env: str) -> Any:  # noqa: F811 - fixture
    return aws_client("ec2", ec2_env)


def _provider(root: Path, **settings: Any) -> AwsProvider:
    settings.setdefault("tunnels", False)
    return AwsProvider(root, AwsSettings(**settings), retry_base=0.01)


@pytest.fixture
def provider(moto: Any, tmp_path: Path) -> Iterator[AwsProvider]:
    made = _provider(tmp_path / "aws")
    yield made
    made.close()


@pytest.fixture
def model(provider: AwsProvider, moto: Any) -> PlacementGroupsModel:
    return PlacementGroupsModel(provider, moto)


def _request(n: int, instance_type: str, owner: str = OWNER, **kw: Any) -> LaunchRequest:
    return LaunchRequest(f"req-{next(_ids)}", "c1", owner, num_nodes=n,
                         instance_type=instance_type, **kw)  # fmt: skip


def _described(moto: Any, ids: list[str]) -> list[dict[str, Any]]:
    found = moto.describe_instances(InstanceIds=ids)["Reservations"]
    return [i for r in found for i in r["Instances"]]


def test_a_multi_node_launch_has_its_own_cluster_placement_group_until_unused(
    provider: AwsProvider, model: PlacementGroupsModel, moto: Any, tmp_path: Path
) -> None:
    request = _request(2, "g4dn.12xlarge", zone="us-east-1b")
    first = provider.launch(request)
    name = group_name(OWNER, request.request_id)
    assert model.groups == {name: {"Strategy": "cluster", "Tags": {"gpulease-owner": OWNER}}}
    assert model.runs[-1]["Placement"] == {"GroupName": name, "AvailabilityZone": "us-east-1b"}
    assert {i.tags[TAG_PLACEMENT] for i in first} == {name}
    assert [i.id for i in provider.launch(request)] == [i.id for i in first]  # no second group
    assert model.calls == [f"CreatePlacementGroup {name}"]
    records = json.loads((tmp_path / "aws" / "placement-groups.json").read_text())
    assert records == [{"region": "us-east-1", "owner": OWNER, "name": name}]

    provider.poll_events()
    assert name in model.groups  # its instances still run
    provider.terminate([i.id for i in first])
    provider.poll_events()
    assert model.groups == {} and model.calls[-1] == f"DeletePlacementGroup {name}"
    assert json.loads((tmp_path / "aws" / "placement-groups.json").read_text()) == []


def test_single_nodes_burstable_types_and_the_setting_off_get_no_placement_group(
    provider: AwsProvider, model: PlacementGroupsModel, moto: Any, tmp_path: Path
) -> None:
    provider.launch(_request(1, "g4dn.12xlarge"))
    provider.launch(_request(2, "t3.micro"))  # EC2 refuses T types in cluster placement groups
    off = _provider(tmp_path / "off", placement_group=False)
    off_model = PlacementGroupsModel(off, moto)
    try:
        off.launch(_request(2, "g4dn.12xlarge", owner="gl-place-off"))
    finally:
        off.close()
    assert model.calls == off_model.calls == []
    assert all("GroupName" not in (r.get("Placement") or {}) for r in model.runs + off_model.runs)


def test_a_group_still_in_use_stays_recorded_and_a_restart_cleans_it_later(
    moto: Any, model: PlacementGroupsModel, provider: AwsProvider, tmp_path: Path
) -> None:
    request = _request(2, "g4dn.12xlarge")
    ids = [i.id for i in provider.launch(request)]
    name = group_name(OWNER, request.request_id)
    provider.placement.clean("us-east-1", in_use=set())  # EC2 says InUse: kept for later
    assert name in model.groups and provider.placement.recorded("us-east-1") == [name]
    provider.close()

    restarted = _provider(tmp_path / "aws")  # the record outlives the process
    restarted_model = PlacementGroupsModel(restarted, moto)
    restarted_model.groups, restarted_model.members = model.groups, model.members
    try:
        restarted.terminate(ids)
        restarted.poll_events()
        assert restarted_model.groups == {} and restarted.placement.recorded("us-east-1") == []
    finally:
        restarted.close()


def test_efa_types_get_an_efa_interface_carrying_the_security_group(
    provider: AwsProvider, model: PlacementGroupsModel, moto: Any
) -> None:
    networks = provider.networks
    p4d, p5 = networks.get("us-east-1", "p4d.24xlarge"), networks.get("us-east-1", "p5.48xlarge")
    assert (p4d.efa, p4d.max_efa_interfaces, p4d.network_cards) == (True, 4, 4)  # moto's model
    assert (p5.efa, p5.max_efa_interfaces, p5.network_cards) == (True, 32, 32)
    assert not networks.get("us-east-1", "g4dn.xlarge").efa
    assert not networks.get("us-east-1", "zz9.huge").efa  # a type EC2 does not know: none

    efa = provider.launch(_request(2, "p4d.24xlarge"))
    plain = provider.launch(_request(1, "g4dn.xlarge"))
    efa_run, plain_run = model.runs
    (group_id,) = plain_run["SecurityGroupIds"]
    assert "SecurityGroupIds" not in efa_run and "NetworkInterfaces" not in plain_run
    assert efa_run["NetworkInterfaces"] == [{
        "DeviceIndex": 0, "NetworkCardIndex": 0, "InterfaceType": "efa", "Groups": [group_id],
        "DeleteOnTermination": True, "AssociatePublicIpAddress": True,
    }]  # fmt: skip
    assert "GroupName" in efa_run["Placement"]  # multi-node EFA: placement group too
    for described in _described(moto, [i.id for i in efa + plain]):  # moto attached the group
        (eni,) = described["NetworkInterfaces"]
        assert [g["GroupId"] for g in eni["Groups"]] == [group_id]


def test_a_group_made_without_the_node_to_node_rule_gets_it_on_the_next_launch(
    provider: AwsProvider, moto: Any
) -> None:
    old = moto.create_security_group(GroupName=f"gpulease-{OWNER}", Description="older gpulease")
    ssh = {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
           "IpRanges": [{"CidrIp": "127.0.0.1/32"}]}  # fmt: skip
    moto.authorize_security_group_ingress(GroupId=old["GroupId"], IpPermissions=[ssh])
    moto.create_key_pair(KeyName=f"gpulease-{OWNER}")
    (provider.root / f"us-east-1-{OWNER}.pem").parent.mkdir(parents=True, exist_ok=True)
    (provider.root / f"us-east-1-{OWNER}.pem").write_text("a key made earlier")
    provider.launch(_request(1, "t3.micro"))
    provider.launch(_request(1, "t3.micro"))  # a second launch adds nothing
    perms = moto.describe_security_groups(GroupIds=[old["GroupId"]])["SecurityGroups"][0]
    by_protocol = {p["IpProtocol"]: p for p in perms["IpPermissions"]}
    assert [g["GroupId"] for g in by_protocol["-1"]["UserIdGroupPairs"]] == [old["GroupId"]]
    assert [r["CidrIp"] for r in by_protocol["tcp"]["IpRanges"]] == ["127.0.0.1/32"]


def test_the_address_map_gives_the_ssh_address_and_the_private_ip(
    moto: Any, tmp_path: Path
) -> None:
    addresses = tmp_path / "addresses.json"
    provider = _provider(tmp_path / "aws", address_map=addresses, ssh_user="root")
    try:
        (inst,) = provider.launch(_request(1, "t3.micro"))
        assert inst.private_ip == _described(moto, [inst.id])[0]["PrivateIpAddress"]  # no file
        addresses.write_text(json.dumps({inst.id: "10.232.9.7"}))
        (listed,) = provider.list_instances({"gpulease-owner": OWNER})
        assert listed.private_ip == "10.232.9.7"
        target = provider.ssh_target(inst.id)
        assert (target.host, target.user, target.alias) == ("10.232.9.7", "root", inst.id)
        assert target.key == tmp_path / "aws" / f"us-east-1-{OWNER}.pem"
        addresses.write_text("[1, 2]")
        with pytest.raises(ProviderError, match=r"providers\.aws\.address_map"):
            provider.list_instances({"gpulease-owner": OWNER})
    finally:
        provider.close()


def test_placement_group_names_are_deterministic_per_owner_and_request(tmp_path: Path) -> None:
    assert group_name("a", "r1") == group_name("a", "r1") != group_name("a", "r2")
    assert group_name("a", "r1") != group_name("b", "r1")
    assert group_name("a", "r1").startswith("gpulease-a-")
    groups = PlacementGroups.__new__(PlacementGroups)  # the record file alone
    groups.path = tmp_path / "none.json"
    assert groups._load() == []
