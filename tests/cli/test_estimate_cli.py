"""`gpulease estimate` as a user runs it: hardware they name, on offer in the catalog or not."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import Cli

V3 = "examples/pretrain-deepseek-v3.yaml"
PAPER_GPU_HOURS = 2.664e6  # DeepSeek-V3 pre-training on 2,048 H800 (arXiv:2412.19437)


def test_deepseek_v3_on_2048_h800_is_about_the_papers_time(cli: Cli) -> None:
    data = json.loads(cli("estimate", V3, "--gpus", "H800:8", "--nodes", "256", "--json",
                          check=True).stdout)  # fmt: skip
    assert data["fits"] is True
    assert (data["accelerator"], data["part"], data["gpus"]) == ("H800", "H800-SXM", 2048)
    assert (data["sharding"], data["expert_parallel"]) == ("fsdp", 64)
    gpu_hours, hours = data["gpu_hours"], data["hours"]
    assert gpu_hours["low"] <= PAPER_GPU_HOURS <= gpu_hours["high"]
    assert abs(gpu_hours["expected"] / PAPER_GPU_HOURS - 1) <= 0.20
    assert hours["low"] < hours["expected"] < hours["high"]
    assert 40 < hours["expected"] / 24 < 75  # the paper: ~54 days
    assert data["memory_per_gpu_gb"] < 0.9 * 80
    assert any("memory for all 671B parameters" in note for note in data["notes"])


def test_table_names_the_assumptions(cli: Cli) -> None:
    out = cli("estimate", V3, "--gpus", "h800:8", "--nodes", "256", check=True).stdout
    for text in ("GPU-hours", "memory per GPU", "experts over 64 GPUs", "infiniband 3200 Gbps",
                 "no offer in the catalog"):  # fmt: skip
        assert text in out


def test_hardware_that_cannot_hold_671b_exits_1_with_the_reason(cli: Cli) -> None:
    result = cli("estimate", V3, "--gpus", "H100:8", "--nodes", "2", "--json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["fits"] is False and data["hours"] is None
    assert any("needs ≥" in note and "H100-SXM" in note for note in data["notes"])


def test_the_network_options_override_the_default(cli: Cli) -> None:
    def expected(*extra: str) -> float:
        args = ("estimate", V3, "--gpus", "H800:8", "--nodes", "256", "--json", *extra)
        return float(json.loads(cli(*args, check=True).stdout)["hours"]["expected"])

    assert expected("--fabric", "ethernet", "--network-gbps", "100") > expected()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--gpus", "H900:8"), "--gpus: unknown accelerator 'H900'"),
        (("--gpus", "H800"), "--gpus: give the GPUs per node as NAME:COUNT"),
        (("--gpus", "H800:8", "--fabric", "token-ring"), "--fabric: 'token-ring'"),
        (("--gpus", "H800:8", "--network-gbps", "0"), "--network-gbps"),
        (("--gpus", "H800:8", "--nodes", "0"), "--nodes"),
    ],
)
def test_bad_input_exits_2_naming_the_option(cli: Cli, args: tuple[str, ...], message: str) -> None:
    result = cli("estimate", V3, *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
