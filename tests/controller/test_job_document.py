"""The managed job's launch document: its JSON round trip, the spot price limits, the cool-down
list and the choice of an attempt's targets (blocked zones, region strategy, spot prices)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulease.controller.job_document import (
    JOB_DOCUMENT_VERSION,
    JobDocument,
    JobPolicy,
    attempt_targets,
    blocked_now,
)
from gpulease.state import LaunchTarget
from gpulease.wire import CheckpointSync, RunSpec


def spot(
    region: str, zone: str | None = None, price: float = 4.0, kind: str = "t1"
) -> LaunchTarget:
    return LaunchTarget("fake", region, zone, kind, pricing="spot", price_per_hour=price)


def od(region: str, price: float = 10.0, kind: str = "t1") -> LaunchTarget:
    return LaunchTarget("fake", region, None, kind, pricing="on_demand", price_per_hour=price)


def doc(
    spots: tuple[LaunchTarget, ...] = (), on_demand: tuple[LaunchTarget, ...] = (), **policy: Any
) -> JobDocument:
    return JobDocument(
        run=RunSpec(run="x"), task_id="t-1", spot=spots, on_demand=on_demand,
        policy=JobPolicy(**policy),
    )  # fmt: skip


def block(region: str, zone: str | None, until: float = 100.0, provider: str = "fake") -> Any:
    return {"provider": provider, "region": region, "zone": zone, "until": until}


# ---- JSON -------------------------------------------------------------------------------------


def test_the_document_survives_a_json_round_trip() -> None:
    original = JobDocument(
        run=RunSpec(run="python train.py"),
        spec={"name": "train", "run": "python train.py", "num_nodes": 2},
        task_id="job-train-3",
        spot=(spot("r1", "z1"), spot("r2", "z2", price=3.0)),
        on_demand=(od("r1"),),
        policy=JobPolicy(
            use_spot="auto",
            strategy="same_region",
            max_restarts_on_errors=2,
            deadline_s=7200.0,
            budget_usd=50.0,
            job_s=3600.0,
            max_spot_price=5.0,
            spot_price_ratio=0.5,
        ),
        checkpoint=CheckpointSync(dir="ckpt", store="s3://b/ckpt", sync_s=300.0),
    )
    data = json.loads(json.dumps(original.to_json()))
    assert data["version"] == JOB_DOCUMENT_VERSION
    assert JobDocument.from_json(data) == original


def test_from_json_fills_defaults_and_ignores_unknown_policy_keys() -> None:
    parsed = JobDocument.from_json({"task_id": 7, "policy": {"strategy": "same_region", "x": 1}})
    assert parsed.task_id == "7"
    assert (parsed.spec, parsed.spot, parsed.on_demand, parsed.checkpoint) == ({}, (), (), None)
    assert parsed.policy == JobPolicy(strategy="same_region")


_TARGETS = st.builds(
    LaunchTarget,
    provider=st.sampled_from(["fake", "sim"]),
    region=st.none() | st.sampled_from(["r1", "r2"]),
    zone=st.none() | st.sampled_from(["z1", "z2"]),
    instance_type=st.none() | st.text(max_size=8),
    gpus_per_node=st.integers(0, 8),
    num_nodes=st.integers(1, 4),
    pricing=st.sampled_from(["spot", "on_demand"]),
    price_per_hour=st.none() | st.floats(0.0, 1e4, allow_nan=False),
)
_FLOATS = st.none() | st.floats(0.0, 1e6, allow_nan=False)
_POLICIES = st.builds(
    JobPolicy,
    use_spot=st.sampled_from(["true", "false", "auto"]),
    strategy=st.sampled_from(["same_region", "next_region", "on_demand_fallback"]),
    max_restarts_on_errors=st.integers(0, 10),
    deadline_s=_FLOATS,
    budget_usd=_FLOATS,
    job_s=_FLOATS,
    max_spot_price=_FLOATS,
    spot_price_ratio=_FLOATS,
)


_RUNS = st.builds(
    RunSpec,
    run=st.none() | st.text(max_size=20),
    setup=st.none() | st.text(max_size=9),
    envs=st.dictionaries(st.from_regex(r"[A-Z_]{1,5}", fullmatch=True), st.text(max_size=5)),
)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3),
    st.lists(_TARGETS, max_size=3),
    st.lists(_TARGETS, max_size=3),
    _POLICIES,
    st.none()
    | st.builds(
        CheckpointSync,
        dir=st.none() | st.text(max_size=8),
        store=st.none() | st.text(max_size=8),
        sync_s=st.none() | st.floats(0.1, 1e6),
    ),
    st.builds(
        RunSpec,
        run=st.none() | st.text(max_size=20),
        setup=st.none() | st.text(max_size=9),
        envs=st.dictionaries(st.from_regex(r"[A-Z_]{1,5}", fullmatch=True), st.text(max_size=5)),
    ),
)
def test_any_document_survives_a_json_round_trip(  # noqa: PLR0917 - one per strategy
    spec: dict[str, Any],
    spots: list[LaunchTarget],
    on_demand: list[LaunchTarget],
    policy: JobPolicy,
    checkpoint: CheckpointSync | None,
    run: RunSpec,
) -> None:
    original = JobDocument(run, "tid", spec, tuple(spots), tuple(on_demand), policy, checkpoint)
    assert JobDocument.from_json(json.loads(json.dumps(original.to_json()))) == original


def test_providers_and_the_on_demand_yardstick() -> None:
    d = doc((spot("r1"),), (od("r1", 12.0), od("r2", 9.0)))
    assert d.providers == frozenset({"fake"})
    assert d.on_demand_price == 9.0
    assert doc((spot("r1"),)).on_demand_price is None
    assert d.targets("spot") == (spot("r1"),) and d.targets("on_demand") == d.on_demand


# ---- spot limits ------------------------------------------------------------------------------


def test_spot_limit_is_none_without_limits() -> None:
    assert doc((spot("r1"),), (od("r1"),)).spot_limit(spot("r1")) is None


def test_spot_limit_takes_the_lower_of_both_limits() -> None:
    d = doc((spot("r1"),), (od("r1", 20.0),), max_spot_price=8.0, spot_price_ratio=0.5)
    assert d.spot_limit(spot("r1")) == 8.0  # min(8, 0.5 × 20)
    d = doc((spot("r1"),), (od("r1", 12.0),), max_spot_price=8.0, spot_price_ratio=0.5)
    assert d.spot_limit(spot("r1")) == 6.0  # min(8, 0.5 × 12)


def test_the_ratio_uses_the_same_instance_in_the_same_region_else_the_cheapest() -> None:
    d = doc((), (od("r2", 8.0), od("r1", 20.0), od("r1", 4.0, kind="t2")), spot_price_ratio=0.5)
    assert d.spot_limit(spot("r1")) == 10.0  # r1/t1 on demand: $20
    assert d.spot_limit(spot("r3")) == 2.0  # no r3/t1: the cheapest on-demand price ($4)


def test_a_ratio_without_on_demand_prices_gives_no_limit() -> None:
    assert doc((spot("r1"),), (), spot_price_ratio=0.5).spot_limit(spot("r1")) is None
    assert doc((), (), max_spot_price=3.0).spot_limit(spot("r1")) == 3.0


# ---- cool-downs -------------------------------------------------------------------------------


def test_blocked_now_drops_expired_entries() -> None:
    entries = [block("r1", "z1", 50.0), block("r1", "z2", 100.0), block("r2", None, 101.0),
               {"provider": "fake", "region": "r3"}]  # fmt: skip
    assert blocked_now(entries, 100.0) == [entries[2]]
    assert blocked_now(entries, 0.0) == entries[:3]
    assert blocked_now([], 0.0) == []


# ---- attempt targets --------------------------------------------------------------------------


def test_a_blocked_zone_is_left_out_but_not_its_neighbours() -> None:
    d = doc((spot("r1", "z1"), spot("r1", "z2"), spot("r2", "z1b")))
    found = attempt_targets(d, "spot", blocked=[block("r1", "z1")])
    assert found == [spot("r1", "z2"), spot("r2", "z1b")]


def test_an_entry_without_zone_blocks_its_whole_region() -> None:
    d = doc((spot("r1", "z1"), spot("r1", "z2"), spot("r2", "z3")))
    assert attempt_targets(d, "spot", blocked=[block("r1", None)]) == [spot("r2", "z3")]


def test_an_entry_of_another_provider_blocks_nothing() -> None:
    d = doc((spot("r1", "z1"),))
    assert attempt_targets(d, "spot", blocked=[block("r1", "z1", provider="sim")]) == list(d.spot)


def test_every_target_blocked_gives_none() -> None:
    d = doc((spot("r1", "z1"),), (od("r1"),))
    assert attempt_targets(d, "spot", blocked=[block("r1", None)]) == []
    # the on-demand targets have no zone: the region entry blocks them too
    assert attempt_targets(d, "on_demand", blocked=[block("r1", None)]) == []


REGIONS = (spot("r1", "a"), spot("r2", "b"), spot("r1", "c"), spot("r3", "d"))


def test_same_region_puts_the_last_region_first() -> None:
    d = doc(REGIONS, strategy="same_region")
    found = attempt_targets(d, "spot", last=spot("r1", "x"))
    assert [t.zone for t in found] == ["a", "c", "b", "d"]


@pytest.mark.parametrize("strategy", ["next_region", "on_demand_fallback"])
def test_other_strategies_put_the_last_region_last(strategy: str) -> None:
    d = doc(REGIONS, strategy=strategy)
    found = attempt_targets(d, "spot", last=spot("r1", "x"))
    assert [t.zone for t in found] == ["b", "d", "a", "c"]


def test_without_a_last_attempt_the_ranking_is_kept() -> None:
    d = doc(REGIONS, strategy="same_region")
    assert attempt_targets(d, "spot") == list(REGIONS)


def test_the_last_region_of_another_provider_is_not_the_same_region() -> None:
    d = doc(REGIONS, strategy="same_region")
    other = dataclasses.replace(spot("r2", "x"), provider="sim")
    assert attempt_targets(d, "spot", last=other) == list(REGIONS)


def test_a_spot_price_above_max_spot_price_is_left_out() -> None:
    d = doc((spot("r1", "z1"), spot("r2", "z2")), (od("r1"),), max_spot_price=5.0)
    prices = {"r1": 6.0, "r2": 5.0}
    found = attempt_targets(d, "spot", spot_price=lambda t: prices[str(t.region)])
    assert found == [dataclasses.replace(spot("r2", "z2"), price_per_hour=5.0)]


def test_a_spot_price_above_the_ratio_of_on_demand_is_left_out() -> None:
    d = doc((spot("r1", "z1"), spot("r2", "z2")), (od("r1", 10.0), od("r2", 20.0)),
            spot_price_ratio=0.5)  # fmt: skip
    found = attempt_targets(d, "spot", spot_price=lambda t: 7.0)
    # r1: 7 > 0.5 × 10 (out); r2: 7 ≤ 0.5 × 20 (kept, at the current price)
    assert found == [dataclasses.replace(spot("r2", "z2"), price_per_hour=7.0)]


def test_an_accepted_spot_price_replaces_the_price_without_limits() -> None:
    d = doc((spot("r1", "z1", price=4.0),))
    found = attempt_targets(d, "spot", spot_price=lambda t: 99.0)
    assert [t.price_per_hour for t in found] == [99.0]


def test_an_unknown_spot_price_keeps_the_target_as_planned() -> None:
    d = doc((spot("r1", "z1", price=4.0),), max_spot_price=1.0)
    assert attempt_targets(d, "spot", spot_price=lambda t: None) == list(d.spot)


def test_on_demand_targets_never_ask_the_spot_price() -> None:
    asked: list[LaunchTarget] = []

    def price(t: LaunchTarget) -> float:
        asked.append(t)
        return 1e9

    d = doc((spot("r1"),), (od("r1"), od("r2")), max_spot_price=1.0)
    assert attempt_targets(d, "on_demand", spot_price=price) == list(d.on_demand)
    assert asked == []
