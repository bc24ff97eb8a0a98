"""The agent's NVML code path against a fake ``libnvidia-ml.so.1`` (``fake_nvml.c``, built here
with gcc and found by pynvml's ``dlopen`` through ``LD_LIBRARY_PATH``), on real agent processes.

What it proves: the NVML symbols and signatures the agent calls through pynvml, the units (mW →
W, bytes → MB), NOT_SUPPORTED reported as null, throttle bits as names (idle left out), XID
events drained and counted, and a failed ``nvmlInit`` as one "no GPU metrics" line. What it
does not: that a real driver answers the same way (``benchmarks/gpu_check.sh`` on a lent GPU)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
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


def test_the_gpu_check_reads_every_gpu_and_names_a_null_figure(
    fake_nvml_dir: Path, tmp_path: Path
) -> None:
    """``benchmarks/gpu/nvml_check.py`` (run by gpu_check.sh where a GPU is lent) against the
    fake library: device 0 reads in full, device 1 has no power figure → named, exit 1; and
    with no NVML at all it fails unless ``--allow-none``."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "nvml_check.py"
    env = {**os.environ, **_env(fake_nvml_dir)}
    out = tmp_path / "sample.json"
    done = subprocess.run(
        [sys.executable, str(script), "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "GPU 0 " in done.stdout and "FAILED: GPU 1: power_w is null" in done.stdout
    assert "GPU 0: " not in done.stdout.split("FAILED")[1]  # device 0 had every figure
    assert json.loads(out.read_text())["gpu_source"] == "nvml"
    for extra, code in (((), 1), (("--allow-none",), 0)):
        bare = subprocess.run(
            [sys.executable, str(script), *extra],
            env={**os.environ, "LD_LIBRARY_PATH": str(tmp_path)},  # no libnvidia-ml here
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert bare.returncode == code and "reads no GPU through NVML" in bare.stdout
