"""Pydantic models of a gpulease task: Task, Resources, Workload and their parts.

CONTRACT (read by catalog, estimate, policy and optimizer — keep names and types stable):

- ``Task.resources.accelerators`` is an :class:`AcceleratorRequest` or None.
- ``Resources.cpus/memory/disk`` are :class:`gpulease.units.Minimum` or None (GB for memory/disk).
- ``Resources.use_spot`` is ``True``, ``False`` or ``"auto"``.
- ``Task.deadline_hours`` and ``Task.budget_usd`` are floats or None (parsed from ``36h`` / ``$500``).
- ``Workload.params``/``tokens``/``samples``/``flops_per_sample`` are floats (parsed from ``7B``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpulease.units import Minimum

Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8"]
Sharding = Literal["ddp", "fsdp", "zero3"]
WorkloadKind = Literal["train", "finetune", "inference"]
Architecture = Literal["transformer", "cnn", "other"]
Commitment = Literal["none", "1y", "3y"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)


class AcceleratorRequest(_Model):
    """Which accelerators are acceptable.

    ``choices`` maps a canonical accelerator name (``A100-80GB``) to a GPU count per node, or None
    when the count is left to the optimizer. ``ordered`` is True for a preference list (the first
    feasible wins), False for "any one of them, cheapest wins".
    """

    choices: dict[str, int | None]
    ordered: bool = False


class ModelSpec(_Model):
    params: float  # number of parameters
    arch: Architecture = "transformer"
    layers: int | None = None
    hidden: int | None = None
    kv_heads: int | None = None
    heads: int | None = None


class Workload(_Model):
    kind: WorkloadKind = "train"
    model: ModelSpec
    tokens: float | None = None  # training tokens (per epoch)
    samples: float | None = None  # training samples per epoch (non-token workloads)
    flops_per_sample: float | None = None  # training FLOPs per sample (forward + backward)
    seq_len: int | None = None
    global_batch: int | None = None  # sequences (transformer) or samples per step
    precision: Precision = "bf16"
    sharding: Sharding | None = None  # None: ddp when the model state fits one GPU, else fsdp
    epochs: float = 1.0
    # inference
    requests_per_second: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    context_len: int | None = None
    hours: float | None = None  # how long to serve


class Resources(_Model):
    accelerators: AcceleratorRequest | None = None
    cpus: Minimum | None = None
    memory: Minimum | None = None  # GB
    disk: Minimum | None = None  # GB
    use_spot: bool | Literal["auto"] = False
    providers: list[str] | None = None
    regions: list[str] | None = None
    exclude_providers: list[str] = Field(default_factory=list)
    exclude_regions: list[str] = Field(default_factory=list)
    instance_type: str | None = None
    max_price_per_hour: float | None = None
    commitment: Commitment = "none"
    provider_config: dict[str, Any] = Field(default_factory=dict)


class CheckpointSpec(_Model):
    dir: str | None = None
    store: str | None = None
    sync_interval_hours: float | None = None


class JobRecovery(_Model):
    strategy: Literal["same_region", "next_region", "on_demand_fallback"] = "next_region"
    max_restarts_on_errors: int = 0
    zone_cooldown_hours: float = 0.5


class Task(_Model):
    name: str | None = None
    resources: Resources = Field(default_factory=Resources)
    num_nodes: int | None = None
    workload: Workload | None = None
    deadline_hours: float | None = None
    budget_usd: float | None = None
    data_policy: list[str] = Field(default_factory=list)
    workdir: str | None = None
    file_mounts: dict[str, str] = Field(default_factory=dict)
    setup: str | None = None
    run: str | None = None
    envs: dict[str, str] = Field(default_factory=dict)
    checkpoint: CheckpointSpec | None = None
    job_recovery: JobRecovery | None = None
