"""EC2 instance descriptions → :class:`~gpulease.providers.base.Instance` (states, tags, rank,
spot, launch time), and the address override (``providers.aws.address_map``: a JSON object
instance id → address, read on every lookup, used for SSH and as the node's private IP).
Moves no states: it only translates what EC2 says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from gpulease.providers.base import TAG_NODE_RANK, Instance, InstanceState, ProviderError

STATES = {
    "pending": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    "stopped": InstanceState.STOPPED,
    "shutting-down": InstanceState.TERMINATING,
    "terminated": InstanceState.TERMINATED,
}
SPOT_TERMINATION = "Server.SpotInstanceTermination"


def tags_of(data: Mapping[str, Any]) -> dict[str, str]:
    return {str(t["Key"]): str(t.get("Value", "")) for t in data.get("Tags") or []}


def ec2_state(data: Mapping[str, Any]) -> str:
    return str((data.get("State") or {}).get("Name") or "pending")


def state_reason(data: Mapping[str, Any]) -> str:
    return str((data.get("StateReason") or {}).get("Code") or "")


def _launched_at(data: Mapping[str, Any]) -> float | None:
    value = data.get("LaunchTime")
    return value.timestamp() if isinstance(value, datetime) else None


def _rank(tags: Mapping[str, str], data: Mapping[str, Any]) -> int:
    try:
        return int(tags[TAG_NODE_RANK])
    except (KeyError, ValueError):
        return int(data.get("AmiLaunchIndex") or 0)


def read_address_map(path: Path | None) -> dict[str, str]:
    """Instance id → address from ``path`` (none yet: empty); a malformed file is a
    :class:`ProviderError` naming the setting."""
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ProviderError(f"providers.aws.address_map: cannot read {path}: {exc}") from None
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in data.items()
    ):
        raise ProviderError(
            f"providers.aws.address_map: {path} must hold a JSON object instance id -> address"
        )
    return dict(data)


def to_instance(
    data: Mapping[str, Any], region: str, *, extra_tags: Mapping[str, str] | None = None,
    agent_url: str | None = None, address: str | None = None,
) -> Instance:  # fmt: skip
    tags = {**tags_of(data), **(extra_tags or {})}
    return Instance(
        id=str(data["InstanceId"]),
        provider="aws",
        state=STATES.get(ec2_state(data), InstanceState.PENDING),
        tags=tags,
        region=region,
        zone=(data.get("Placement") or {}).get("AvailabilityZone"),
        instance_type=data.get("InstanceType"),
        node_rank=_rank(tags, data),
        private_ip=address or data.get("PrivateIpAddress"),
        agent_url=agent_url,
        spot=data.get("InstanceLifecycle") == "spot",
        launched_at=_launched_at(data),
    )
