"""``GET /v1/metrics`` on real agent processes: scripted fake GPUs and node metrics, sampling
off, no NVML, bad arguments and queries."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agent.conftest import AgentProcess
from tests.waiting import wait_until

SCRIPT = {
    "name": "T4",
    "memory_total_mb": 16000,
    "power_limit_w": 70,
    "gpus": [
        {"index": 2, "utilization_pct": [80], "memory_pct": [25]},
        {"index": 3, "utilization_pct": [0, 100], "memory_pct": [50]},
    ],
}
FAST = ("--metrics-interval", "0.05")


def _samples(agent: AgentProcess, count: int, since: float | None = None) -> list[Any]:
    samples: list[Any] = wait_until(
        lambda: len(s := agent.api.metrics(since)["samples"]) >= count and s,
        what=f"{count} samples",
    )
    return samples


def test_fake_gpus_and_node_metrics(agent_factory: Callable[..., AgentProcess]) -> None:
    agent = agent_factory(args=(*FAST, "--fake-gpus", json.dumps(SCRIPT)))
    samples = _samples(agent, 4)
    report = agent.api.metrics()
    assert report["gpu_source"] == "fake" and report["gpu_error"] is None
    assert report["interval_s"] == 0.05 and report["sampling"] is True
    times = [s["at"] for s in samples]
    assert times == sorted(times) and len(set(times)) == len(times)  # newest last
    for sample in samples:
        assert [g["index"] for g in sample["gpus"]] == [2, 3]
        first, second = sample["gpus"]
        assert first["utilization_pct"] == 80.0 and first["memory_used_mb"] == 4000.0
        assert first["name"] == "T4 (fake)" and first["memory_total_mb"] == 16000.0
        assert second["utilization_pct"] in (0.0, 100.0)
        node = sample["node"]
        assert node["memory_total_mb"] > 0 and 0 <= node["cpu_pct"] <= 100
    assert {s["gpus"][1]["utilization_pct"] for s in samples} == {0.0, 100.0}
    assert samples[-1]["node"]["net_recv_bps"] is not None  # a rate from the second pass on
    later = agent.api.metrics(since=times[-2])["samples"]
    assert later and all(s["at"] > times[-2] for s in later)
    assert later[0]["at"] == times[-1]


def test_ring_capacity_bounds_what_is_kept(agent_factory: Callable[..., AgentProcess]) -> None:
    agent = agent_factory(args=(*FAST, "--metrics-capacity", "3"))
    first = _samples(agent, 3)
    wait_until(lambda: agent.api.metrics()["samples"][0]["at"] > first[-1]["at"], what="drops")
    assert len(agent.api.metrics()["samples"]) == 3


@pytest.mark.skipif(
    Path("/proc/driver/nvidia").exists(), reason="this machine has an NVIDIA driver"
)
def test_no_nvml_is_one_log_line(agent_factory: Callable[..., AgentProcess]) -> None:
    agent = agent_factory(args=FAST)
    samples = _samples(agent, 2)
    report = agent.api.metrics()
    assert report["gpu_source"] == "none"
    assert report["gpu_error"].startswith("no GPU metrics: ")
    assert all(s["gpus"] == [] and s["node"]["memory_total_mb"] > 0 for s in samples)
    log = agent.log_path.read_text()
    assert log.count("no GPU metrics") == 1
    assert "Traceback" not in log


def test_sampling_off(agent_factory: Callable[..., AgentProcess]) -> None:
    agent = agent_factory(args=("--metrics-interval", "0"))
    report = agent.api.metrics()
    assert report["sampling"] is False and report["samples"] == []


def test_metrics_needs_the_token_and_a_numeric_since(
    agent_factory: Callable[..., AgentProcess],
) -> None:
    agent = agent_factory(args=FAST)
    assert httpx.get(f"{agent.url}/v1/metrics").status_code == 401
    auth = {"Authorization": f"Bearer {agent.token}"}
    for since in ("soon", "nan", "inf"):
        answer = httpx.get(f"{agent.url}/v1/metrics", params={"since": since}, headers=auth)
        assert answer.status_code == 422, since
        assert answer.json()["error"]["code"] == "invalid_request"
        assert "since" in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--fake-gpus", '{"gpus": [{"index": 0, "utilization_pct": [101]}]}'), "--fake-gpus"),
        (("--fake-gpus", "[]"), "--fake-gpus"),
        (("--metrics-interval", "-1"), "--metrics-interval"),
        (("--metrics-capacity", "0"), "--metrics-capacity"),
    ],
)
def test_bad_arguments_exit_2_naming_the_flag(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    token = tmp_path / "token"
    token.write_text("t\n")
    done = subprocess.run(
        [sys.executable, "-m", "gpulease.agent", "serve", "--token-file", str(token),
         "--node-dir", str(tmp_path / "node"), *args],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
