"""Transformer shapes (layers, hidden size, heads, KV heads) from a :class:`ModelSpec`, and the
FLOP counts that follow from them.

When the spec leaves a shape out, it is derived from the parameter count with the standard scaling
heuristics (a dense decoder has ≈ 12·L·h² non-embedding parameters; open models keep the aspect
ratio h/L near 128 and the head size at 128, e.g. Llama 2 7B 32×4096, 70B 80×8192, GPT-3 175B
96×12288); a missing KV-head count is taken as multi-head (= heads) below 20B parameters and
grouped-query with 8 KV heads from 20B up (Llama 2/3 70B, Llama 3.1 405B, Falcon 40B use GQA/MQA).

FLOPs (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", §2.1; Chowdhery et al. 2022,
"PaLM", Appendix B): training a transformer costs 6·N FLOPs per token for the dense layers plus
12·L·h·s per token for attention scores and values at sequence length s; inference 2·N + 4·L·h·s.
For a mixture of experts N is the active parameter count (:mod:`~gpulease.estimate.moe`).
A FLOP here is one multiply or one add (a multiply-accumulate is 2), the convention of the dense
peak figures it is divided by.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from gpulease.errors import UserInputError
from gpulease.estimate.moe import active_params
from gpulease.spec.models import ModelSpec, Workload

HEAD_DIM = 128
ASPECT_RATIO = 128  # hidden / layers of the open dense decoders listed above
GQA_FROM_PARAMS = 20e9
GQA_KV_HEADS = 8


@dataclass(frozen=True, slots=True)
class TransformerShape:
    """Layers, hidden size and heads; ``derived`` is True when any of them was not given."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    derived: bool

    @property
    def head_dim(self) -> int:
        return max(1, self.hidden // self.heads)

    @property
    def kv_width(self) -> int:
        """kv_heads × head_dim: the width of the K (and of the V) cache per layer and token."""
        return self.kv_heads * self.head_dim


def _round_to(value: float, step: int) -> int:
    return max(step, step * round(value / step))


@functools.lru_cache(maxsize=256)
def transformer_shape(model: ModelSpec) -> TransformerShape:
    """The shape of ``model``, with missing fields derived from ``model.params``.

    Cached: the optimizer asks for the same (frozen, hashable) model hundreds of times a plan.
    A mixture of experts is shaped by its active parameters (the width one token runs through)."""
    params = max(active_params(model), 1.0)
    layers, hidden = model.layers, model.hidden
    if hidden is None and layers is None:
        hidden = _round_to((ASPECT_RATIO * params / 12) ** (1 / 3), HEAD_DIM)
    if hidden is None:
        assert layers is not None
        hidden = _round_to(math.sqrt(params / (12 * max(layers, 1))), 64)
    if layers is None:
        layers = max(1, round(params / (12 * hidden * hidden)))
    heads = model.heads or max(1, hidden // HEAD_DIM)
    kv_heads = model.kv_heads
    if kv_heads is None:
        kv_heads = min(heads, GQA_KV_HEADS) if params >= GQA_FROM_PARAMS else heads
    derived = None in (model.layers, model.hidden, model.heads, model.kv_heads)
    return TransformerShape(layers, hidden, heads, kv_heads, derived)


def uses_tokens(workload: Workload) -> bool:
    """True when work is counted in tokens (6·N·D), False for samples × flops_per_sample."""
    if workload.tokens is not None:
        return True
    if workload.samples is not None and workload.flops_per_sample is not None:
        return False
    return workload.samples is not None and workload.seq_len is not None


def training_tokens(workload: Workload) -> float:
    """Tokens seen over the whole run: tokens (or samples × seq_len) × epochs."""
    if workload.tokens is not None:
        return workload.tokens * workload.epochs
    if workload.samples is not None and workload.seq_len is not None:
        return workload.samples * workload.seq_len * workload.epochs
    raise UserInputError("workload: give `tokens` (or `samples` with `seq_len`) to estimate time")


def attention_flops_per_token(workload: Workload) -> float:
    """12·L·h·s, the training FLOPs per token of attention (0 when ``seq_len`` is unknown)."""
    if workload.seq_len is None or workload.model.arch != "transformer":
        return 0.0
    shape = transformer_shape(workload.model)
    return 12.0 * shape.layers * shape.hidden * workload.seq_len


def training_flops_per_token(workload: Workload) -> float:
    """6·N + 12·L·h·s: training FLOPs per token (forward and backward); N counts the active
    parameters of a mixture of experts."""
    return 6.0 * active_params(workload.model) + attention_flops_per_token(workload)


def training_flops(workload: Workload) -> float:
    """Total training FLOPs of ``workload``.

    Transformers (or any workload given in tokens): (6·N + 12·L·h·s) · tokens · epochs, the
    attention term only when ``seq_len`` is given. Otherwise samples · flops_per_sample · epochs.
    """
    if uses_tokens(workload):
        return training_flops_per_token(workload) * training_tokens(workload)
    if workload.samples is None or workload.flops_per_sample is None:
        raise UserInputError(
            "workload: give `tokens` (transformers) or `samples` and `flops_per_sample` "
            "to estimate training time"
        )
    return workload.samples * workload.flops_per_sample * workload.epochs
