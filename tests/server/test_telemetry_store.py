"""The telemetry store on SQLite and a real PostgreSQL: the fold of a bucket's samples (means,
last-value counters, the throttle union, generic pass-through of ``train`` / ``peers``), the
upsert that makes re-folding a bucket idempotent, retention pruning and the relay's resume
points; and the ``server.telemetry`` config's checks. Injected times only."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Engine, func, select

from gpulease.errors import UserInputError
from gpulease.server.telemetry.fold import bucket_start, fold
from gpulease.server.telemetry.settings import parse_duration, telemetry_settings
from gpulease.server.telemetry.store import (
    PointRow,
    prune,
    read_points,
    resume_points,
    upsert_points,
)
from gpulease.state import session_scope
from gpulease.state.models import TelemetryPoint
from tests.dbfixtures import db_kind, engine, postgres_server, postgres_url, sqlite_template

__all__ = ["db_kind", "engine", "postgres_server", "postgres_url", "sqlite_template"]

T0 = 1_700_000_000.0


def sample(at: float, util: float, *, ecc: int = 0, throttle: tuple[str, ...] = (),
           step: int | None = None, rtt: float | None = None) -> dict[str, Any]:  # fmt: skip
    gpu = {"index": 0, "name": "T4", "utilization_pct": util, "memory_used_mb": util * 10,
           "memory_total_mb": 16000.0, "power_w": None, "throttle_reasons": list(throttle),
           "ecc_errors_corrected": ecc, "xid_errors": None}  # fmt: skip
    data: dict[str, Any] = {
        "at": at,
        "node": {"cpu_pct": util / 2, "cpu_count": 4, "net_recv_bps": None},
        "gpus": [gpu, {**gpu, "index": 1, "utilization_pct": 100 - util}],
        "gpu_source": "fake",
    }
    if step is not None:
        data["train"] = {"step": step, "samples_per_s": float(step), "mfu": None}
        data["peers"] = [{"node_rank": 1, "rtt_s": rtt}]
    return data


def test_a_bucket_folds_to_means_last_counters_and_a_throttle_union() -> None:
    folded = fold([
        sample(T0, 20, ecc=1, throttle=("sw_thermal",), step=5, rtt=0.002),
        sample(T0 + 5, 60, ecc=3, throttle=("hw_slowdown", "sw_thermal"), step=7, rtt=None),
    ])  # fmt: skip
    gpu0, gpu1 = folded["gpus"]
    assert (gpu0["index"], gpu1["index"]) == (0, 1)
    assert gpu0["utilization_pct"] == 40.0 and gpu1["utilization_pct"] == 60.0
    assert gpu0["memory_used_mb"] == 400.0 and gpu0["power_w"] is None
    assert gpu0["ecc_errors_corrected"] == 3  # a counter: the last value
    assert gpu0["throttle_reasons"] == ["sw_thermal", "hw_slowdown"]
    assert gpu0["name"] == "T4"
    assert folded["node"] == {"cpu_pct": 20.0, "cpu_count": 4, "net_recv_bps": None}
    assert folded["train"] == {"step": 7, "samples_per_s": 6.0, "mfu": None}
    assert folded["peers"] == [{"node_rank": 1, "rtt_s": 0.002}]
    assert "at" not in folded and folded["gpu_source"] == "fake"


def test_a_sample_without_train_or_peers_folds_with_ones_that_have_them() -> None:
    folded = fold([sample(T0, 10), sample(T0 + 1, 30, step=2, rtt=0.5)])
    assert folded["train"]["step"] == 2 and folded["peers"][0]["rtt_s"] == 0.5
    assert fold([sample(T0, 10)]).get("train") is None


@given(st.lists(st.floats(0, 100), min_size=1, max_size=20), st.integers(0, 10))
def test_folding_is_a_function_of_the_samples_alone(utils: list[float], cut: int) -> None:
    samples = [sample(T0 + i, u) for i, u in enumerate(utils)]
    once = fold(samples)
    assert fold(list(samples)) == once  # folding the same bucket again: the same record
    mean = sum(utils) / len(utils)
    assert once["gpus"][0]["utilization_pct"] == pytest.approx(mean)
    assert bucket_start(T0 + cut + 0.5, 10) == T0 + (cut // 10) * 10


def _row(at: float, samples: list[dict[str, Any]], *, cluster_id: int = 1, rank: int = 0,
         resolution: int = 10, job_id: int | None = None) -> PointRow:  # fmt: skip
    return PointRow(cluster_id, "c1", job_id, rank, resolution, bucket_start(at, resolution),
                    len(samples), fold(samples))  # fmt: skip


def _points(engine: Engine) -> list[tuple[int, int, float, int, float]]:
    with session_scope(engine) as session:
        rows = session.scalars(select(TelemetryPoint).order_by(TelemetryPoint.id))
        return [(p.node_rank, p.resolution_s, p.at, p.samples,
                 p.data["gpus"][0]["utilization_pct"]) for p in rows]  # fmt: skip


def test_re_folding_a_bucket_replaces_its_row(engine: Engine) -> None:
    first = [sample(T0, 10), sample(T0 + 2, 30)]
    more = [*first, sample(T0 + 4, 50)]
    with session_scope(engine) as session:
        upsert_points(session, [_row(T0, first), _row(T0, first, resolution=60)])
    with session_scope(engine) as session:  # the same bucket, folded from more samples
        upsert_points(session, [_row(T0, more), _row(T0, more, resolution=60)])
    with session_scope(engine) as session:  # and once more (a retried pass): no change
        upsert_points(session, [_row(T0, more), _row(T0, more, resolution=60)])
    assert _points(engine) == [(0, 10, T0, 3, 30.0), (0, 60, T0 - 20, 3, 30.0)]


def test_retention_prunes_each_resolution_by_its_own_age(engine: Engine) -> None:
    now = T0 + 7200
    rows = [_row(at, [sample(at, 1)], resolution=res)
            for at in (T0, now - 1800) for res in (10, 60)]  # fmt: skip
    with session_scope(engine) as session:
        upsert_points(session, rows)
    with session_scope(engine) as session:
        assert prune(session, {10: 3600.0, 60: 90 * 86400.0}, now) == 1
    kept = [(res, at) for _r, res, at, _n, _u in _points(engine)]
    assert sorted(kept) == sorted([(60, T0 - 20), (10, now - 1800), (60, now - 1800 - 20)])


def test_resume_points_and_reads_are_per_node(engine: Engine) -> None:
    rows = [_row(T0 + dt, [sample(T0 + dt, rank * 10)], rank=rank, resolution=res, job_id=4)
            for rank in (0, 1) for dt in (0, 70) for res in (10, 60)]  # fmt: skip
    rows.append(_row(T0, [sample(T0, 1)], cluster_id=2))
    with session_scope(engine) as session:
        upsert_points(session, rows)
    with session_scope(engine) as session:
        resume = resume_points(session, [1, 2], 60)
        recent = read_points(session, resolution_s=10, since=T0 + 60, cluster_ids=[1])
        of_job = read_points(session, resolution_s=60, since=0, job_id=4)
        total = session.scalar(select(func.count()).select_from(TelemetryPoint))
    assert resume == {(1, 0): T0 + 40, (1, 1): T0 + 40}  # cluster 2 has no 60 s point
    assert [(p.node_rank, p.at) for p in recent] == [(0, T0 + 70), (1, T0 + 70)]
    assert [(p.node_rank, p.at) for p in of_job] == [(0, T0 - 20), (0, T0 + 40), (1, T0 - 20),
                                                     (1, T0 + 40)]  # fmt: skip
    assert total == 9


def test_the_config_section_is_checked_and_names_the_key() -> None:
    default = telemetry_settings({})
    assert default.interval_s == 10.0 and dict(default.retention_s) == {10: 3600.0, 60: 7776000.0}
    chosen = telemetry_settings(
        {"server": {"telemetry": {"interval_s": 2, "retention": {"10s": "30m", "1m": 86400}}}}
    )
    assert chosen.interval_s == 2.0 and dict(chosen.retention_s) == {10: 1800.0, 60: 86400.0}
    bad = [
        ({"interval_s": 0}, "server.telemetry.interval_s"),
        ({"interval_s": "fast"}, "server.telemetry.interval_s"),
        ({"retention": {"5s": "1h"}}, "server.telemetry.retention.5s"),
        ({"retention": {"10s": "forever"}}, "server.telemetry.retention.10s"),
        ({"retention": ["1h"]}, "server.telemetry.retention"),
        ({"every": 3}, "server.telemetry.every"),
        ("often", "server.telemetry"),
    ]
    for section, key in bad:
        with pytest.raises(UserInputError, match=f"^{key}: "):
            telemetry_settings({"server": {"telemetry": section}})
    assert parse_duration("1.5h", "x") == 5400.0 and parse_duration(" 2w ", "x") == 1209600.0
