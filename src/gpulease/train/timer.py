"""Training speed: :class:`StepTimer`, :func:`throughput` and model FLOPs utilisation (MFU).

Owns timing steps (CUDA-synchronised when CUDA is in use), the rolling window of measured steps,
and the MFU arithmetic: ``achieved TFLOPS / (dense peak per device × devices)``. The peak is the
catalog's *dense* figure of the accelerator for the training precision, with the catalog's
fallbacks (:data:`gpulease.catalog.PRECISION_FALLBACKS`: bf16 on a part without bf16 → fp32).
``precision="fp32"`` means TF32 off (what ``setup_precision("fp32")`` sets), so the fp32
CUDA-core peak applies; a run with TF32 on should say ``precision="tf32"`` (its tensor-core peak
is 7× higher on an H100), or its MFU is overstated.

The accelerator is a canonical name (``H100`` → its usual cloud part ``H100-SXM``), a part
(``H100-PCIe``) or, when not given, detected from ``torch.cuda.get_device_name()``. The catalog is
loaded on the first MFU question and kept.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpulease.errors import UserInputError

if TYPE_CHECKING:
    from gpulease.catalog import Catalog


@dataclass(frozen=True)
class Throughput:
    """Speed over some steps. ``achieved_tflops`` is ``None`` without a FLOPs count,
    ``peak_tflops`` without a known accelerator (and on CPU), ``mfu`` (0..1) when either is."""

    step_time_s: float
    samples_per_s: float
    tokens_per_s: float
    achieved_tflops: float | None = None
    peak_tflops: float | None = None
    mfu: float | None = None
    accelerator: str | None = None

    def __str__(self) -> str:
        parts = [f"step {self.step_time_s * 1000:.1f} ms"]
        if self.samples_per_s:
            parts.append(f"{self.samples_per_s:,.1f} samples/s")
        if self.tokens_per_s:
            parts.append(f"{self.tokens_per_s:,.0f} tokens/s")
        if self.achieved_tflops is not None:
            tflops = self.achieved_tflops
            parts.append(f"{tflops:,.1f} TFLOPS" if tflops >= 1 else f"{tflops * 1000:,.1f} GFLOPS")
        if self.mfu is not None and self.peak_tflops is not None:
            parts.append(
                f"MFU {self.mfu:.1%} of {self.peak_tflops:,.1f} TFLOPS peak ({self.accelerator})"
            )
        return " | ".join(parts)


def throughput(
    *,
    seconds: float,
    samples: int = 0,
    tokens: int = 0,
    flops_per_sample: float | None = None,
    flops_per_token: float | None = None,
    accelerator: str | None = None,
    num_devices: int = 1,
    precision: str = "bf16",
) -> Throughput:
    """Throughput of ``samples``/``tokens`` processed in ``seconds`` (one step) on
    ``num_devices`` devices, and the MFU against ``accelerator``'s dense ``precision`` peak
    (``accelerator=None``: the CUDA device of this process, if any)."""
    return _measure(
        seconds=seconds,
        steps=1,
        samples=samples,
        tokens=tokens,
        flops=(flops_per_sample, flops_per_token),
        part=_part_or_detect(accelerator),
        num_devices=num_devices,
        precision=precision,
    )


class StepTimer:
    """Times training steps; reports throughput and MFU over the last ``window`` steps.

    ::

        timer = StepTimer(flops_per_token=6 * n_params, precision="bf16")
        for batch in loader:
            with timer.step(tokens=batch.numel()):
                train_step(batch)
            if step % 100 == 0:
                print(timer.throughput())

    The first ``warmup`` steps (compilation, allocator growth, cuDNN autotuning) are not counted.
    ``num_devices`` (default 1) is how many devices process the counted samples: count each
    process's own batch with the default, or the global batch with ``num_devices=world_size``.
    ``clock`` returns seconds from any fixed origin (default :func:`time.perf_counter`); tests
    pass a virtual one, e.g. ``VirtualClock().now`` from :mod:`gpulease.clock`. Each step is
    also reported to the node's agent (:func:`gpulease.train.stats.train_stats`: step time,
    samples/s, tokens/s, MFU; ``report=False`` keeps this timer to itself).
    """

    def __init__(
        self,
        *,
        flops_per_sample: float | None = None,
        flops_per_token: float | None = None,
        accelerator: str | None = None,
        num_devices: int | None = None,
        precision: str = "bf16",
        warmup: int = 2,
        window: int = 100,
        clock: Callable[[], float] = time.perf_counter,
        report: bool = True,
    ) -> None:
        if warmup < 0:
            raise UserInputError(f"StepTimer(warmup={warmup}): must be >= 0")
        if window < 1:
            raise UserInputError(f"StepTimer(window={window}): must be >= 1")
        _check_flops(flops_per_sample, flops_per_token)
        _check_precision(precision)
        self.flops_per_sample = flops_per_sample
        self.flops_per_token = flops_per_token
        self.accelerator = accelerator
        self.num_devices = 1 if num_devices is None else _check_devices(num_devices)
        self.precision = precision
        self.warmup = warmup
        self.clock = clock
        self.report = report
        self.steps_seen = 0
        self._window: deque[tuple[float, int, int]] = deque(maxlen=window)
        self._part: tuple[str | None] | None = None  # resolved once, on the first throughput()

    @contextlib.contextmanager
    def step(self, samples: int = 0, tokens: int = 0) -> Iterator[None]:
        """Time the block as one step of ``samples`` samples / ``tokens`` tokens. CUDA work is
        synchronised at the start and the end; a block that raises is not counted."""
        if samples < 0 or tokens < 0:
            raise UserInputError(
                f"StepTimer.step(samples={samples}, tokens={tokens}): must be >= 0"
            )
        _synchronize()
        start = self.clock()
        yield
        _synchronize()
        elapsed = self.clock() - start
        self.steps_seen += 1
        if self.steps_seen > self.warmup:
            self._window.append((elapsed, samples, tokens))
        if self.report:
            from gpulease.train.stats import train_stats

            train_stats().step(samples=samples, tokens=tokens, timer=self)

    @property
    def measured(self) -> int:
        """Steps in the window (warm-up excluded)."""
        return len(self._window)

    def reset(self) -> None:
        """Forget the measured steps (the warm-up is not repeated)."""
        self._window.clear()

    def throughput(self) -> Throughput:
        """Mean throughput and MFU over the window; ``UserInputError`` before any counted step."""
        if not self._window:
            raise UserInputError(
                f"StepTimer.throughput(): no step measured yet ({self.steps_seen} seen, "
                f"the first {self.warmup} are warm-up)"
            )
        if self._part is None:
            self._part = (_part_or_detect(self.accelerator),)
        return _measure(
            seconds=sum(s for s, _, _ in self._window),
            steps=len(self._window),
            samples=sum(n for _, n, _ in self._window),
            tokens=sum(t for _, _, t in self._window),
            flops=(self.flops_per_sample, self.flops_per_token),
            part=self._part[0],
            num_devices=self.num_devices,
            precision=self.precision,
        )


# -- arithmetic ----------------------------------------------------------------------------------


def _measure(
    *,
    seconds: float,
    steps: int,
    samples: int,
    tokens: int,
    flops: tuple[float | None, float | None],
    part: str | None,
    num_devices: int,
    precision: str,
) -> Throughput:
    if seconds <= 0:
        raise UserInputError(f"throughput(seconds={seconds}): must be > 0")
    _check_flops(*flops)
    _check_precision(precision)
    _check_devices(num_devices)
    achieved = _achieved_tflops(seconds, samples, tokens, *flops)
    peak = peak_tflops(part, precision) if part is not None else None
    mfu = achieved / (peak * num_devices) if achieved is not None and peak else None
    return Throughput(
        step_time_s=seconds / steps,
        samples_per_s=samples / seconds,
        tokens_per_s=tokens / seconds,
        achieved_tflops=achieved,
        peak_tflops=peak,
        mfu=mfu,
        accelerator=part,
    )


def _achieved_tflops(
    seconds: float,
    samples: int,
    tokens: int,
    flops_per_sample: float | None,
    flops_per_token: float | None,
) -> float | None:
    if flops_per_sample is not None:
        if samples <= 0:
            raise UserInputError("flops_per_sample is set but no samples were counted (samples=)")
        return flops_per_sample * samples / seconds / 1e12
    if flops_per_token is not None:
        if tokens <= 0:
            raise UserInputError("flops_per_token is set but no tokens were counted (tokens=)")
        return flops_per_token * tokens / seconds / 1e12
    return None


def _check_flops(flops_per_sample: float | None, flops_per_token: float | None) -> None:
    if flops_per_sample is not None and flops_per_token is not None:
        raise UserInputError("give flops_per_sample or flops_per_token, not both")
    for name, value in (
        ("flops_per_sample", flops_per_sample),
        ("flops_per_token", flops_per_token),
    ):
        if value is not None and not value > 0:
            raise UserInputError(f"{name}={value}: must be > 0")


def _check_precision(precision: str) -> None:
    from gpulease.catalog.types import PRECISION_FALLBACKS

    if precision not in PRECISION_FALLBACKS:
        known = ", ".join(PRECISION_FALLBACKS)
        raise UserInputError(f"precision={precision!r}: unknown; expected one of {known}")


def _check_devices(num_devices: int) -> int:
    if num_devices < 1:
        raise UserInputError(f"num_devices={num_devices}: must be >= 1")
    return num_devices


def _synchronize() -> None:
    """Wait for queued CUDA work, if this process uses CUDA (torch not imported: it does not)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()


