"""The fake GPUs' sampler: scripted utilisation and memory for the local provider's nodes.

Owns the script an agent gets with ``serve --fake-gpus JSON`` (:class:`FakeGpuScript`, checked
with pydantic; the local provider builds it from ``providers.local.gpu_load`` / ``gpu_memory``)
and the pass counter that steps through each GPU's pattern: pass ``n`` reports
``pattern[n % len(pattern)]``. Power, temperature and SM clock follow the utilisation on a fixed
line, so charts move with the script; ECC and XID counts stay 0. This proves the path from the
agent's sampler to its API and beyond, never NVML (see ``nvml.py`` and its fake library).
"""

from __future__ import annotations

import threading

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpulease.agent.telemetry.sample import GpuSample

Pattern = list[float]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FakeGpu(_Model):
    index: int = Field(ge=0)
    utilization_pct: list[float] = Field(default=[0.0], min_length=1)
    memory_pct: list[float] = Field(default=[0.0], min_length=1)


class FakeGpuScript(_Model):
    name: str = Field(default="T4", min_length=1)
    memory_total_mb: float = Field(default=16_000.0, gt=0)
    power_limit_w: float = Field(default=70.0, gt=0)
    gpus: list[FakeGpu] = Field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> FakeGpuScript:
        """From the JSON of ``--fake-gpus``; ValueError naming the field otherwise."""
        try:
            script = cls.model_validate_json(text)
        except ValidationError as exc:
            problems = [
                f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}"
                for e in exc.errors(include_input=False, include_url=False)
            ]
            raise ValueError("; ".join(problems)) from None
        for gpu in script.gpus:
            for value in (*gpu.utilization_pct, *gpu.memory_pct):
                if not 0.0 <= value <= 100.0:
                    raise ValueError(f"gpus[{gpu.index}]: percentages are 0 to 100, not {value}")
        return script


class FakeGpuSampler:
    source = "fake"
    error: str | None = None

    def __init__(self, script: FakeGpuScript) -> None:
        self.script = script
        self._pass = 0
        self._lock = threading.Lock()

    def open(self) -> bool:
        return True

    def close(self) -> None:
        pass

    def sample(self) -> list[GpuSample]:
        with self._lock:
            n = self._pass
            self._pass += 1
        script = self.script
        samples = []
        for gpu in script.gpus:
            util = gpu.utilization_pct[n % len(gpu.utilization_pct)]
            memory = gpu.memory_pct[n % len(gpu.memory_pct)]
            samples.append(
                GpuSample(
                    index=gpu.index,
                    name=f"{script.name} (fake)",
                    uuid=f"GPU-fake-{gpu.index}",
                    utilization_pct=util,
                    memory_used_mb=round(script.memory_total_mb * memory / 100.0, 3),
                    memory_total_mb=script.memory_total_mb,
                    power_w=round(script.power_limit_w * (0.3 + 0.7 * util / 100.0), 3),
                    power_limit_w=script.power_limit_w,
                    temperature_c=round(35.0 + 0.45 * util, 3),
                    sm_clock_mhz=300.0 if util == 0 else 1590.0,
                    ecc_errors_corrected=0,
                    ecc_errors_uncorrected=0,
                    xid_errors=0,
                )
            )
        return samples
