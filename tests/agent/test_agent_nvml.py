"""The agent's NVML code path against a fake ``libnvidia-ml.so.1`` (``fake_nvml.c``, built here
with gcc and found by pynvml's ``dlopen`` through ``LD_LIBRARY_PATH``), on real agent processes.

What it proves: the NVML symbols and signatures the agent calls through pynvml, the units (mW →
W, bytes → MB), NOT_SUPPORTED reported as null, throttle bits as names (idle left out), XID
events drained and counted, and a failed ``nvmlInit`` as one "no GPU metrics" line. What it
does not: that a real driver answers the same way (``benchmarks/gpu_check.sh`` on a lent GPU)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import AgentProcess
from tests.waiting import wait_until

SOURCE = Path(__file__).with_name("fake_nvml.c")
FAST = ("--metrics-interval", "0.05")


@pytest.fixture(scope="module")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler to build the fake libnvidia-ml.so.1")
    out = tmp_path_factory.mktemp("fake-nvml")
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", "-o",
         str(out / "libnvidia-ml.so.1"), str(SOURCE)],
        check=True, timeout=120,
    )  # fmt: skip
    return out


def _env(lib_dir: Path, **extra: str) -> dict[str, str]:
    path = os.environ.get("LD_LIBRARY_PATH")
    return {"LD_LIBRARY_PATH": f"{lib_dir}:{path}" if path else str(lib_dir), **extra}


def _samples(agent: AgentProcess, count: int) -> list[Any]:
    samples: list[Any] = wait_until(
        lambda: len(s := agent.api.metrics()["samples"]) >= count and s, what=f"{count} samples"
    )
    return samples


def test_gpus_read_through_nvml(
    agent_factory: Callable[..., AgentProcess], fake_nvml_dir: Path
) -> None:
    agent = agent_factory(env=_env(fake_nvml_dir), args=FAST)
    samples = _samples(agent, 3)
    assert agent.api.metrics()["gpu_source"] == "nvml"
    assert agent.api.metrics()["gpu_error"] is None
    full, partial = samples[-1]["gpus"]
    assert full == {
        "index": 0, "name": "Fake NVML T4", "uuid": "GPU-fake-nvml-0",
        "utilization_pct": 42.0, "memory_used_mb": 4000.0, "memory_total_mb": 16000.0,
        "power_w": 35.0, "power_limit_w": 70.0, "temperature_c": 61.0, "sm_clock_mhz": 1590.0,
        "throttle_reasons": ["sw_thermal"], "ecc_errors_corrected": 3,
        "ecc_errors_uncorrected": 0, "xid_errors": 0,
    }  # fmt: skip
    assert partial["index"] == 1 and partial["utilization_pct"] == 7.0
    assert partial["power_w"] is None and partial["power_limit_w"] is None
    assert partial["ecc_errors_corrected"] is None and partial["throttle_reasons"] == []
    assert partial["xid_errors"] == 2  # the two pending events, counted once each
    assert all(s["gpu_source"] == "nvml" for s in samples)
    assert samples[-1]["node"]["memory_total_mb"] > 0
    assert "GPU metrics through NVML: 2 device(s)" in agent.log_path.read_text()


def test_a_failed_init_is_one_line(
    agent_factory: Callable[..., AgentProcess], fake_nvml_dir: Path
) -> None:
    agent = agent_factory(env=_env(fake_nvml_dir, FAKE_NVML_INIT="driver"), args=FAST)
    samples = _samples(agent, 2)
    report = agent.api.metrics()
    assert report["gpu_source"] == "none"
    assert report["gpu_error"] == "no GPU metrics: Driver Not Loaded"
    assert all(s["gpus"] == [] and s["node"]["cpu_count"] >= 1 for s in samples)
    log = agent.log_path.read_text()
    assert log.count("no GPU metrics: Driver Not Loaded") == 1 and "Traceback" not in log
