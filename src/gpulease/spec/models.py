"""Pydantic models of a gpulease task: Task, Resources, Workload and their parts.

CONTRACT (read by catalog, estimate, policy and optimizer — keep names and types stable):

- ``Task.resources.accelerators`` is an :class:`AcceleratorRequest` or None.
- ``Resources.cpus/memory/disk`` are :class:`gpulease.units.Minimum` or None (GB for memory/disk).
- ``Resources.use_spot`` is ``True``, ``False`` or ``"auto"``.
- ``Task.deadline_hours`` and ``Task.budget_usd`` are floats or None (parsed from ``36h`` /
  ``$500``).
- ``Workload.params``/``tokens``/``samples``/``flops_per_sample`` are floats (parsed from ``7B``).

The models validate what a user writes: each field that has a different name in YAML carries it
as its alias (``deadline`` → ``deadline_hours``), and either name is accepted. Values are parsed
by the annotated types of :mod:`gpulease.spec.quantities` and :mod:`gpulease.spec.fields`;
``model_dump()`` gives the internal values, ``model_dump(mode="json", by_alias=True)`` the YAML a
user would write. Field docstrings become the descriptions of the JSON Schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal, Self

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from gpulease.spec.accelerators import (
    ACCELERATORS_JSON_SCHEMA,
    canonical_accelerator_name,
    format_accelerators,
    parse_accelerators,
)
from gpulease.spec.acceptance import AcceptanceField
from gpulease.spec.autostop import AutostopField, AutostopSpec
from gpulease.spec.base import SpecModel as _Model
from gpulease.spec.container_image import DockerImage
from gpulease.spec.fields import (
    CpuArchChoice,
    EnvVars,
    ExcludedProviders,
    JsonMapping,
    Names,
    NonEmptyNames,
    ProviderNames,
    SpotChoice,
    lowercase,
)
from gpulease.spec.pool import PoolSpec
from gpulease.spec.quantities import (
    Duration,
    MinimumAmount,
    Money,
    NonNegativeInt,
    PositiveDuration,
    PositiveInt,
)
from gpulease.spec.secret_vars import SecretVars, secret_name_problem
from gpulease.spec.serve_fields import PortList
from gpulease.spec.service import ServiceSpec
from gpulease.spec.workload import (
    Architecture,
    ModelSpec,
    Precision,
    Sharding,
    Workload,
    WorkloadKind,
)

__all__ = [
    "AcceleratorRequest",
    "Architecture",
    "AutostopSpec",
    "Candidate",
    "CheckpointSpec",
    "Commitment",
    "JobRecovery",
    "ModelSpec",
    "PoolSpec",
    "Precision",
    "RecoveryStrategy",
    "Resources",
    "ServiceSpec",
    "Sharding",
    "Task",
    "Workload",
    "WorkloadKind",
]

Commitment = Literal["none", "1y", "3y"]
RecoveryStrategy = Literal["same_region", "next_region", "on_demand_fallback"]
DiskTier = Literal["low", "medium", "high", "ultra", "best"]
NetworkTier = Literal["standard", "best"]

_STRATEGY_ALIASES = {"failover": "same_region", "eager_next_region": "next_region"}


def _strategy(value: object) -> object:
    """Accept ``next-region`` and SkyPilot's ``FAILOVER`` / ``EAGER_NEXT_REGION``."""
    if not isinstance(value, str):
        return value
    value = value.strip().lower().replace("-", "_")
    return _STRATEGY_ALIASES.get(value, value)


