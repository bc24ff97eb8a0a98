"""How the nodes of one multi-node launch sit and talk: a cluster placement group per launch,
and an EFA network interface on instance types that have one.

**Placement groups.** A launch of ``num_nodes > 1`` instances of a type that cluster placement
supports (not the burstable ``t*`` types, not ``mac*``) runs in its own cluster placement group
``gpulease-<owner>-<sha256(request id)[:12]>`` (deterministic: a repeated launch finds the same
one), tagged ``gpulease-owner``. The group's name is recorded in
``<home>/aws/placement-groups.json`` *before* CreatePlacementGroup (the intent), and the
instances carry it as the ``gpulease-placement-group`` tag. Creation is idempotent and race-safe
(``InvalidPlacementGroup.Duplicate``: another call made it). A recorded group that no live
instance of its owner uses, and that no launch of this process is filling right now, is deleted
on a later poll (``InvalidPlacementGroup.InUse``: retried next poll; ``.Unknown``: already gone);
the record goes with it, so a restarted server still cleans up what an earlier one made.

**EFA.** DescribeInstanceTypes' ``NetworkInfo.EfaSupported`` (cached per region and type; a type
EC2 does not know has none) decides whether the primary interface is ``InterfaceType: efa``.
With a ``NetworkInterfaces`` spec, the security group (and a configured subnet) move into the
interface, and the interface asks for a public IPv4 address (the SSH tunnel needs one). Only the
primary interface, on network card 0, is EFA: one interface per network card (4 on p4d, 32 on
p5) would give the full EFA bandwidth, but EC2 assigns no public address to an instance with
several interfaces (docs/aws.md).

Moves no states.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulease.atomic import write_json_atomic
from gpulease.providers.aws.clients import Ec2Clients
from gpulease.providers.aws.errors import ExpectedError
from gpulease.providers.base import TAG_OWNER

TAG_PLACEMENT = "gpulease-placement-group"
_NO_CLUSTER_PLACEMENT = re.compile(r"^(t\d|mac)")  # burstable and Mac types are not supported


def group_name(owner: str, request_id: str) -> str:
    return f"gpulease-{owner}-{hashlib.sha256(request_id.encode()).hexdigest()[:12]}"


def wants_group(num_nodes: int, instance_type: str) -> bool:
    """True when a launch should get a cluster placement group."""
    return num_nodes > 1 and not _NO_CLUSTER_PLACEMENT.match(instance_type)


@dataclass(frozen=True, slots=True)
class _Recorded:
    region: str
    owner: str
    name: str


class PlacementGroups:
    """The cluster placement groups this server made, persisted until deleted."""

    def __init__(self, ec2: Ec2Clients, path: Path) -> None:
        self.ec2 = ec2
        self.path = path
        self._lock = threading.Lock()
        self._filling: set[str] = set()  # groups a launch of this process is filling now
        self._groups = set(self._load())

    def _load(self) -> list[_Recorded]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return [_Recorded(str(g["region"]), str(g["owner"]), str(g["name"]))
                for g in data if isinstance(g, dict)] if isinstance(data, list) else []  # fmt: skip

    def _save(self) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        rows = [{"region": g.region, "owner": g.owner, "name": g.name}
                for g in sorted(self._groups, key=lambda g: (g.region, g.name))]  # fmt: skip
        write_json_atomic(self.path, rows)

    def ensure(self, region: str, owner: str, request_id: str) -> str:
        """The launch's group, recorded then created (an existing one is fine); the caller
        calls :meth:`filled` once RunInstances returned."""
        name = group_name(owner, request_id)
        with self._lock:
            self._filling.add(name)
            recorded = _Recorded(region, owner, name)
            if recorded not in self._groups:
                self._groups.add(recorded)
                self._save()
        tags = [{"ResourceType": "placement-group", "Tags": [{"Key": TAG_OWNER, "Value": owner}]}]
        with contextlib.suppress(ExpectedError):  # Duplicate: made by an earlier try or call
            self.ec2.run(
                region, "create_placement_group", GroupName=name, Strategy="cluster",
                TagSpecifications=tags, expected=frozenset({"InvalidPlacementGroup.Duplicate"}),
            )  # fmt: skip
        return name

    def filled(self, name: str) -> None:
        with self._lock:
            self._filling.discard(name)

    def recorded(self, region: str) -> list[str]:
        with self._lock:
            return sorted(g.name for g in self._groups if g.region == region)

    def clean(self, region: str, in_use: set[str]) -> None:
        """Delete this region's recorded groups that no live instance uses (``in_use``) and no
        launch is filling; one still in use stays recorded for the next poll."""
        with self._lock:
            idle = [g for g in self._groups if g.region == region
                    and g.name not in in_use and g.name not in self._filling]  # fmt: skip
        for group in idle:
            try:
                self.ec2.run(
                    region, "delete_placement_group", GroupName=group.name,
                    expected=frozenset({"InvalidPlacementGroup.InUse",
                                        "InvalidPlacementGroup.Unknown"}),
                )  # fmt: skip
            except ExpectedError as exc:
                if exc.code == "InvalidPlacementGroup.InUse":
                    continue
            with self._lock:
                self._groups.discard(group)
                self._save()


@dataclass(frozen=True, slots=True)
class Network:
    """What DescribeInstanceTypes says about an instance type's networking."""

    efa: bool
    max_efa_interfaces: int
    network_cards: int


class InstanceNetworks:
    """:class:`Network` per (region, instance type), asked once."""

    def __init__(self, ec2: Ec2Clients) -> None:
        self.ec2 = ec2
        self._cache: dict[tuple[str, str], Network] = {}
        self._lock = threading.Lock()

    def get(self, region: str, instance_type: str) -> Network:
        with self._lock:
            found = self._cache.get((region, instance_type))
        if found is not None:
            return found
        try:
            types = self.ec2.run(
                region, "describe_instance_types", InstanceTypes=[instance_type],
                expected=frozenset({"InvalidInstanceType"}),
            )["InstanceTypes"]  # fmt: skip
        except ExpectedError:  # a type EC2 does not know: RunInstances will say so
            types = []
        info: dict[str, Any] = (types[0].get("NetworkInfo") or {}) if types else {}
        found = Network(
            efa=bool(info.get("EfaSupported")),
            max_efa_interfaces=int((info.get("EfaInfo") or {}).get("MaximumEfaInterfaces") or 0),
            network_cards=int(info.get("MaximumNetworkCards") or 1),
        )
        with self._lock:
            self._cache[(region, instance_type)] = found
        return found


def efa_interfaces(group_id: str, subnet: str | None) -> list[dict[str, Any]]:
    """The ``NetworkInterfaces`` spec of an EFA launch: the primary interface, EFA, in the
    owner's security group (and the configured subnet), with a public IPv4 address."""
    interface: dict[str, Any] = {
        "DeviceIndex": 0, "NetworkCardIndex": 0, "InterfaceType": "efa", "Groups": [group_id],
        "DeleteOnTermination": True, "AssociatePublicIpAddress": True,
    }  # fmt: skip
    if subnet:
        interface["SubnetId"] = subnet
    return [interface]
