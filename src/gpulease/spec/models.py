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
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
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
from gpulease.spec.quantities import (
    Count,
    Duration,
    MinimumAmount,
    Money,
    NonNegativeInt,
    PositiveDuration,
    PositiveInt,
    PositiveNumber,
    format_count,
)

Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8"]
Sharding = Literal["ddp", "fsdp", "zero3"]
WorkloadKind = Literal["train", "finetune", "inference"]
Architecture = Literal["transformer", "cnn", "other"]
Commitment = Literal["none", "1y", "3y"]
RecoveryStrategy = Literal["same_region", "next_region", "on_demand_fallback"]
DiskTier = Literal["low", "medium", "high", "ultra", "best"]
NetworkTier = Literal["standard", "best"]

_KIND_ALIASES = {
    "training": "train", "pretrain": "train", "fine-tune": "finetune", "fine_tune": "finetune",
    "serve": "inference", "serving": "inference",
}  # fmt: skip
_STRATEGY_ALIASES = {"failover": "same_region", "eager_next_region": "next_region"}


def _kind(value: object) -> object:
    value = lowercase(value)
    return _KIND_ALIASES.get(value, value) if isinstance(value, str) else value


def _strategy(value: object) -> object:
    """Accept ``next-region`` and SkyPilot's ``FAILOVER`` / ``EAGER_NEXT_REGION``."""
    if not isinstance(value, str):
        return value
    value = value.strip().lower().replace("-", "_")
    return _STRATEGY_ALIASES.get(value, value)


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        arbitrary_types_allowed=True,
        validate_by_name=True,
        validate_by_alias=True,
        use_attribute_docstrings=True,
        coerce_numbers_to_str=True,
        defer_build=True,
    )


class AcceleratorRequest(_Model):
    """Which accelerators are acceptable.

    ``choices`` maps a canonical accelerator name (``A100-80GB``) to a GPU count per node, or None
    when the count is left to the optimizer. ``ordered`` is True for a preference list (the first
    feasible wins), False for "any one of them, cheapest wins".
    """

    choices: dict[str, int | None] = Field(min_length=1)
    ordered: bool = False

    @field_validator("choices")
    @classmethod
    def _canonical_choices(cls, choices: dict[str, int | None]) -> dict[str, int | None]:
        canonical: dict[str, int | None] = {}
        for name, count in choices.items():
            if count is not None and count < 1:
                raise ValueError(f"accelerator count must be positive, got {name}:{count}")
            canonical[canonical_accelerator_name(name)] = count
        if len(canonical) != len(choices):
            raise ValueError("an accelerator is listed twice under different spellings")
        return canonical


def _accelerator_request(value: object) -> object:
    """Read ``"A100:8"``, ``{A100: 8, H100: 8}`` or ``["H100:8", "A100:8"]``; see accelerators."""
    if value is None or isinstance(value, AcceleratorRequest):
        return value
    if isinstance(value, Mapping) and "choices" in value:  # the internal form, from model_dump()
        return value
    choices, ordered = parse_accelerators(value)
    return AcceleratorRequest(choices=choices, ordered=ordered)


def _format_request(request: AcceleratorRequest) -> object:
    return format_accelerators(request.choices, request.ordered)


Accelerators = Annotated[
    AcceleratorRequest,
    BeforeValidator(_accelerator_request),
    PlainSerializer(_format_request, when_used="json"),
    WithJsonSchema(ACCELERATORS_JSON_SCHEMA),
]