class AcceleratorRequest(_Model):
    """Which accelerators are acceptable.

    ``options`` lists ``(name, count)`` pairs: a canonical accelerator name (``A100-80GB``) and a
    GPU count per node, or None when the count is left to the optimizer. One name may come at
    several counts (SkyPilot's ``{A100:4, A100:8}``). ``ordered`` is True for a preference list
    (the first feasible wins), False for "any one of them, cheapest wins". ``choices={name:
    count}`` is accepted as input for a request with one count per name.
    """

    options: tuple[tuple[str, int | None], ...] = Field(min_length=1)
    ordered: bool = False

    @model_validator(mode="before")
    @classmethod
    def _from_choices(cls, data: object) -> object:
        if isinstance(data, Mapping) and "choices" in data and "options" not in data:
            rest = {key: value for key, value in data.items() if key != "choices"}
            return {**rest, "options": tuple(dict(data["choices"]).items())}
        return data

    @field_validator("options")
    @classmethod
    def _canonical_options(
        cls, options: tuple[tuple[str, int | None], ...]
    ) -> tuple[tuple[str, int | None], ...]:
        canonical: list[tuple[str, int | None]] = []
        for name, count in options:
            if count is not None and count < 1:
                raise ValueError(f"accelerator count must be positive, got {name}:{count}")
            option = (canonical_accelerator_name(name), count)
            if option not in canonical:
                canonical.append(option)
        return tuple(canonical)

    @property
    def names(self) -> tuple[str, ...]:
        """The accelerator names asked for, each once, in the order given."""
        return tuple(dict.fromkeys(name for name, _ in self.options))

    def counts_of(self, name: str) -> tuple[int | None, ...]:
        """The GPUs per node acceptable for ``name`` (None: any count the optimizer sizes)."""
        return tuple(count for option, count in self.options if option == name)


def _accelerator_request(value: object) -> object:
    """Read ``"A100:8"``, ``{A100: 8, H100: 8}`` or ``["H100:8", "A100:8"]``; see accelerators."""
    if value is None or isinstance(value, AcceleratorRequest):
        return value
    if isinstance(value, Mapping) and ("options" in value or "choices" in value):
        return value  # the internal form, from model_dump()
    options, ordered = parse_accelerators(value)
    return AcceleratorRequest(options=tuple(options), ordered=ordered)


def _format_request(request: AcceleratorRequest) -> object:
    return format_accelerators(request.options, request.ordered)


Accelerators = Annotated[
    AcceleratorRequest,
    BeforeValidator(_accelerator_request),
    PlainSerializer(_format_request, when_used="json"),
    WithJsonSchema(ACCELERATORS_JSON_SCHEMA),
]


class Candidate(_Model):
    """One way to run the task that pairs accelerators with where they may run: SkyPilot's
    ``any_of``/``ordered`` entries that each name their own cloud, region or zone."""

    accelerators: Accelerators | None = None
    """Accelerators per node of this candidate; unset: a CPU instance (any GPU when the task
    has a workload)."""
    providers: ProviderNames | None = None
    """Providers of this candidate; unset: any allowed one."""
    regions: NonEmptyNames | None = None
    """Regions of this candidate; unset: any allowed one."""
    zones: NonEmptyNames | None = None
    """Zones of this candidate; unset: any zone."""


