"""Per-owner, per-region access resources: the key pair and the security group named
``gpulease-<owner>`` (tagged ``gpulease-owner``), created on demand and deleted when no
instance of that owner uses them.

Creation is idempotent and race-safe (``InvalidKeyPair.Duplicate`` / ``InvalidGroup.Duplicate``
mean another call made it first). The security group admits TCP 22 from ``ssh_cidr`` and all
traffic from members of the group itself (node to node: rendezvous, NCCL/gloo, EFA); a group
missing one of these rules (made by an older gpulease, or by a call that died before
authorizing) gets it on the next launch. The private key is written 0600 to
``<home>/aws/<region>-<owner>.pem`` and never logged. Moves no states.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulease.atomic import write_atomic
from gpulease.providers.aws.clients import Ec2Clients
from gpulease.providers.aws.errors import ExpectedError
from gpulease.providers.base import TAG_OWNER, ProviderError


@dataclass(frozen=True, slots=True)
class Access:
    key_name: str
    group_id: str


def resource_name(owner: str) -> str:
    return f"gpulease-{owner}"


def key_path(root: Path, region: str, owner: str) -> Path:
    return root / f"{region}-{owner}.pem"


def _write_private(path: Path, material: str) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomic(path, material, mode=0o600)  # AWS hands key material out once: never torn


def _tags(kind: str, owner: str) -> list[dict[str, Any]]:
    return [{"ResourceType": kind, "Tags": [{"Key": TAG_OWNER, "Value": owner}]}]


def ensure_key_pair(ec2: Ec2Clients, root: Path, region: str, owner: str) -> str:
    name = resource_name(owner)
    try:
        made = ec2.run(
            region, "create_key_pair", KeyName=name, TagSpecifications=_tags("key-pair", owner),
            expected=frozenset({"InvalidKeyPair.Duplicate"}),
        )  # fmt: skip
    except ExpectedError:  # the duplicate: another call made it first
        if not key_path(root, region, owner).exists():
            raise ProviderError(
                f"key pair {name} exists in {region} but its private key is not in {root}; "
                "delete the key pair in EC2 to let gpulease make a new one"
            ) from None
        return name
    _write_private(key_path(root, region, owner), str(made["KeyMaterial"]))
    return name


def _describe_group(ec2: Ec2Clients, region: str, owner: str) -> dict[str, Any] | None:
    groups = ec2.run(
        region, "describe_security_groups",
        Filters=[{"Name": "group-name", "Values": [resource_name(owner)]}],
    )["SecurityGroups"]  # fmt: skip
    return dict(groups[0]) if groups else None


def find_group(ec2: Ec2Clients, region: str, owner: str) -> str | None:
    group = _describe_group(ec2, region, owner)
    return str(group["GroupId"]) if group else None


def ingress_rules(group_id: str, ssh_cidr: str) -> list[dict[str, Any]]:
    """SSH from the server, and everything from the group's own members (node to node)."""
    return [
        {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
         "IpRanges": [{"CidrIp": ssh_cidr, "Description": "gpulease server"}]},
        {"IpProtocol": "-1",
         "UserIdGroupPairs": [{"GroupId": group_id, "Description": "gpulease nodes"}]},
    ]  # fmt: skip


def _has(existing: list[dict[str, Any]], rule: dict[str, Any]) -> bool:
    for perm in existing:
        if str(perm.get("IpProtocol")) != rule["IpProtocol"]:
            continue
        if perm.get("FromPort") != rule.get("FromPort") or perm.get("ToPort") != rule.get("ToPort"):
            continue
        cidrs = {r.get("CidrIp") for r in perm.get("IpRanges") or []}
        groups = {p.get("GroupId") for p in perm.get("UserIdGroupPairs") or []}
        wanted_cidrs = {r["CidrIp"] for r in rule.get("IpRanges", [])}
        wanted_groups = {p["GroupId"] for p in rule.get("UserIdGroupPairs", [])}
        if wanted_cidrs <= cidrs and wanted_groups <= groups:
            return True
    return False


def _authorize_missing(
    ec2: Ec2Clients, region: str, group_id: str, ssh_cidr: str, existing: list[dict[str, Any]]
) -> None:
    missing = [r for r in ingress_rules(group_id, ssh_cidr) if not _has(existing, r)]
    if not missing:
        return
    with contextlib.suppress(ExpectedError):  # Duplicate: a concurrent call authorized them
        ec2.run(
            region, "authorize_security_group_ingress", GroupId=group_id, IpPermissions=missing,
            expected=frozenset({"InvalidPermission.Duplicate"}),
        )  # fmt: skip


def ensure_group(ec2: Ec2Clients, region: str, owner: str, ssh_cidr: str) -> str:
    name = resource_name(owner)
    try:
        group_id = str(ec2.run(
            region, "create_security_group", GroupName=name,
            Description=f"gpulease nodes of {owner}: SSH from the server, all from each other",
            TagSpecifications=_tags("security-group", owner),
            expected=frozenset({"InvalidGroup.Duplicate"}),
        )["GroupId"])  # fmt: skip
        existing: list[dict[str, Any]] = []
    except ExpectedError:  # the duplicate: another call made it first
        found = _describe_group(ec2, region, owner)
        if found is None:
            raise ProviderError(f"security group {name} in {region} vanished") from None
        group_id, existing = str(found["GroupId"]), list(found.get("IpPermissions") or [])
    _authorize_missing(ec2, region, group_id, ssh_cidr, existing)
    return group_id


def ensure_access(ec2: Ec2Clients, root: Path, region: str, owner: str, ssh_cidr: str) -> Access:
    return Access(
        ensure_key_pair(ec2, root, region, owner), ensure_group(ec2, region, owner, ssh_cidr)
    )


def delete_access(ec2: Ec2Clients, root: Path, region: str, owner: str) -> bool:
    """Delete the owner's group and key pair in ``region``; False when still in use."""
    group_id = find_group(ec2, region, owner)
    if group_id is not None:
        try:
            ec2.run(
                region, "delete_security_group", GroupId=group_id,
                expected=frozenset({"DependencyViolation", "InvalidGroup.NotFound"}),
            )  # fmt: skip
        except ExpectedError as exc:
            if exc.code == "DependencyViolation":  # an instance still uses it
                return False
    ec2.run(region, "delete_key_pair", KeyName=resource_name(owner))
    key_path(root, region, owner).unlink(missing_ok=True)
    return True
