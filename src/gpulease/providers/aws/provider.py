"""The ``aws`` provider: EC2 instances, launched, listed, stopped and terminated by tags.

- ``launch``: idempotent by request id — the instances tagged ``gpulease-request`` are looked
  up first (moto ignores ``ClientToken``; real EC2 honours the one we also pass), else one
  RunInstances (``MinCount = MaxCount = num_nodes``, spot one-time when asked, the request's
  zone, every request tag on instances and volumes; the root volume sized and typed from the
  request's ``disk_gb`` / ``disk_tier``: :mod:`.volumes`), then ``gpulease-node-rank`` per instance
  by ``AmiLaunchIndex``. The owner's key pair and security group are made on demand; a
  multi-node launch gets a cluster placement group, an EFA type an EFA interface
  (:mod:`.placement`).
- ``list_instances``/agent URLs: a running instance's SSH address is the address map's entry,
  else its public address; the server bootstraps gpulease on it in the background
  (:mod:`.bootstrap`) and the agent URL appears once that is done and the agent answers
  through the SSH tunnel (:mod:`.tunnel`).
- ``terminate``: TerminateInstances per region for the ids that exist; never confirms.
- ``list_instances``: DescribeInstances with tag filters in every region used or configured.
- ``spot_price_changes`` (:class:`SupportsPriceHistory`, for the cost ledger): EC2 spot price
  history of the row's region, zone and type, read at most every 5 minutes per key
  (:mod:`.spot_history`) through :meth:`AwsProvider.spot_price_history`, the one API call (the
  server counts it as the ``spot_price_history`` operation); a zone-less cluster bills its quote.
- ``poll_events``: derived by polling (:mod:`.events`); placement groups no live instance uses
  are deleted; after ``terminate``, the owner's key pair and group in that region are deleted
  once no instance of the owner is left there.

Moves no states of its own: EC2 holds them; this maps them (:mod:`.mapping`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from gpulease.clock import Clock, SystemClock
from gpulease.errors import GpuleaseError, UserInputError
from gpulease.providers.aws.access import Access, delete_access, ensure_access, key_path
from gpulease.providers.aws.ami import AmiResolver, family
from gpulease.providers.aws.bootstrap import Bootstraps
from gpulease.providers.aws.clients import Ec2Clients, RegionSet
from gpulease.providers.aws.errors import call
from gpulease.providers.aws.events import EventTracker
from gpulease.providers.aws.mapping import ec2_state, read_address_map, tags_of, to_instance
from gpulease.providers.aws.placement import (
    TAG_PLACEMENT,
    InstanceNetworks,
    PlacementGroups,
    efa_interfaces,
    wants_group,
)
from gpulease.providers.aws.settings import AwsSettings, ami_in, request_ami
from gpulease.providers.aws.spot_history import PRODUCT, Key, SpotHistory, changes_in
from gpulease.providers.aws.tunnel import Tunnels, reap_leftovers
from gpulease.providers.aws.userdata import request_token, token_key, user_data
from gpulease.providers.aws.volumes import root_volume
from gpulease.providers.base import (
    TAG_NODE_RANK,
    TAG_OWNER,
    TAG_REQUEST,
    Instance,
    InstanceState,
    LaunchRequest,
    Provider,
    ProviderError,
    ProviderEvent,
    SupportsMultiNode,
    SupportsNodeToken,
    SupportsPriceHistory,
    SupportsSpot,
    SupportsSsh,
    SupportsStopStart,
)
from gpulease.providers.ssh import SshTarget
from gpulease.providers.wheel import own_wheel

_LIVE = ["pending", "running", "stopping", "stopped", "shutting-down"]
_ZONE_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*-az\d+$")  # an availability-zone id
_SPOT = {"MarketType": "spot",
         "SpotOptions": {"SpotInstanceType": "one-time",
                         "InstanceInterruptionBehavior": "terminate"}}  # fmt: skip


def _tag_filters(tags: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"Name": f"tag:{k}", "Values": [v]} for k, v in sorted(tags.items())]


def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]


def _client_token(request_id: str) -> str:
    return hashlib.sha256(request_id.encode()).hexdigest()[:64]


class AwsProvider(
    Provider, SupportsSpot, SupportsMultiNode, SupportsStopStart, SupportsNodeToken, SupportsSsh,
    SupportsPriceHistory,
):  # fmt: skip
    name = "aws"
    billing = "second:60"  # Linux on-demand and spot: per second, one minute minimum
    volume_usd_per_gb_month = 0.08  # EBS gp3 (us-east-1 list price) while stopped
    events_every_s = 5.0  # DescribeInstances per region: the 2-minute spot notice leaves room

    def __init__(
        self, root: Path, settings: AwsSettings | None = None, *, retry_base: float = 0.5,
        attempts: int = 5, wheel_dir: Path | None = None, bootstrap_base_s: float = 0.5,
        clock: Clock | None = None,
    ) -> None:  # fmt: skip
        self.root = root
        self.settings = settings or AwsSettings()
        self.ec2 = Ec2Clients(attempts=attempts, retry_base=retry_base)
        default = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        self.default_region = (self.settings.regions or (default or "us-east-1",))[0]
        self.regions = RegionSet(root / "regions.json", self.settings.regions, self.default_region)
        self.amis = AmiResolver(self.ec2)
        self.events = EventTracker()
        self.tunnels = Tunnels(agent_port=self.settings.agent_port)
        wheels = wheel_dir or root / "wheels"
        self.bootstraps = Bootstraps(
            (lambda: own_wheel(wheels)) if self.settings.install == "server" else None,
            agent_port=self.settings.agent_port, base_s=bootstrap_base_s,
        )  # fmt: skip
        self.placement = PlacementGroups(self.ec2, root / "placement-groups.json")
        self.networks = InstanceNetworks(self.ec2)
        self._requests: dict[str, str] = {}  # instance id -> request id (for node tokens)
        self._cleanup: set[tuple[str, str]] = set()  # (region, owner) to clean once unused
        self._lock = threading.Lock()
        self.clock: Clock = clock or SystemClock()  # the spot history's fetch and learned times
        self._zone_names: dict[tuple[str, str], str] = {}
        self.spot_history = SpotHistory(lambda key, since: self.spot_price_history(*key, since))

    @classmethod
    def from_config(cls, config: Mapping[str, Any], root: Path) -> AwsProvider:
        """From the ``providers.aws`` config section (see :class:`AwsSettings`)."""
        settings = AwsSettings.from_mapping(config)
        if importlib.util.find_spec("boto3") is None:
            raise UserInputError(
                "providers.aws: the aws provider needs boto3: pip install 'gpulease[aws]'"
            )
        from gpulease.config import home

        return cls(root, settings, wheel_dir=home() / "wheels")

    # ---- the Provider contract ---------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> list[Instance]:
        region = request.region or self.default_region
        self.regions.add(region)
        existing = self.ec2.instances(region, _tag_filters({TAG_REQUEST: request.request_id}))
        if not existing:
            existing = self._run(region, request)
        addresses = read_address_map(self.settings.address_map)
        instances = sorted((self._instance(region, d, addresses) for d in existing),
                           key=lambda i: i.node_rank)  # fmt: skip
        for inst in instances:
            self.events.seen(inst.id, "pending")
        return instances

    def _run(self, region: str, request: LaunchRequest) -> list[dict[str, Any]]:
        access = ensure_access(self.ec2, self.root, region, request.owner, self.settings.ssh_cidr)
        token = request_token(token_key(self.root), request.request_id)
        instance_type = request.instance_type or self.settings.instance_type
        extra = {}
        group = None
        if self.settings.placement_group and wants_group(request.num_nodes, instance_type):
            group = self.placement.ensure(region, request.owner, request.request_id)
            extra[TAG_PLACEMENT] = group
        tags = _tag_list({**request.all_tags(), **extra})
        ami = self._ami(region, request)
        params: dict[str, Any] = {
            "ImageId": ami,
            "InstanceType": instance_type,
            "MinCount": request.num_nodes, "MaxCount": request.num_nodes,
            "ClientToken": _client_token(request.request_id),
            "KeyName": access.key_name,
            "UserData": user_data(token, self.settings.agent_port, install=self.settings.install,
                                  python=self.settings.python, engine=request.image is not None,
                                  gpus=request.gpus_per_node > 0),
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags},
                                  {"ResourceType": "volume", "Tags": tags}],
            **self._placement(region, request, group, instance_type, access),
        }  # fmt: skip
        if request.disk_gb is not None or request.disk_tier:
            root = self.amis.root_device(region, ami)
            params["BlockDeviceMappings"] = root_volume(root, request.disk_gb, request.disk_tier)
        if request.spot:
            params["InstanceMarketOptions"] = _SPOT
        if self.settings.instance_profile:
            params["IamInstanceProfile"] = {"Name": self.settings.instance_profile}
        try:
            made = self.ec2.run(region, "run_instances", zone=request.zone, **params)["Instances"]
        finally:
            if group:
                self.placement.filled(group)
        for data in made:
            rank = str(int(data.get("AmiLaunchIndex") or 0))
            self.ec2.run(region, "create_tags", Resources=[data["InstanceId"]],
                         Tags=[{"Key": TAG_NODE_RANK, "Value": rank}])  # fmt: skip
            data["Tags"] = [*tags, {"Key": TAG_NODE_RANK, "Value": rank}]
        return list(made)

    def _placement(
        self, region: str, request: LaunchRequest, group: str | None, instance_type: str,
        access: Access,
    ) -> dict[str, Any]:  # fmt: skip
        """Placement, subnet, security group and network interfaces of a RunInstances call."""
        placement: dict[str, Any] = {"GroupName": group} if group else {}
        subnet = None
        if request.zone:
            zone = self._zone_name(region, request.zone)
            placement["AvailabilityZone"] = zone
            subnet = self.settings.subnets.get(zone) or self.settings.subnets.get(request.zone)
        params: dict[str, Any] = {"Placement": placement} if placement else {}
        if self.networks.get(region, instance_type).efa:  # the group and subnet go in the ENI
            params["NetworkInterfaces"] = efa_interfaces(access.group_id, subnet)
            return params
        params["SecurityGroupIds"] = [access.group_id]
        if subnet:
            params["SubnetId"] = subnet
        return params

    def _zone_name(self, region: str, zone: str) -> str:
        """The zone's name (``us-east-1a``) for Placement: catalogs name zones by their id
        (``use1-az1``), which is the same physical zone in every account; names are not."""
        if not _ZONE_ID.match(zone):
            return zone
        found = self.ec2.run(region, "describe_availability_zones",
                             Filters=[{"Name": "zone-id", "Values": [zone]}])  # fmt: skip
        names = [z["ZoneName"] for z in found.get("AvailabilityZones", []) if z.get("ZoneName")]
        return names[0] if names else zone

    def _ami(self, region: str, request: LaunchRequest) -> str:
        explicit = request_ami(request.provider_config, region) or ami_in(
            self.settings.ami, region, "providers.aws.ami"
        )
        return explicit or self.amis.resolve(region, family(request))

    def terminate(self, instance_ids: list[str]) -> None:
        for region, found in self._locate(instance_ids).items():
            ids = [str(d["InstanceId"]) for d in found if ec2_state(d) != "terminated"]
            if ids:
                self.ec2.run(region, "terminate_instances", InstanceIds=ids)
            with self._lock:
                self._cleanup |= {(region, tags_of(d)[TAG_OWNER]) for d in found
                                  if TAG_OWNER in tags_of(d)}  # fmt: skip
            for iid in ids:
                self.tunnels.drop(iid)
                self.bootstraps.forget(iid)

    def _locate(self, instance_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        """Region → descriptions of the given ids that exist there (missing ids: ignored)."""
        wanted = [i for i in dict.fromkeys(instance_ids) if i.startswith("i-")]
        found: dict[str, list[dict[str, Any]]] = {}
        if not wanted:
            return found
        for region in self.regions.all():
            hits = self.ec2.instances(region, [{"Name": "instance-id", "Values": wanted}])
            if hits:
                found[region] = hits
        return found

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        filters = _tag_filters(tags) or [{"Name": "tag-key", "Values": [TAG_OWNER]}]
        listed: list[Instance] = []
        addresses = read_address_map(self.settings.address_map)
        for region in self.regions.all():
            listed += [self._instance(region, d, addresses)
                       for d in self.ec2.instances(region, filters)]  # fmt: skip
        return listed

    def _instance(self, region: str, data: Mapping[str, Any],
                  addresses: Mapping[str, str] | None = None) -> Instance:  # fmt: skip
        iid = str(data["InstanceId"])
        request = tags_of(data).get(TAG_REQUEST)
        if request:
            with self._lock:
                self._requests[iid] = request
        if addresses is None:
            addresses = read_address_map(self.settings.address_map)
        address = addresses.get(iid)
        agent_url = self._agent_url(self._target(region, data, address), data)
        return to_instance(data, region, agent_url=agent_url, address=address)

    def _target(
        self, region: str, data: Mapping[str, Any], address: str | None
    ) -> SshTarget | None:
        host = address or data.get("PublicIpAddress") or data.get("PublicDnsName")
        if self.settings.address_map is not None:  # the map says where instances are, alone
            host = address
        owner = tags_of(data).get(TAG_OWNER)
        if not (host and owner):
            return None
        return SshTarget(str(host), self.settings.ssh_user, key_path(self.root, region, owner),
                         self.root / "known_hosts", alias=str(data["InstanceId"]))  # fmt: skip

    def _agent_url(self, target: SshTarget | None, data: Mapping[str, Any]) -> str | None:
        iid = str(data["InstanceId"])
        if ec2_state(data) != "running":  # stopped and started: bootstrap (start) again
            self.bootstraps.forget(iid)
            self.tunnels.drop(iid)
            return None
        if not (self.settings.tunnels and target):
            return None
        if not self.bootstraps.ready(iid, target):
            return None
        return self.tunnels.agent_url(iid, target)

    def release_leftovers(self) -> int:
        return reap_leftovers(self.root / "known_hosts")

    def poll_events(self) -> list[ProviderEvent]:
        now = time.time()
        events: list[ProviderEvent] = []
        for region in self.regions.all():
            try:
                described = self.ec2.instances(region, [{"Name": "tag-key", "Values": [TAG_OWNER]}])
                requests = self.ec2.run(region, "describe_spot_instance_requests")
            except GpuleaseError:  # events are data: an unanswered poll is asked again next time
                continue
            events += self.events.changes(((region, d) for d in described), now)
            spot = requests.get("SpotInstanceRequests", [])
            events += self.events.notices(((region, r) for r in spot), now)
            self._clean_unused(region, described)
        return events

    def _clean_unused(self, region: str, described: list[dict[str, Any]]) -> None:
        if self.placement.recorded(region):
            in_use = {tags_of(d).get(TAG_PLACEMENT, "") for d in described
                      if ec2_state(d) in _LIVE}  # fmt: skip
            self.placement.clean(region, in_use)
        with self._lock:
            owners = [o for r, o in self._cleanup if r == region]
        for owner in owners:
            live = [d for d in described
                    if tags_of(d).get(TAG_OWNER) == owner and ec2_state(d) in _LIVE]  # fmt: skip
            if not live and self.cleanup(region, owner):
                with self._lock:
                    self._cleanup.discard((region, owner))

    def cleanup(self, region: str, owner: str) -> bool:
        """Delete ``owner``'s key pair and group in ``region`` unless an instance still uses
        them; True when they are gone."""
        state = {"Name": "instance-state-name", "Values": _LIVE}
        live = self.ec2.instances(region, [*_tag_filters({TAG_OWNER: owner}), state])
        return not live and delete_access(self.ec2, self.root, region, owner)

    # ---- capabilities ------------------------------------------------------------------------

    def stop(self, instance_ids: list[str]) -> None:
        for region, found in self._locate(instance_ids).items():
            spot = [str(d["InstanceId"]) for d in found if d.get("InstanceLifecycle") == "spot"]
            if spot:
                raise ProviderError(
                    f"cannot stop spot instances {', '.join(spot)}: one-time spot instances "
                    "can only be terminated"
                )
            self.ec2.run(region, "stop_instances", InstanceIds=[d["InstanceId"] for d in found])

    def start(self, instance_ids: list[str]) -> None:
        for region, found in self._locate(instance_ids).items():
            self.ec2.run(region, "start_instances", InstanceIds=[d["InstanceId"] for d in found])

    def node_token(self, instance_id: str) -> SecretStr:
        with self._lock:
            request = self._requests.get(instance_id)
        if request is None:
            for found in self._locate([instance_id]).values():
                request = tags_of(found[0]).get(TAG_REQUEST)
        if not request:
            raise ProviderError(f"no gpulease instance {instance_id} in {self.regions.all()}")
        return request_token(token_key(self.root), request)

    def ssh_target(self, instance_id: str) -> SshTarget:
        addresses = read_address_map(self.settings.address_map)
        for region, found in self._locate([instance_id]).items():
            target = self._target(region, found[0], addresses.get(instance_id))
            if target is not None and ec2_state(found[0]) == "running":
                return target
        raise ProviderError(f"{instance_id} is not a running gpulease instance with an address")

    def spot_price_changes(
        self, region: str | None, zone: str | None, instance_type: str | None, quoted: float,
        *, after: float, until: float,
    ) -> list[tuple[float, float]]:  # fmt: skip
        """Changes of the EC2 spot price of ``instance_type`` in ``zone`` in ``(after, until]``
        (:func:`.spot_history.changes_in`); none without a zone or a type."""
        if not (zone and instance_type):
            return []
        region = region or self.default_region
        name = self._zone_names.get((region, zone))
        if name is None:  # a zone id (use1-az1) is looked up once
            name = self._zone_names[(region, zone)] = self._zone_name(region, zone)
        key: Key = (region, name, instance_type)
        points = self.spot_history.points(key, self.clock.now())
        return changes_in(points, after=after, until=until)

    def spot_price_history(
        self, region: str, zone: str, instance_type: str, since: float
    ) -> list[dict[str, Any]]:
        """One DescribeSpotPriceHistory (all pages) of Linux/UNIX ``instance_type`` in zone
        ``zone`` from ``since`` (epoch seconds)."""
        found: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            extra: dict[str, Any] = {"NextToken": token} if token else {}
            params: dict[str, Any] = {
                "InstanceTypes": [instance_type], "ProductDescriptions": [PRODUCT],
                "Filters": [{"Name": "availability-zone", "Values": [zone]}],
                "StartTime": since, **extra,
            }  # fmt: skip
            method = self.ec2.client(region).describe_spot_price_history
            # one try: the history's own backoff (across passes) retries, never a sleep in a pass
            page = call(functools.partial(method, **params), action="describe_spot_price_history",
                        region=region, zone=zone, attempts=1)  # fmt: skip
            found += page.get("SpotPriceHistory", [])
            token = page.get("NextToken")
            if not token:
                return found

    def close(self) -> None:
        self.bootstraps.close()
        self.tunnels.close()


__all__ = ["AwsProvider", "InstanceState"]