class Resources(_Model):
    """What one node needs, and where it may run."""

    accelerators: Accelerators | None = None
    """Accelerators per node: 'A100:8', {A100: 8, H100: 8} (any) or ['H100:8', 'A100:8']."""
    cpus: MinimumAmount | None = None
    """vCPUs per node: 8 (exactly) or 8+ (at least)."""
    memory: MinimumAmount | None = None  # GB
    """Memory per node in GB: 64, 64+ or 64GB+."""
    disk: MinimumAmount | None = None  # GB
    """Disk per node in GB: 256, 256+ or 1TB."""
    disk_tier: Annotated[DiskTier, BeforeValidator(lowercase)] | None = None
    """Disk speed, as in SkyPilot: low, medium, high, ultra or best (= ultra). On aws it sets the
    root EBS volume's type, IOPS and throughput; other providers ignore it (with a warning)."""
    network_tier: Annotated[NetworkTier, BeforeValidator(lowercase)] | None = None
    """Interconnect, as in SkyPilot: standard (any) or best (only offers with EFA, InfiniBand,
    RoCE or at least 100 Gbps)."""
    cpu_arch: CpuArchChoice = "x86_64"
    """Host CPU architecture: x86_64 (the default), arm64 (Graviton, Grace) or any."""
    use_spot: SpotChoice = False
    """true (spot only), false (on-demand only) or auto (the optimizer chooses)."""
    providers: ProviderNames | None = None
    """Allowed providers (also 'provider'): aws, sim, local, slurm, kubernetes, …; unset: all."""
    regions: NonEmptyNames | None = None
    """Allowed regions (also 'region'); unset: all."""
    zones: NonEmptyNames | None = None
    """Allowed zones (also 'zone', SkyPilot's field): us-east-1a, us-central1-a; each implies its
    region. Unset: any zone of an allowed region."""
    exclude_providers: ExcludedProviders = Field(default_factory=list)
    """Providers never to use."""
    exclude_regions: Names = Field(default_factory=list)
    """Regions never to use."""
    instance_type: str | None = None
    """A specific instance type, e.g. p4d.24xlarge."""
    max_price_per_hour: Money | None = None
    """Highest acceptable price per node-hour: $40."""
    max_spot_price: Money | None = None
    """Managed jobs: highest spot price per node-hour; above it the job checkpoints and moves."""
    spot_price_ratio: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    """Managed jobs: highest spot price as a fraction of the on-demand price (0 < r ≤ 1)."""
    commitment: Annotated[Commitment, BeforeValidator(lowercase)] = "none"
    """Pricing commitment to consider: none, 1y or 3y."""
    provider_config: JsonMapping = Field(default_factory=dict)
    """Per-task overrides of provider settings, by provider name."""
    autostop: AutostopField = None
    """Stop (or tear down) the cluster when idle: true (after 5 min), 10, 10m or {idle_minutes,
    down, gpu_utilisation_below}; unset or false: never (gpulease launch -i overrides it)."""
    acceptance: AcceptanceField = None
    """Bench every node once all are up and before setup, replace the ones that fail: true, or
    {min_ratio, minimums, max_replacements, checks, degraded_for} (docs/bench.md)."""
    ports: PortList = Field(default_factory=list)
    """Ports the node's job listens on: 8080, "8000-8010" or a list (SkyPilot's field). For a
    service, the first is the replica port when service.port is not given."""
    image_id: DockerImage | None = None
    """Run setup and run inside this container image (SkyPilot's field): docker:NAME[:TAG]
    [@sha256:DIGEST], pulled by the node's Docker or Podman on every provider (docs/containers.md).
    An AWS AMI (ami-…) becomes provider_config.aws.ami instead."""
    pool: Annotated[str, Field(min_length=1)] | None = None
    """Managed jobs: run on a node of this pool (gpulease pool up) instead of a new cluster."""
    candidates: list[Candidate] | None = None
    """Ways to run that pair accelerators with providers, regions or zones (SkyPilot's any_of /
    ordered entries with a cloud each): an offer must match one of them; with an ordered
    accelerators list, the first candidate with a plan wins. Unset: every accelerator is
    allowed wherever the task allows."""

    @model_validator(mode="after")
    def _not_both_allowed_and_excluded(self) -> Self:
        both = set(self.providers or ()) & set(self.exclude_providers)
        both |= set(self.regions or ()) & set(self.exclude_regions)
        if both:
            raise ValueError(f"{', '.join(sorted(both))} both allowed and excluded")
        return self


class CheckpointSpec(_Model):
    """Where the job's checkpoints live and how often they are synced."""

    dir: str | None = None
    """Directory on the node the job writes checkpoints to."""
    store: str | None = None
    """Where checkpoints are kept: a local directory or s3://bucket/prefix."""
    sync_interval_hours: PositiveDuration | None = Field(default=None, alias="sync_interval")
    """How often to sync checkpoints to the store: 5m, 1h."""


