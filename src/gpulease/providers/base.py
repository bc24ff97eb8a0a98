"""The Provider interface: what every place that can run nodes (local, sim, aws, slurm) offers.

CONTRACT (used by the controller, the CLI and the conformance suite — keep names stable)::

    provider.launch(request)       -> list[Instance]   one per node; idempotent by request_id
    provider.terminate(ids)        -> None             returns once accepted; missing ids: a no-op
    provider.list_instances(tags)  -> list[Instance]   every instance whose tags include ``tags``
    provider.poll_events()         -> list[ProviderEvent]   preemption notices, capacity errors,
                                                            state changes — as data, never raised

Rules (DESIGN.md): every instance carries the request's tags (``gpulease-cluster``,
``gpulease-owner``, ``gpulease-request``); ``terminate`` never claims success for the caller —
confirmation comes from a later ``list_instances`` that no longer shows the instance (or shows it
TERMINATED); launch errors are typed (:class:`CapacityError` → try elsewhere, :class:`QuotaError`,
:class:`ProviderUnavailable` → retry later). Optional capabilities are mixins checked with
``isinstance`` (:class:`SupportsStopStart`, :class:`SupportsSpot`, :class:`SupportsMultiNode`,
:class:`SupportsNodeToken`, :class:`SupportsSpotMarket`, :class:`SupportsPriceHistory`,
:class:`SupportsOffers`).
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from gpulease.clock import Clock
from gpulease.errors import Permanent, Retryable
from gpulease.providers.ssh import SshTarget

if TYPE_CHECKING:
    from gpulease.catalog import Catalog
    from gpulease.catalog.types import AcceleratorSpec, OfferTable

TAG_CLUSTER = "gpulease-cluster"
TAG_OWNER = "gpulease-owner"
TAG_REQUEST = "gpulease-request"
TAG_NODE_RANK = "gpulease-node-rank"


class InstanceState(enum.StrEnum):
    PENDING = "pending"  # accepted, not running yet (provisioning)
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    TERMINATING = "terminating"
    TERMINATED = "terminated"  # gone (the provider confirms)


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """What to start. ``request_id`` makes ``launch`` idempotent: the same id never starts more
    nodes; a repeat returns the instances the first call started. ``disk_gb`` / ``disk_tier``
    (the task's ``resources.disk`` and ``disk_tier``: ``low``, ``medium``, ``high``, ``ultra``,
    ``best``) size and choose each node's disk where the provider can (aws); the others ignore
    them. ``image``: the task's container image (``resources.image_id``), None without one; a
    cloud provider makes sure such a node has a container engine (aws: its user-data)."""

    request_id: str
    cluster: str
    owner: str
    num_nodes: int = 1
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    accelerator: str | None = None
    gpus_per_node: int = 0
    spot: bool = False
    tags: Mapping[str, str] = field(default_factory=dict)
    provider_config: Mapping[str, Any] = field(default_factory=dict)
    disk_gb: float | None = None
    disk_tier: str | None = None
    image: str | None = None

    def all_tags(self) -> dict[str, str]:
        return {
            **self.tags,
            TAG_CLUSTER: self.cluster,
            TAG_OWNER: self.owner,
            TAG_REQUEST: self.request_id,
        }


@dataclass(frozen=True, slots=True)
class Instance:
    """One node as the provider sees it. ``agent_url`` is where the node's agent listens (local
    and sim: a loopback URL; cloud VMs: reached through an SSH tunnel) — None until known."""

    id: str
    provider: str
    state: InstanceState
    tags: Mapping[str, str]
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    node_rank: int = 0
    private_ip: str | None = None
    agent_url: str | None = None
    spot: bool = False
    price_per_hour: float | None = None
    launched_at: float | None = None


class EventKind(enum.StrEnum):
    PREEMPTION_NOTICE = "preemption_notice"  # the instance will be taken soon
    PREEMPTED = "preempted"  # the instance was taken
    CAPACITY_ERROR = "capacity_error"  # a launch found no capacity (region/zone in detail)
    STATE_CHANGE = "state_change"


@dataclass(frozen=True, slots=True)
class ProviderEvent:
    kind: EventKind
    at: float  # the provider's clock
    instance_id: str | None = None
    region: str | None = None
    zone: str | None = None
    detail: str = ""


class ProviderError(Permanent):
    """A provider refused for good (bad request, unknown instance type, auth)."""


class CapacityError(Retryable):
    """No capacity where asked: try another zone / region / provider (failover)."""

    def __init__(
        self,
        message: str,
        *,
        region: str | None = None,
        zone: str | None = None,
        delay: float = 0.0,
    ) -> None:
        super().__init__(message, delay=delay)
        self.region = region
        self.zone = zone


class QuotaError(Permanent):
    """The account's quota forbids this launch here; failover may still find room elsewhere."""


