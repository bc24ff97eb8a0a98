"""GPU metrics through NVML (``nvidia-ml-py``, module ``pynvml``).

Owns the NVML session of the agent: :meth:`NvmlSampler.open` initialises NVML once and
registers every device for XID (critical error) events; :meth:`NvmlSampler.sample` reads each
device and drains the pending XID events without waiting. A figure a device does not support
(``NVMLError_NotSupported``, no permission) is ``None``; a device that fails as a whole is left
out of that pass. States: closed → open (``open`` succeeded) → closed (``close``); a failed
``open`` leaves ``error`` set ("no GPU metrics: <reason>", logged once, never a traceback) and
the sampler reports no GPUs.
"""

from __future__ import annotations

import logging
from typing import Any

from gpulease.agent.telemetry.sample import GpuSample

log = logging.getLogger("gpulease.agent.telemetry")

_MB = 1_000_000.0
# nvmlClocksEventReason* bits (nvml.h); gpu_idle is not a slowdown and is never reported.
THROTTLE_REASONS: dict[int, str] = {
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clock_setting",
}


def throttle_names(mask: int) -> tuple[str, ...]:
    return tuple(name for bit, name in THROTTLE_REASONS.items() if mask & bit)


class NvmlSampler:
    source = "nvml"

    def __init__(self) -> None:
        self.error: str | None = None
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._events: Any = None
        self._xids: dict[int, int] = {}

    def open(self) -> bool:
        """Initialise NVML; False (and ``error`` set, one log line) when there is none."""
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ImportError, …
            self.error = f"no GPU metrics: {_reason(exc)}"
            log.warning("%s", self.error)
            return False
        self._nvml = pynvml
        self._register_xid_events()
        log.info("GPU metrics through NVML: %d device(s)", len(self._handles))
        return True

    def _register_xid_events(self) -> None:
        nvml = self._nvml
        try:
            self._events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            log.info("no XID events: %s", _reason(exc))
            return
        for index, handle in enumerate(self._handles):
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError,
                                              self._events)  # fmt: skip
                self._xids[index] = 0
            except nvml.NVMLError as exc:
                log.info("no XID events for GPU %d: %s", index, _reason(exc))

    def close(self) -> None:
        if self._nvml is None:
            return
        nvml, self._nvml = self._nvml, None
        try:
            if self._events is not None:
                nvml.nvmlEventSetFree(self._events)
            nvml.nvmlShutdown()
        except nvml.NVMLError as exc:
            log.info("NVML shutdown: %s", _reason(exc))

    def sample(self) -> list[GpuSample]:
        if self._nvml is None:
            return []
        self._drain_xids()
        samples = []
        for index, handle in enumerate(self._handles):
            try:
                samples.append(self._device(index, handle))
            except self._nvml.NVMLError as exc:
                log.debug("GPU %d: %s", index, _reason(exc))
        return samples

    def _drain_xids(self) -> None:
        nvml = self._nvml
        if self._events is None:
            return
        for _ in range(1000):  # a bound, should a device flood events
            try:
                data = nvml.nvmlEventSetWait_v2(self._events, 0)
            except nvml.NVMLError:  # NVMLError_Timeout: nothing pending
                return
            if data.eventType & nvml.nvmlEventTypeXidCriticalError:
                index = self._optional(nvml.nvmlDeviceGetIndex, data.device)
                if index in self._xids:
                    self._xids[index] += 1

    def _device(self, index: int, handle: Any) -> GpuSample:
        nvml, get = self._nvml, self._optional
        name = nvml.nvmlDeviceGetName(handle)
        temp_gpu = nvml.NVML_TEMPERATURE_GPU
        util = get(nvml.nvmlDeviceGetUtilizationRates, handle)
        memory = get(nvml.nvmlDeviceGetMemoryInfo, handle)
        power = get(nvml.nvmlDeviceGetPowerUsage, handle)
        limit = get(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        reasons = get(nvml.nvmlDeviceGetCurrentClocksEventReasons, handle)
        return GpuSample(
            index=index,
            name=name.decode() if isinstance(name, bytes) else str(name),
            uuid=_text(get(nvml.nvmlDeviceGetUUID, handle)),
            utilization_pct=None if util is None else float(util.gpu),
            memory_used_mb=None if memory is None else memory.used / _MB,
            memory_total_mb=None if memory is None else memory.total / _MB,
            power_w=None if power is None else power / 1000.0,
            power_limit_w=None if limit is None else limit / 1000.0,
            temperature_c=_float(get(nvml.nvmlDeviceGetTemperature, handle, temp_gpu)),
            sm_clock_mhz=_float(get(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)),
            throttle_reasons=() if reasons is None else throttle_names(int(reasons)),
            ecc_errors_corrected=self._ecc(handle, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ecc_errors_uncorrected=self._ecc(handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
            xid_errors=self._xids.get(index),
        )

    def _ecc(self, handle: Any, kind: int) -> int | None:
        nvml = self._nvml
        count = self._optional(nvml.nvmlDeviceGetTotalEccErrors, handle, kind,
                               nvml.NVML_VOLATILE_ECC)  # fmt: skip
        return None if count is None else int(count)

    def _optional(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)``, or None when the device does not support it."""
        try:
            return fn(*args)
        except self._nvml.NVMLError:
            return None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
