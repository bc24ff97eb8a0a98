"""The ``providers.aws`` config section, validated (:class:`AwsSettings`).

Every field is optional; a wrong one raises :class:`~gpulease.errors.UserInputError` naming it
(``providers.aws.<field>: …``). See ``docs/aws.md`` for what each setting does. Moves no states.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from gpulease.errors import UserInputError
from gpulease.providers.base import ProviderError
from gpulease.providers.fields import optional_text, text

WHERE = "providers.aws"
_text = partial(text, WHERE)
_optional_text = partial(optional_text, WHERE)
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
_KNOWN = {
    "regions", "ami", "ssh_cidr", "ssh_user", "instance_profile", "subnets", "instance_type",
    "agent_port", "tunnels", "install", "python", "address_map", "placement_group",
}  # fmt: skip
INSTALL_MODES = ("server", "pypi")


@dataclass(frozen=True, slots=True)
class AwsSettings:
    """``regions``: regions always listed (besides those launched in); ``ami``: an AMI id used
    for every launch, or a mapping region → AMI id (a launch in a region it lacks is refused);
    ``ssh_cidr``: the only source allowed to reach port 22; ``subnets``: zone → subnet id;
    ``instance_type``: used when a request names none; ``agent_port``: the port the agent binds
    on 127.0.0.1 of each VM; ``tunnels``: open SSH tunnels to agents; ``install``: ``server``
    (the server copies its own gpulease wheel over SSH) or ``pypi`` (user-data pip-installs the
    published version); ``python``: the VM's interpreter the node venv is made from;
    ``address_map``: a JSON file instance id → address, used instead of EC2's addresses
    (bastions, test harnesses); ``placement_group``: a cluster placement group per multi-node
    launch."""

    regions: tuple[str, ...] = ()
    ami: str | Mapping[str, str] | None = None
    ssh_cidr: str = "127.0.0.1/32"
    ssh_user: str = "ec2-user"
    instance_profile: str | None = None
    subnets: Mapping[str, str] = field(default_factory=dict)
    instance_type: str = "t3.micro"
    agent_port: int = 7070
    tunnels: bool = True
    install: str = "server"
    python: str = "python3"
    address_map: Path | None = None
    placement_group: bool = True

    @classmethod
    def from_mapping(cls, section: Mapping[str, Any] | None) -> AwsSettings:
        data = dict(section or {})
        unknown = sorted(set(data) - _KNOWN)
        if unknown:
            raise UserInputError(f"{WHERE}.{unknown[0]}: unknown setting (known: {sorted(_KNOWN)})")
        return cls(
            regions=_regions(data.get("regions")),
            ami=_ami(data.get("ami"), f"{WHERE}.ami"),
            ssh_cidr=_cidr(data.get("ssh_cidr", "127.0.0.1/32")),
            ssh_user=_text(data.get("ssh_user", "ec2-user"), "ssh_user"),
            instance_profile=_optional_text(data.get("instance_profile"), "instance_profile"),
            subnets=_subnets(data.get("subnets")),
            instance_type=_text(data.get("instance_type", "t3.micro"), "instance_type"),
            agent_port=_port(data.get("agent_port", 7070)),
            tunnels=_flag(data.get("tunnels", True), "tunnels"),
            install=_install(data.get("install", "server")),
            python=_text(data.get("python", "python3"), "python"),
            address_map=_path(data.get("address_map"), "address_map"),
            placement_group=_flag(data.get("placement_group", True), "placement_group"),
        )


def _ami_id(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.startswith("ami-"):
        raise UserInputError(
            f"{where}: expected an AMI id like ami-0123abcd (or a mapping region: AMI id), "
            f"got {value!r}"
        )
    return value


def _ami(value: Any, where: str) -> str | dict[str, str] | None:
    """An AMI id, or a mapping region → AMI id (SkyPilot's per-region ``image_id``)."""
    if value is None:
        return None
    if isinstance(value, Mapping) and value:
        for region, image in value.items():
            if not isinstance(region, str) or not _REGION.match(region):
                raise UserInputError(f"{where}: {region!r} is not a region like us-east-1")
            _ami_id(image, f"{where}.{region}")
        return dict(value)
    return _ami_id(value, where)


def ami_in(value: Any, region: str, where: str) -> str | None:
    """The AMI ``value`` (an id, or region → id) gives for ``region``; a mapping without the
    region is a :class:`~gpulease.providers.base.ProviderError` naming ``where`` (the launch
    there is refused; failover may take a region the mapping has). Only the entry used is
    checked."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return _ami_id(value, where)
    if region not in value:
        raise ProviderError(
            f"{where} has no AMI for {region} (it lists {', '.join(sorted(map(str, value)))}): "
            "add one or keep the task to those regions"
        )
    return _ami_id(value[region], f"{where}.{region}")


def _regions(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise UserInputError(f"{WHERE}.regions: expected a list of regions, got {value!r}")
    for region in value:
        if not isinstance(region, str) or not _REGION.match(region):
            raise UserInputError(f"{WHERE}.regions: {region!r} is not a region like us-east-1")
    return tuple(dict.fromkeys(value))


def _cidr(value: Any) -> str:
    try:
        return str(ipaddress.ip_network(str(value), strict=False))
    except ValueError:
        raise UserInputError(
            f"{WHERE}.ssh_cidr: {value!r} is not a CIDR like 203.0.113.7/32"
        ) from None


def _subnets(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and v.startswith("subnet-")
        for k, v in value.items()
    ):
        raise UserInputError(f"{WHERE}.subnets: expected a mapping zone -> subnet-id")
    return dict(value)


def _port(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise UserInputError(f"{WHERE}.agent_port: expected a port 1-65535, got {value!r}")
    return value


def _install(value: Any) -> str:
    if value not in INSTALL_MODES:
        raise UserInputError(
            f"{WHERE}.install: expected one of {', '.join(INSTALL_MODES)}, got {value!r}"
        )
    return str(value)


def _path(value: Any, name: str) -> Path | None:
    if value is None:
        return None
    return Path(_text(value, name)).expanduser()


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise UserInputError(f"{WHERE}.{name}: expected true or false, got {value!r}")
    return value


def request_ami(provider_config: Mapping[str, Any], region: str) -> str | None:
    """The AMI a request's ``provider_config: {aws: {ami: …}}`` asks for in ``region``, if any
    (a task's ``image_id`` lands there)."""
    section = provider_config.get("aws") or {}
    if not isinstance(section, Mapping):
        raise UserInputError("provider_config.aws: expected a mapping")
    return ami_in(section.get("ami"), region, "provider_config.aws.ami")
