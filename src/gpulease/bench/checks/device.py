"""What this node has: its NVIDIA GPUs as NVML sees them (count, names, memory — without torch)
and whether torch can use them (:func:`detect`). NVML is ``pynvml`` from ``nvidia-ml-py``; the
driver provides the library itself, so on a CPU node :func:`nvml` fails and says why.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class Found:
    """The GPUs found here. ``device`` is ``cuda`` only when torch can run on them; ``why``
    says why not (no driver, no GPU, torch missing or built without CUDA)."""

    device: Literal["cpu", "cuda"]
    gpu_count: int
    gpu_name: str | None
    why: str | None


def nvml() -> tuple[Any | None, str]:
    """The initialised ``pynvml`` module, or None and why it cannot be used here."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded on a CPU node
        return None, f"no NVIDIA driver here (NVML: {exc})"
    return pynvml, ""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_gpus() -> tuple[list[str], str]:
    """The names of the GPUs NVML sees (empty, with why, when none)."""
    lib, why = nvml()
    if lib is None:
        return [], why
    try:
        count = int(lib.nvmlDeviceGetCount())
        names = [_text(lib.nvmlDeviceGetName(lib.nvmlDeviceGetHandleByIndex(i)))
                 for i in range(count)]  # fmt: skip
    finally:
        lib.nvmlShutdown()
    return names, "" if names else "NVML finds no GPU on this node"


def _torch_cuda() -> tuple[int, str | None, str]:
    if importlib.util.find_spec("torch") is None:
        return 0, None, "torch is not installed (the GPU checks need it)"
    import torch

    if not torch.cuda.is_available():
        built = torch.version.cuda
        why = "torch cannot use the GPUs" if built else f"torch {torch.__version__} has no CUDA"
        return 0, None, why
    count = torch.cuda.device_count()
    return count, torch.cuda.get_device_name(0), ""


def detect() -> Found:
    """NVML first (cheap: a CPU node never imports torch here), then torch for the GPUs."""
    names, why = nvml_gpus()
    if not names:
        return Found("cpu", 0, None, why)
    count, name, torch_why = _torch_cuda()
    if count == 0:
        return Found("cpu", len(names), names[0], torch_why)
    return Found("cuda", count, name, None)
