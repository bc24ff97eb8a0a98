"""Copy a state dict to host memory so it can be written while training continues."""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any


def to_host(value: Any) -> Any:
    """Deep-copy ``value``, cloning every tensor to CPU (detached); containers are rebuilt."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, OrderedDict):
        out: OrderedDict[Any, Any] = OrderedDict((k, to_host(v)) for k, v in value.items())
        metadata = getattr(value, "_metadata", None)
        if metadata is not None:  # module versions that load_state_dict consults
            out._metadata = copy.deepcopy(metadata)  # type: ignore[attr-defined]
        return out
    if isinstance(value, dict):
        return {k: to_host(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_host(v) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(to_host(v) for v in value)
    return copy.deepcopy(value)
