"""Mixed precision for a training loop: ``setup_precision(mode)`` → :class:`Precision`.

Owns the choice of autocast dtype, the ``GradScaler`` for fp16 and the TF32 matmul flags, and the
fallbacks when the device cannot run the requested mode. The rule: run the requested mode where the
device runs it; otherwise warn (``warnings.warn``, never an error) and run the nearest safe mode:

============  ==============================  ==============================  ===============
mode          CUDA (Ampere or newer)          CUDA before Ampere              CPU
============  ==============================  ==============================  ===============
``bf16``      autocast bf16                   fp16 + GradScaler (warns)       autocast bf16
``fp16``      autocast fp16 + GradScaler      autocast fp16 + GradScaler      fp32 (warns)
``tf32``      TF32 matmul/cuDNN on            fp32 (warns: no TF32 units)     fp32 (warns)
``fp32``      no autocast, TF32 off           no autocast, TF32 off           no autocast
============  ==============================  ==============================  ===============

CPU autocast in bf16 is native to torch, so a GPU script debugged on a laptop keeps its bf16
numerics; fp16 on CPU becomes fp32 because CPU fp16 autocast is emulated and slow, and fp32 is the
reference the reduced precisions approximate. torch is imported inside the functions, so importing
this module stays cheap.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpulease.errors import UserInputError

if TYPE_CHECKING:
    import torch

MODES = ("bf16", "fp16", "tf32", "fp32")
_TF32_MIN_CAPABILITY = (8, 0)  # Ampere


@dataclass
class Precision:
    """The precision a loop runs in. ``effective`` is what really applies (it differs from
    ``requested`` only after a warned fallback); ``dtype`` is the autocast dtype (``None``: no
    autocast); ``scaler`` is a ``torch.amp.GradScaler`` for fp16 on CUDA, else ``None``.

    ::

        prec = setup_precision("bf16")
        with prec.autocast():
            loss = model(x).loss
        prec.backward(loss)
        prec.step(optimizer)
        optimizer.zero_grad()
    """

    requested: str
    effective: str
    device_type: str
    dtype: torch.dtype | None = None
    scaler: torch.amp.GradScaler | None = None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """A context manager for the forward pass: ``torch.autocast`` or a no-op."""
        if self.dtype is None:
            return contextlib.nullcontext()
        import torch

        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, scaled first when there is a scaler."""
        if self.scaler is not None:
            self.scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
        else:
            loss.backward()  # type: ignore[no-untyped-call]

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Unscale the gradients in place (call before clipping them); a no-op without scaler."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """``optimizer.step()``; with a scaler ``scaler.step`` (skips inf/NaN steps) + update."""
        if self.scaler is not None:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()

    def state_dict(self) -> dict[str, Any]:
        """The scaler's state (to checkpoint alongside the optimizer); ``{}`` without scaler."""
        return dict(self.scaler.state_dict()) if self.scaler is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any], /) -> None:
        """Restore the scaler's state. A state saved by a run without scaler (``{}``) leaves a
        fresh scaler; a scaler state loaded into a run without one is dropped with a warning
        (a fp16 run resumed on bf16 or CPU hardware)."""
        if self.scaler is not None:
            if state_dict:
                self.scaler.load_state_dict(state_dict)
        elif state_dict:
            warnings.warn(
                f"Precision.load_state_dict: dropping the saved GradScaler state; this run "
                f"({self.effective} on {self.device_type}) uses no scaler",
                stacklevel=2,
            )


def setup_precision(mode: str = "bf16", device: torch.device | str | None = None) -> Precision:
    """Set up ``mode`` (``bf16``, ``fp16``, ``tf32`` or ``fp32``) for ``device`` (default: cuda
    when available, else cpu). Sets the process-wide TF32 flags for ``tf32`` (on) and ``fp32``
    (off); warns when the device cannot run ``mode`` and returns the fallback it chose."""
    requested = _check_mode(mode)
    target = _device(device)
    device_type = target.type
    if requested == "fp32":
        _set_tf32(False)
    if device_type == "cuda":
        precision, why = _setup_cuda(requested, target)
    elif device_type == "cpu":
        precision, why = _setup_cpu(requested)
    else:
        precision = Precision(requested, "fp32", device_type)
        why = f"gpulease sets up autocast for cuda and cpu, not {device_type}"
    if precision.effective != requested:
        warnings.warn(
            f"setup_precision: {requested} is not available ({why}); using {precision.effective}",
            stacklevel=2,
        )
    return precision


def _check_mode(mode: str) -> str:
    normal = mode.strip().lower() if isinstance(mode, str) else mode
    if normal not in MODES:
        raise UserInputError(
            f"setup_precision(mode={mode!r}): unknown mode; expected one of {', '.join(MODES)}"
        )
    return str(normal)


def _device(device: torch.device | str | None) -> torch.device:
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise UserInputError(f"setup_precision(device={device!r}): not a torch device") from exc
    if target.type == "cuda" and not torch.cuda.is_available():
        raise UserInputError(
            f"setup_precision(device={device!r}): CUDA is not available on this machine"
        )
    return target


def _set_tf32(enabled: bool) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    torch.set_float32_matmul_precision("high" if enabled else "highest")


def _setup_cuda(requested: str, device: torch.device) -> tuple[Precision, str]:
    """The CUDA set-up of ``requested`` on ``device`` and, for a fallback, why."""
    import torch

    with torch.cuda.device(device):
        major, minor = torch.cuda.get_device_capability()
        name = f"{torch.cuda.get_device_name()} (compute capability {major}.{minor})"
        native_bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    if requested == "fp32":
        return Precision("fp32", "fp32", "cuda"), ""
    if requested == "tf32":
        if (major, minor) < _TF32_MIN_CAPABILITY:
            return Precision("tf32", "fp32", "cuda"), f"{name} has no TF32 tensor cores"
        _set_tf32(True)
        return Precision("tf32", "tf32", "cuda"), ""
    if requested == "bf16" and native_bf16:
        return Precision("bf16", "bf16", "cuda", torch.bfloat16), ""
    scaler = torch.amp.GradScaler("cuda")
    return Precision(requested, "fp16", "cuda", torch.float16, scaler), f"{name} has no native bf16"


def _setup_cpu(requested: str) -> tuple[Precision, str]:
    """The CPU set-up of ``requested`` and, for a fallback, why."""
    import torch

    if requested == "bf16":
        return Precision("bf16", "bf16", "cpu", torch.bfloat16), ""
    why = {
        "fp16": "fp16 autocast on CPU is emulated and slow",
        "tf32": "TF32 is a CUDA tensor-core mode",
    }.get(requested, "")
    return Precision(requested, "fp32", "cpu"), why
