"""The workload models: what a job computes (:class:`Workload`) and the model it trains or
serves (:class:`ModelSpec`). The optimizer and the estimator read them to size jobs and estimate
their hours; see :mod:`gpulease.spec.models` for the contract. No states.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, Self

from pydantic import BeforeValidator, Field, WithJsonSchema, model_validator

from gpulease.spec.base import SpecModel as _Model
from gpulease.spec.fields import lowercase
from gpulease.spec.quantities import (
    Count,
    PositiveDuration,
    PositiveInt,
    PositiveNumber,
    format_count,
)
from gpulease.units import parse_duration_hours

__all__ = [
    "Architecture",
    "LatencySeconds",
    "ModelSpec",
    "Precision",
    "Sharding",
    "Workload",
    "WorkloadKind",
]

Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8"]
Sharding = Literal["ddp", "fsdp", "zero3"]
WorkloadKind = Literal["train", "finetune", "inference"]
Architecture = Literal["transformer", "cnn", "other"]

_KIND_ALIASES = {
    "training": "train", "pretrain": "train", "fine-tune": "finetune", "fine_tune": "finetune",
    "serve": "inference", "serving": "inference",
}  # fmt: skip


def _kind(value: object) -> object:
    value = lowercase(value)
    return _KIND_ALIASES.get(value, value) if isinstance(value, str) else value


# --- serving latency targets (issue 17): 2s, 800ms, 0.5 (seconds) ---------------------------


def _latency_seconds(value: object) -> object:
    """``2s`` → 2.0; ``800ms`` → 0.8; ``1m`` → 60.0; a plain number is seconds (a latency in
    hours is never meant). Other values pass through for pydantic to reject."""
    if isinstance(value, bool):
        raise ValueError("expected a latency such as 2s or 800ms, got a boolean")
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            if text.endswith("ms"):
                seconds = float(text[:-2].strip()) / 1000
            elif text and (text[-1].isdigit() or text.endswith(".")):
                seconds = float(text)
            else:
                seconds = parse_duration_hours(text) * 3600
        except ValueError:
            raise ValueError(f"expected a latency such as 2s or 800ms, got {value!r}") from None
        if not math.isfinite(seconds):
            raise ValueError(f"expected a finite latency, got {value!r}")
        return seconds
    return value


LatencySeconds = Annotated[
    float,
    Field(gt=0, allow_inf_nan=False),
    BeforeValidator(_latency_seconds),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "exclusiveMinimum": 0, "description": "seconds"},
                {"type": "string", "pattern": r"^\s*[0-9]+(\.[0-9]*)?\s*(ms|s|sec|m|min)?\s*$"},
            ],
            "examples": ["2s", "800ms", "1.5s", 0.5],
        }
    ),
]
"""A latency in seconds, written ``2s``, ``800ms``, ``1.5s`` or as a number of seconds."""


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
    # serving latency targets (issue 17): a plan whose replica misses one is rejected
    latency_p95_s: LatencySeconds | None = Field(default=None, alias="latency_p95")
    """Inference: 95th-percentile request latency to meet (2s, 800ms): first token + every
    output token, under the load of requests_per_second."""
    ttft_p95_s: LatencySeconds | None = Field(default=None, alias="ttft_p95")
    """Inference: 95th-percentile time to first token to meet (500ms)."""
    tpot_p95_s: LatencySeconds | None = Field(default=None, alias="tpot_p95")
    """Inference: 95th-percentile time per output token to meet (50ms)."""

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
    def _latency_targets_serve(self) -> Self:
        given = [
            alias
            for alias, value in (
                ("latency_p95", self.latency_p95_s),
                ("ttft_p95", self.ttft_p95_s),
                ("tpot_p95", self.tpot_p95_s),
            )
            if value is not None
        ]
        if given and self.kind != "inference":
            raise ValueError(f"{', '.join(given)}: latency targets need kind: inference")
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
