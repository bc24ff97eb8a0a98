"""The root EBS volume of a launch: its size from the task's ``resources.disk`` (SkyPilot's
``disk_size``) and its type, IOPS and throughput from ``resources.disk_tier``.

The tiers map as SkyPilot's AWS backend maps them (``sky/clouds/aws.py``: ``_get_disk_type`` and
``_get_disk_specs``; ``best`` is the cloud's best tier, ``ultra`` on AWS):

=========  ==========  ======  ==========================
tier       VolumeType  Iops    Throughput (MiB/s)
=========  ==========  ======  ==========================
low        standard    —       —
medium     gp3         3500    218 (= IOPS // 16)
high       gp3         7000    437
ultra      io2         20000   — (io2 has no throughput)
best       io2         20000   —
=========  ==========  ======  ==========================

The volume goes on the AMI's ``RootDeviceName`` (DescribeImages), with ``DeleteOnTermination``
(terminated nodes leave no volume behind). Its size is the asked size rounded up to whole GiB,
at least the AMI's root snapshot and at least what the tier's IOPS need (EBS allows 500 IOPS per
GiB on gp3 and io2): ``disk: 8`` on a 45 GiB image gets 45 GiB, and a tier alone keeps the
image's size. With neither ``disk`` nor a tier
the launch passes no mapping and the AMI's own root volume is used, as before. Moves no states.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["TIERS", "DiskSpec", "RootDevice", "root_volume", "tier_spec"]

MAX_IOPS_PER_GIB = 500


@dataclass(frozen=True, slots=True)
class DiskSpec:
    """What a disk tier asks of an EBS volume."""

    volume_type: str
    iops: int | None = None
    throughput: int | None = None  # MiB/s, gp3 only


def _specs(volume_type: str, iops: int | None) -> DiskSpec:
    """SkyPilot's rule: IOPS for every type but ``standard``; throughput = IOPS // 16 on gp3."""
    if volume_type == "standard":
        return DiskSpec(volume_type)
    return DiskSpec(volume_type, iops, iops // 16 if volume_type == "gp3" and iops else None)


TIERS: dict[str, DiskSpec] = {
    "low": _specs("standard", None),
    "medium": _specs("gp3", 3500),
    "high": _specs("gp3", 7000),
    "ultra": _specs("io2", 20000),
}
BEST_TIER = "ultra"


def tier_spec(tier: str) -> DiskSpec:
    """The EBS settings of ``tier`` (``best`` is ``ultra``)."""
    return TIERS[BEST_TIER if tier == "best" else tier]


@dataclass(frozen=True, slots=True)
class RootDevice:
    """An AMI's root device: its name (``/dev/xvda``) and its snapshot's size in GiB."""

    name: str
    snapshot_gib: int | None = None

    @classmethod
    def of_image(cls, image: dict[str, Any]) -> RootDevice:
        """From a DescribeImages entry."""
        name = str(image.get("RootDeviceName") or "/dev/xvda")
        for mapping in image.get("BlockDeviceMappings") or []:
            size = (mapping.get("Ebs") or {}).get("VolumeSize")
            if mapping.get("DeviceName") == name and size is not None:
                return cls(name, int(size))
        return cls(name)


def root_volume(
    root: RootDevice, disk_gb: float | None, disk_tier: str | None
) -> list[dict[str, Any]]:
    """The ``BlockDeviceMappings`` of RunInstances for the root volume ``disk_gb`` and
    ``disk_tier`` ask for (see the module); call only when one of them is set."""
    ebs: dict[str, Any] = {"DeleteOnTermination": True}
    spec = tier_spec(disk_tier) if disk_tier else None
    floors = [root.snapshot_gib or 0]
    if spec is not None and spec.iops:
        floors.append(math.ceil(spec.iops / MAX_IOPS_PER_GIB))
    size = max(math.ceil(disk_gb) if disk_gb else 0, *floors)
    if size:  # else the AMI's own size (its snapshot's is not known)
        ebs["VolumeSize"] = size
    if spec is not None:
        ebs["VolumeType"] = spec.volume_type
        if spec.iops:
            ebs["Iops"] = spec.iops
        if spec.throughput:
            ebs["Throughput"] = spec.throughput
    return [{"DeviceName": root.name, "Ebs": ebs}]
