"""The simulated cloud's rules: capacity errors by region, provisioning delay, and spot
preemptions from a trace or a rate — reproducible for a seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulease.errors import UserInputError
from gpulease.providers.base import CapacityError
from gpulease.providers.sim_cloud import SimCloud, SimSettings
from gpulease.spot import Trace, write_trace


def test_no_capacity_regions_and_zones_fail_with_a_typed_error() -> None:
    cloud = SimCloud(SimSettings(no_capacity=("us-east-1", "eu-west-1b")), start=0.0)
    with pytest.raises(CapacityError) as info:
        cloud.check_capacity("us-east-1", "us-east-1a")
    assert info.value.region == "us-east-1"
    with pytest.raises(CapacityError):
        cloud.check_capacity("eu-west-1", "eu-west-1b")
    cloud.check_capacity("us-west-2", None)  # room elsewhere


def test_capacity_error_rate_is_reproducible() -> None:
    def outcomes(seed: int) -> list[bool]:
        cloud = SimCloud(SimSettings(capacity_error_rate=0.5, seed=seed), start=0.0)
        result = []
        for _ in range(40):
            try:
                cloud.check_capacity("r", None)
                result.append(True)
            except CapacityError:
                result.append(False)
        return result

    assert outcomes(1) == outcomes(1) and 5 < sum(outcomes(1)) < 35


def test_provisioning_delay_is_within_bounds() -> None:
    cloud = SimCloud(SimSettings(provision_seconds=(30.0, 90.0)), start=0.0)
    delays = [cloud.ready_at(100.0) - 100.0 for _ in range(50)]
    assert all(30.0 <= d <= 90.0 for d in delays)


def test_trace_preemption_is_the_next_unavailable_tick(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    write_trace(path, Trace(600.0, (1, 1, 1, 0, 1, 1)))
    cloud = SimCloud(SimSettings(spot_trace=str(path)), start=1000.0)
    assert cloud.preempted_at(1000.0 + 100.0) == 1000.0 + 1800.0
    assert cloud.preempted_at(1000.0 + 1900.0) == 1000.0 + 1900.0  # no spot now: taken at once
    assert cloud.preempted_at(1000.0 + 2500.0) == 1000.0 + 3600.0 + 1800.0  # the trace repeats
    assert not cloud.spot_available(1000.0 + 1850.0)


def test_rate_preemptions_average_to_the_rate() -> None:
    cloud = SimCloud(SimSettings(preemptions_per_hour=0.5, seed=4), start=0.0)
    gaps = [cloud.preempted_at(0.0) for _ in range(4000)]
    mean_hours = sum(g for g in gaps if g is not None) / len(gaps) / 3600
    assert mean_hours == pytest.approx(2.0, rel=0.1)
    assert SimCloud(SimSettings(), start=0.0).preempted_at(0.0) is None


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"time_scale": 0}, "time_scale"),
        ({"provision_seconds": [5, 1]}, "provision_seconds"),
        ({"capacity_error_rate": 2}, "capacity_error_rate"),
        ({"bogus": 1}, "bogus"),
        ({"time_scale": "fast"}, "bad value"),
    ],
)
def test_bad_settings_name_the_field(settings: dict[str, object], field: str) -> None:
    with pytest.raises(UserInputError, match=field):
        SimSettings.from_mapping(settings)