# -- the accelerator -----------------------------------------------------------------------------


@functools.cache
def _catalog() -> Catalog:
    from gpulease.catalog import Catalog

    return Catalog.load()


def peak_tflops(part: str, precision: str = "bf16") -> float | None:
    """The dense peak TFLOPS per device of catalog ``part`` for ``precision`` (with the catalog's
    fallbacks); ``None`` when the part has no usable figure."""
    _check_precision(precision)
    value = _catalog().spec_for(part).peak_tflops(precision)
    return value if value > 0 else None


def resolve_accelerator(name: str) -> str | None:
    """The catalog part for a part name (``H100-PCIe``), a canonical name (``H100`` → its usual
    cloud part) or a ``torch.cuda.get_device_name()`` string (``NVIDIA H100 80GB HBM3`` →
    ``H100-SXM``); ``None`` when the catalog has no such accelerator."""
    from gpulease.catalog._names import resolve

    catalog = _catalog()
    wanted = name.strip().lower()
    for spec in catalog.accelerators.values():
        if spec.part.lower() == wanted:
            return spec.part
    parts = catalog.parts_of(name)
    if len(parts) == 1:
        return parts[0].part
    base, memory_gb = _device_name_parts(name)
    found = resolve("", "", base, memory_gb=memory_gb, hint=name)
    return found.part if found is not None and found.part in catalog.accelerators else None


