"""The two small training workloads of ``train.*``, built here because torchvision is not a
dependency: a ResNet-50-shaped network (:func:`resnet50`: the bottleneck stages 3-4-6-3 of
ResNet-50 v1.5, stride on the 3×3 convolution; ``width=64`` is ResNet-50 itself, 25.6 M
parameters) and a GPT-style transformer block (:class:`GptBlock`: pre-norm causal self-attention
and a 4× GELU MLP). Imports torch: load this module only where torch is wanted.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional


class Bottleneck(nn.Module):
    """1×1 reduce, 3×3 (carrying the stride), 1×1 expand ×4, plus the shortcut."""

    def __init__(self, inputs: int, width: int, stride: int) -> None:
        super().__init__()
        out = width * 4
        self.body = nn.Sequential(
            nn.Conv2d(inputs, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width),
            nn.ReLU(inplace=True), nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out),
        )  # fmt: skip
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or inputs != out:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, out, 1, stride, bias=False),
                                          nn.BatchNorm2d(out))  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return functional.relu(self.body(x) + self.shortcut(x))


def resnet50(width: int = 64, classes: int = 1000) -> nn.Sequential:
    """ResNet-50's layout with its base width scaled (64: the real network)."""
    layers: list[nn.Module] = [
        nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]  # fmt: skip
    inputs = width
    for stage, blocks in enumerate((3, 4, 6, 3)):
        stage_width = width * 2**stage
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            layers.append(Bottleneck(inputs, stage_width, stride))
            inputs = stage_width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(inputs, classes)]
    return nn.Sequential(*layers)


class GptBlock(nn.Module):
    """One GPT-style decoder block: x + attn(ln(x)), then x + mlp(ln(x)); causal attention
    through ``scaled_dot_product_attention`` (flash attention where the GPU has it)."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d_model, dim=-1)
        shape = (batch, seq, self.heads, d_model // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        attn = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(batch, seq, d_model))
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out