class ProviderUnavailable(Retryable):
    """The provider did not answer (throttling, outage): retry later with backoff."""


class Provider(ABC):
    """Synchronous and typed; every call returns quickly (no waiting for boot).

    ``events_every_s``: how often the controller may call ``poll_events`` (0: every pass); a cloud
    whose events cost API calls sets it so a busy server does not throttle itself.

    ``shares_files``: whether the nodes see this machine's files at the same paths (local, sim).
    When they do not (the default: cloud VMs, a Slurm cluster), the server uploads a task's
    workdir and file mounts through each node's agent before submitting it.

    ``billing``: how the provider bills an instance, a rule string of
    :class:`gpulease.state.ledger.Billing` (``second``, ``second:60``, ``minute``, ``hour``, with
    ``,request`` when it bills from the request rather than from running);
    ``volume_usd_per_gb_month``: what a stopped instance's disks cost (None: nothing, or not
    charged). The controller's cost ledger reads both."""

    name: str
    events_every_s: float = 0.0
    shares_files: bool = False
    billing: str = "second"
    volume_usd_per_gb_month: float | None = None

    @abstractmethod
    def launch(self, request: LaunchRequest) -> list[Instance]: ...

    @abstractmethod
    def terminate(self, instance_ids: list[str]) -> None: ...

    @abstractmethod
    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]: ...

    @abstractmethod
    def poll_events(self) -> list[ProviderEvent]: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the provider object holds (not the instances)."""

    def release_leftovers(self) -> int:
        """Stop what a previous server of this gpulease home left running on this host when it
        was killed without a clean stop (aws: its SSH tunnels and replica forwards); how many.
        The server calls it once at start, before its loops; in-process commands never do."""
        return 0


class SupportsStopStart(ABC):
    @abstractmethod
    def stop(self, instance_ids: list[str]) -> None: ...

    @abstractmethod
    def start(self, instance_ids: list[str]) -> None: ...


class SupportsSpot(ABC):  # noqa: B024 - a marker: the capability has no methods of its own
    """Launches honour ``LaunchRequest.spot`` and preemptions come back as events."""


class SupportsMultiNode(ABC):  # noqa: B024 - a marker, like SupportsSpot
    """``num_nodes > 1`` is placed so the nodes reach each other (same network)."""


class SupportsNodeToken(ABC):
    """The provider created each node's agent token and hands it to the server (local: a file
    next to the node; cloud VMs: the server makes the token and passes it in user-data)."""

    @abstractmethod
    def node_token(self, instance_id: str) -> SecretStr: ...


class SupportsSsh(ABC):
    """The provider's nodes are machines the server logs in to over SSH (``gpulease ssh``)."""

    @abstractmethod
    def ssh_target(self, instance_id: str) -> SshTarget:
        """Where and as whom to log in to the instance, with which key."""


class SupportsSpotMarket(ABC):
    """The provider can say, without launching anything, whether spot capacity is obtainable
    now and what spot costs now (the managed-jobs loop's spot policy and price threshold)."""

    @abstractmethod
    def spot_available(self, region: str | None, zone: str | None, num_nodes: int) -> bool | None:
        """True / False, or None when the provider cannot tell."""

    @abstractmethod
    def spot_price(
        self, region: str | None, zone: str | None, instance_type: str | None, quoted: float
    ) -> float | None:
        """The spot price per hour now of what was quoted ``quoted`` per hour (None: unknown)."""

    @property
    @abstractmethod
    def market_clock(self) -> Clock:
        """The clock the provider's prices, preemptions and spot availability follow."""


class SupportsPriceHistory(ABC):
    """The provider knows when its spot prices changed (the cost ledger closes a row at each
    change's instant, so a late pass still splits the interval where the price changed)."""

    @abstractmethod
    def spot_price_changes(
        self,
        region: str | None,
        zone: str | None,
        instance_type: str | None,
        quoted: float,
        *,
        after: float,
        until: float,
    ) -> list[tuple[float, float]]:
        """``(at, price per hour)`` of each change in ``(after, until]`` (market clock time) of
        the spot price of what was quoted ``quoted`` per hour, oldest first."""


@dataclass(frozen=True, slots=True)
class ProviderOffers:
    """What a provider sells now beyond the public catalog: offers, and the specs of parts the
    catalog does not know (the local CPU part)."""

    table: OfferTable
    specs: Mapping[str, AcceleratorSpec] = field(default_factory=dict)


class SupportsOffers(ABC):
    """The provider says itself what it sells (this machine, a simulated cloud, a Slurm
    cluster's partitions) through its own backends; a provider without it sells what the public
    catalog lists under its name (aws). Must not fail: a backend that does not answer sells
    nothing (and says so in the log)."""

    @abstractmethod
    def offers(self, catalog: Catalog) -> ProviderOffers:
        """The offers now; ``catalog`` gives the accelerator specs (and the sim's offers)."""