_VENDOR = re.compile(r"\b(NVIDIA|TESLA|AMD|INSTINCT|GEFORCE)\b")
_MEMORY = re.compile(r"(\d+)\s*GB\b")
_DECORATION = re.compile(r"\bHBM\w*|\bSXM\d*|\bPCIE\b|\bNVL(INK)?\b|/.*$")


def _device_name_parts(name: str) -> tuple[str, float | None]:
    """The model (``A100``) and memory in GB (40) of a device name such as
    ``NVIDIA A100-SXM4-40GB``; the form factor is left to the caller's hint."""
    text = name.upper().replace("_", "-")
    memory = _MEMORY.search(text)
    base = _DECORATION.sub(" ", _MEMORY.sub(" ", _VENDOR.sub(" ", text)))
    base = re.sub(r"[\s-]+", " ", base).strip()
    return base, float(memory.group(1)) if memory else None


def _part_or_detect(accelerator: str | None) -> str | None:
    if accelerator is None:
        return detect_accelerator()
    part = resolve_accelerator(accelerator)
    if part is None:
        raise UserInputError(
            f"accelerator={accelerator!r} is not in the catalog; give a name such as H100 or a "
            f"part such as H100-PCIe (known: {', '.join(_catalog().names())})"
        )
    return part


def detect_accelerator() -> str | None:
    """The catalog part of this process's CUDA device, else of ``$GPULEASE_ACCELERATOR`` (the
    accelerator the cluster rented, set by the agent), else ``None``: no CUDA or torch not
    imported (so no GPU in use) outside a gpulease task, or a GPU the catalog has no spec for.
    Reads the device's memory when its name does not give it."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        rented = os.environ.get("GPULEASE_ACCELERATOR", "").strip()
        return resolve_accelerator(rented) if rented else None
    name = torch.cuda.get_device_name()
    _, memory_gb = _device_name_parts(name)
    if memory_gb is None:
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        name = f"{name} {round(total / 1e9)}GB"
    return resolve_accelerator(name)
