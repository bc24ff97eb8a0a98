"""Which AMI a launch uses: an explicit id (request ``provider_config.aws.ami``, then config
``providers.aws.ami``), else the newest Amazon-owned image matching the accelerator family's
name patterns (:data:`FAMILY_PATTERNS`, tried in order), resolved with DescribeImages and cached
per region; and an AMI's root device (name and snapshot size, for sizing the root volume:
:mod:`.volumes`), cached per region and AMI. Moves no states.
"""

from __future__ import annotations

import threading

from gpulease.providers.aws.clients import Ec2Clients
from gpulease.providers.aws.volumes import RootDevice
from gpulease.providers.base import LaunchRequest, ProviderError

#: Accelerator family → DescribeImages name patterns (owner amazon), best first.
FAMILY_PATTERNS: dict[str, tuple[str, ...]] = {
    "nvidia": (
        "Deep Learning Base OSS Nvidia Driver GPU AMI (Amazon Linux 2023)*",
        "Deep Learning Base AMI (Amazon Linux 2)*",
        "Deep Learning AMI*",
    ),
    "neuron": ("Deep Learning AMI Neuron (Amazon Linux 2023)*", "Deep Learning AMI Neuron*"),
    "cpu": ("al2023-ami-2023.*-x86_64", "amzn2-ami-hvm-*-x86_64-gp2"),
}
_NEURON = ("trainium", "inferentia", "trn", "inf")


def family(request: LaunchRequest) -> str:
    """``nvidia``, ``neuron`` or ``cpu`` for the request's accelerator."""
    name = (request.accelerator or "").lower()
    if not name or name == "cpu":
        return "nvidia" if request.gpus_per_node > 0 else "cpu"
    return "neuron" if name.startswith(_NEURON) else "nvidia"


class AmiResolver:
    def __init__(self, ec2: Ec2Clients) -> None:
        self.ec2 = ec2
        self._cache: dict[tuple[str, str], str] = {}
        self._roots: dict[tuple[str, str], RootDevice] = {}
        self._lock = threading.Lock()

    def root_device(self, region: str, ami: str) -> RootDevice:
        """``ami``'s root device in ``region`` (DescribeImages); an AMI that is not there is a
        :class:`ProviderError` naming it."""
        with self._lock:
            found = self._roots.get((region, ami))
        if found:
            return found
        images = self.ec2.run(region, "describe_images", ImageIds=[ami])["Images"]
        if not images:
            raise ProviderError(f"AMI {ami} is not in {region} (DescribeImages found nothing)")
        root = RootDevice.of_image(images[0])
        with self._lock:
            self._roots[(region, ami)] = root
        return root

    def resolve(self, region: str, kind: str) -> str:
        with self._lock:
            found = self._cache.get((region, kind))
        if found:
            return found
        for pattern in FAMILY_PATTERNS[kind]:
            images = self.ec2.run(
                region, "describe_images", Owners=["amazon"],
                Filters=[{"Name": "name", "Values": [pattern]},
                         {"Name": "state", "Values": ["available"]}],
            )["Images"]  # fmt: skip
            if images:
                newest = max(images, key=lambda i: str(i.get("CreationDate") or ""))
                with self._lock:
                    self._cache[(region, kind)] = str(newest["ImageId"])
                return str(newest["ImageId"])
        raise ProviderError(
            f"no {kind} AMI found in {region}; set providers.aws.ami to an AMI id (docs/aws.md)"
        )
