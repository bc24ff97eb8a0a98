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


class HostStager:
    """Copies state dicts to host memory into buffers kept from the previous copy.

    A fresh copy of a large state spends most of its time faulting in new pages (measured:
    ~1.3 s for 2 GB against ~0.15 s when copying into buffers already touched); keeping the
    buffers between saves makes the blocking part of an async save ~10× shorter, at the cost of
    one host copy of the state held between saves. Tensors from a GPU land in pinned memory.

    The caller must not stage again while a writer still reads the previous snapshot (the
    :class:`~gpulease.train.CheckpointManager` waits for the write in flight first).
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple[Any, ...], Any] = {}
        self._touched: set[tuple[Any, ...]] = set()

    def stage_all(self, values: dict[str, Any]) -> dict[str, Any]:
        """Stage several named state dicts; buffers no longer used (a shape changed, an object
        is no longer saved) are released."""
        self._touched = set()
        staged = {name: self.stage(value, (name,)) for name, value in values.items()}
        for key in set(self._buffers) - self._touched:
            del self._buffers[key]
        return staged

    def stage(self, value: Any, path: tuple[Any, ...] = ()) -> Any:
        """Like :func:`to_host`, reusing the buffer of the same path, shape and dtype."""
        import torch

        if isinstance(value, torch.Tensor):
            return self._stage_tensor(value, path)
        if isinstance(value, OrderedDict):
            out: OrderedDict[Any, Any] = OrderedDict(
                (k, self.stage(v, (*path, k))) for k, v in value.items()
            )
            metadata = getattr(value, "_metadata", None)
            if metadata is not None:
                out._metadata = copy.deepcopy(metadata)  # type: ignore[attr-defined]
            return out
        if isinstance(value, dict):
            return {k: self.stage(v, (*path, k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.stage(v, (*path, i)) for i, v in enumerate(value)]
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return tuple(self.stage(v, (*path, i)) for i, v in enumerate(value))
        return copy.deepcopy(value)

    def _stage_tensor(self, tensor: Any, path: tuple[Any, ...]) -> Any:
        import torch

        src = tensor.detach()
        if src.layout != torch.strided or src.is_quantized or src.numel() < 1024:
            return src.to("cpu", copy=True)  # small or exotic tensors: a plain copy
        key = (*path, tuple(src.shape), src.dtype)
        self._touched.add(key)
        buffer = self._buffers.get(key)
        if buffer is None:
            buffer = torch.empty(src.shape, dtype=src.dtype, device="cpu", pin_memory=src.is_cuda)
            self._buffers[key] = buffer
        buffer.copy_(src, non_blocking=src.is_cuda)
        if src.is_cuda:
            torch.cuda.current_stream(src.device).synchronize()
        return buffer

    def clear(self) -> None:
        """Release the kept buffers."""
        self._buffers.clear()