class JobRecovery(_Model):
    """What to do when a node is preempted or the job fails."""

    strategy: Annotated[RecoveryStrategy, BeforeValidator(_strategy)] = "next_region"
    """same_region, next_region or on_demand_fallback."""
    max_restarts_on_errors: NonNegativeInt = 0
    """Restarts after the job itself fails (not preemptions)."""
    zone_cooldown_hours: Duration = Field(default=0.5, alias="zone_cooldown")
    """How long to avoid a zone after a preemption there: 30m."""


def _recovery(value: object) -> object:
    """``job_recovery: next_region`` is short for ``job_recovery: {strategy: next_region}``."""
    return {"strategy": value} if isinstance(value, str) else value


class Task(_Model):
    """A task: what to run, on what, by when and for how much."""

    # a ValidationError's text never shows an input: the task's may hold its secrets' values
    model_config = ConfigDict(hide_input_in_errors=True)

    name: str | None = None
    """A name for display."""
    resources: Resources = Field(default_factory=Resources)
    """Per-node requirements and where the task may run."""
    num_nodes: PositiveInt | None = None
    """Nodes to run on; unset: the optimizer chooses (1 when there is no workload)."""
    workload: Workload | None = None
    """What the job computes, for estimating its time and cost."""
    deadline_hours: PositiveDuration | None = Field(default=None, alias="deadline")
    """Finish within: 36h, 3d."""
    budget_usd: Money | None = Field(default=None, alias="budget")
    """Spend at most: $500."""
    data_policy: Names = Field(default_factory=list)
    """Data classes the job touches (e.g. pii, hipaa); they limit providers and regions."""
    workdir: str | None = None
    """Local directory synced to every node; setup and run start in it."""
    file_mounts: dict[str, str] = Field(default_factory=dict)
    """Remote path → local path or URL, copied to every node."""
    setup: str | None = None
    """Shell commands run once per node before run."""
    run: str | None = None
    """Shell commands of the job, run on every node."""
    envs: EnvVars = Field(default_factory=dict)
    """Environment variables for setup and run."""
    secrets: SecretVars = Field(default_factory=dict)
    """Environment variables for setup and run whose values stay secret (SkyPilot's field):
    NAME: value, or NAME: null to give it at launch (--secret NAME[=VALUE] or the launching
    environment). Never shown, logged or stored in clear; a dump of the task names them only."""
    checkpoint: CheckpointSpec | None = None
    """Checkpoint directory, store and sync interval."""
    job_recovery: Annotated[JobRecovery, BeforeValidator(_recovery)] | None = None
    """Recovery from preemptions and failures."""
    service: ServiceSpec | None = None
    """Serve the run: command as a service (gpulease serve up): port, readiness probe,
    replicas, autoscaling, spot mix."""
    pool: PoolSpec | None = None
    """A pool file (gpulease pool up): nodes of these resources kept for managed jobs."""

    @field_validator("pool")
    @classmethod
    def _service_or_pool(cls, pool: PoolSpec | None, info: ValidationInfo) -> PoolSpec | None:
        if pool is not None and info.data.get("service") is not None:
            raise ValueError("a task is either a service (service:) or a pool (pool:), not both")
        return pool

    @model_validator(mode="after")
    def _secret_names_free(self) -> Self:
        for name in self.secrets:
            problem = secret_name_problem(name, self.envs)
            if problem is not None:
                raise ValueError(f"secrets.{name}: {problem}")
        return self

    @model_validator(mode="after")
    def _replica_port_from_ports(self) -> Self:
        """A service without ``port`` listens on the first of ``resources.ports`` (SkyPilot)."""
        service, ports = self.service, self.resources.ports
        if service is not None and ports and "port" not in service.model_fields_set:
            object.__setattr__(self, "service", service.model_copy(update={"port": ports[0]}))
        return self