class ModelSpec(_Model):
    """The model being trained or served."""

    params: Count
    """Number of parameters: 7B, 1.3B, 25.6M, 70e9."""
    arch: Annotated[Architecture, BeforeValidator(lowercase)] = "transformer"
    """Architecture family: transformer, cnn or other."""
    layers: PositiveInt | None = None
    """Transformer layers (optional; refines memory estimates)."""
    hidden: PositiveInt | None = None
    """Hidden size (optional)."""
    kv_heads: PositiveInt | None = None
    """Key/value heads, for grouped-query attention (optional)."""
    heads: PositiveInt | None = None
    """Attention heads (optional)."""
    active_params: Count | None = None
    """Mixture-of-experts: parameters each token uses (37B of DeepSeek-V3's 671B). FLOPs follow
    it, memory follows params. Unset: a dense model, every parameter active."""
    experts: PositiveInt | None = None
    """Mixture-of-experts: routed experts per MoE layer (optional; DeepSeek-V3: 256)."""
    experts_per_token: PositiveInt | None = None
    """Mixture-of-experts: routed experts each token is sent to (optional; DeepSeek-V3: 8)."""

    @model_validator(mode="after")
    def _heads_divide(self) -> Self:
        if self.heads and self.kv_heads and self.heads % self.kv_heads:
            raise ValueError(f"kv_heads ({self.kv_heads}) must divide heads ({self.heads})")
        return self

    @model_validator(mode="after")
    def _experts_consistent(self) -> Self:
        active = self.active_params
        if active is not None and active > self.params:
            raise ValueError(
                f"active_params ({format_count(active)}) must not exceed params "
                f"({format_count(self.params)}): it counts the parameters each token uses"
            )
        if active is None and (self.experts is not None or self.experts_per_token is not None):
            raise ValueError(
                "a mixture-of-experts model (experts or experts_per_token given) needs "
                "active_params, the parameters each token uses (e.g. 37B of 671B)"
            )
        per_token, experts = self.experts_per_token, self.experts
        if per_token is not None and experts is not None and per_token > experts:
            raise ValueError(f"experts_per_token ({per_token}) must not exceed experts ({experts})")
        return self


class Workload(_Model):
    """What the job computes; the optimizer estimates its time and cost from this."""

    kind: Annotated[WorkloadKind, BeforeValidator(_kind)] = "train"
    """train, finetune or inference."""
    model: ModelSpec
    """The model: params (required), arch, layers, hidden, heads, kv_heads; active_params,
    experts and experts_per_token for a mixture of experts."""
    tokens: Count | None = None
    """Training tokens per epoch: 1B, 26B."""
    samples: Count | None = None
    """Training samples per epoch, for non-token workloads: 1.28M."""
    flops_per_sample: Count | None = None
    """Training FLOPs per sample (forward + backward): 12.3e9."""
    seq_len: PositiveInt | None = None
    """Sequence length in tokens."""
    global_batch: PositiveInt | None = None
    """Sequences (transformer) or samples per optimizer step."""
    precision: Annotated[Precision, BeforeValidator(lowercase)] = "bf16"
    """fp32, tf32, bf16, fp16 or fp8."""
    sharding: Annotated[Sharding, BeforeValidator(lowercase)] | None = None
    """ddp, fsdp or zero3; unset: ddp when the model state fits one GPU, else fsdp."""
    expert_parallel: PositiveInt | None = None
    """Mixture-of-experts: GPUs each layer's routed experts are spread over (DeepSeek-V3: 64);
    unset: min(experts, GPUs)."""
    epochs: PositiveNumber = 1.0
    """Passes over the tokens or samples."""
    requests_per_second: PositiveNumber | None = None
    """Inference: requests to serve per second."""
    prompt_tokens: PositiveInt | None = None
    """Inference: prompt tokens per request."""
    output_tokens: PositiveInt | None = None
    """Inference: generated tokens per request."""
    context_len: PositiveInt | None = None
    """Inference: context length to provision for."""
    hours: PositiveDuration | None = None
    """Inference: how long to serve (720h, 30d)."""

    @model_validator(mode="after")
    def _expert_parallel_fits(self) -> Self:
        degree, model = self.expert_parallel, self.model
        if degree is None:
            return self
        if model.active_params is None:
            raise ValueError(
                "expert_parallel needs a mixture-of-experts model: give model.active_params"
            )
        if model.experts is not None and degree > model.experts:
            raise ValueError(
                f"expert_parallel ({degree}) must not exceed model.experts ({model.experts})"
            )
        return self

    @model_validator(mode="after")
    def _training_amount(self) -> Self:
        if self.kind == "inference" or self.tokens is not None:
            return self
        if self.samples is None:
            raise ValueError(f"a {self.kind} workload needs tokens (e.g. 1B) or samples")
        derivable = self.model.arch == "transformer" and self.seq_len is not None
        if self.flops_per_sample is None and not derivable:
            raise ValueError(
                "samples need flops_per_sample (or, for a transformer, seq_len) "
                "to estimate the work"
            )
        return self


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
    checkpoint: CheckpointSpec | None = None
    """Checkpoint directory, store and sync interval."""
    job_recovery: Annotated[JobRecovery, BeforeValidator(_recovery)] | None = None
    """Recovery from preemptions and failures."""
