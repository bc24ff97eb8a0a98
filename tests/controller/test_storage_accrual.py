"""The checkpoint stores' ``storage`` rows, on a real DB in virtual time, over real stores (a
local directory; one S3 prefix on a real moto server process): a measurement opens the row, a
new byte count splits it at the measurement's instant, an emptied store stops billing, a server
down for an hour bills that hour once, a restart goes on with the open row, a price of 0 writes
nothing, a failed measurement is retried with the row going on — and the rows reach the job's
spend and the cost report by job and by task."""

from __future__ import annotations

import logging
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from gpulease.clock import VirtualClock
from gpulease.controller.storage_accrual import StorageAccrual, measure_store, normal_url
from gpulease.cost.report import cost_report
from gpulease.errors import Retryable
from gpulease.state import create_job, entry_subject, session_scope
from gpulease.state.ledger import job_spend
from gpulease.state.models import LedgerEntry
from gpulease.storage import LocalStore, S3Store
from gpulease.storage.pricing import StoragePricing
from tests.awsfixtures import aws_env, moto_server, s3_env  # noqa: F401 - fixtures

MB = 1_000_000
# 730,000 $/GB-month is 1,000 $/h per GB: 1 MB (0.001 GB) costs $1 an hour
PRICE = 730_000.0
HOUR = 3600.0


def _pricing(local: float = PRICE, s3: float = 0.0, every: float = HOUR) -> StoragePricing:
    return StoragePricing({"local": local, "s3": s3}, measure_every_s=every)


def _accrual(
    engine: Engine,
    clock: VirtualClock,
    pricing: StoragePricing | None = None,
    measure: Callable[[str], int] = measure_store,
) -> StorageAccrual:
    return StorageAccrual(engine, pricing or _pricing(), clock, user="alice", measure=measure,
                          rng=random.Random(7))  # fmt: skip


def _job(
    engine: Engine, clock: VirtualClock, store: str, name: str = "train", job_id: int | None = None
) -> int:
    task = {"task_id": f"{name}-x", "spec": {"name": name}, "checkpoint": {"store": store}}
    with session_scope(engine) as session:
        job = create_job(session, name=name, task=task, owner="gl-test", actor="test",
                         now=clock.now())  # fmt: skip
        if job_id is not None:  # an id taken earlier, committed only now
            job.id = job_id
            session.flush()
        return job.id


def _settle(accrual: StorageAccrual) -> None:
    """A pass that submits the due measurements, their end, and the pass that applies them."""
    accrual.run()
    accrual.wait_idle(30)
    accrual.run()


def _rows(engine: Engine) -> list[LedgerEntry]:
    with session_scope(engine) as session:
        rows = list(session.scalars(select(LedgerEntry).order_by(LedgerEntry.id)))
        session.expunge_all()
        return rows


def _fill(root: Path, step: int, size: int) -> None:
    LocalStore(root).write(step, {"model.pt": b"w" * size})


def _store(tmp_path: Path, size: int = MB - 2000) -> tuple[Path, str]:
    """A local store of exactly ``MB`` bytes (a step with its manifest, and a pad file)."""
    root = tmp_path / "ckpt"
    _fill(root, 1, size)
    pad = MB - LocalStore(root).total_bytes()
    (root / "step-1" / "pad.bin").write_bytes(b"p" * pad)  # an extra file counts too
    assert LocalStore(root).total_bytes() == MB
    return root, f"local://{root}"


def test_a_store_bills_its_measured_bytes_and_splits_when_they_change(
    engine: Engine, clock: VirtualClock, tmp_path: Path
) -> None:
    root, url = _store(tmp_path)
    jid = _job(engine, clock, url)
    accrual = _accrual(engine, clock)
    t0 = clock.now()
    _settle(accrual)
    (row,) = _rows(engine)
    assert (row.kind, entry_subject(row.entry_key)) == ("storage", url)
    assert (row.started_at, row.quantity, row.price_per_hour) == (t0, 0.001, pytest.approx(1.0))
    assert (row.job_id, row.task_name, row.user, row.provider) == (jid, "train", "alice", "local")
    assert (row.pricing, row.billing, row.closed) == ("on_demand", "second", False)
    clock.advance(1800)
    accrual.run()  # not due yet: the row only moves on
    (row,) = _rows(engine)
    assert round(row.cost_usd, 2) == 0.50 and row.ended_at == t0 + 1800
    (root / "step-1" / "more.bin").write_bytes(b"m" * MB)  # 2 MB now
    clock.advance(1800)
    accrual.run()  # due: the measurement at t0 + 1 h is submitted
    accrual.wait_idle(30)
    clock.advance(10)
    accrual.run()  # applied: split at the measurement's instant
    first, second = _rows(engine)
    assert first.closed and first.ended_at == t0 + HOUR and round(first.cost_usd, 2) == 1.00
    assert (second.started_at, second.quantity, second.closed) == (t0 + HOUR, 0.002, False)
    assert second.price_per_hour == pytest.approx(2.0)
    assert second.cost_usd == pytest.approx(2.0 * 10 / HOUR)
    with session_scope(engine) as session:
        assert job_spend(session, jid) == pytest.approx(1.0 + 2.0 * 10 / HOUR)


def test_an_emptied_store_stops_billing_at_the_measurement(
    engine: Engine, clock: VirtualClock, tmp_path: Path
) -> None:
    root, url = _store(tmp_path)
    _job(engine, clock, url)
    accrual = _accrual(engine, clock, _pricing(every=600))
    t0 = clock.now()
    _settle(accrual)
    shutil.rmtree(root)  # the checkpoints deleted: a missing root holds 0 bytes
    clock.advance(600)
    _settle(accrual)
    (row,) = _rows(engine)
    assert row.closed and row.ended_at == t0 + 600
    assert round(row.cost_usd, 2) == round(600 / HOUR, 2)
    for _ in range(3):  # an hour more, measured empty each time: not a cent more
        clock.advance(1200)
        _settle(accrual)
    assert [(r.ended_at, r.cost_usd) for r in _rows(engine)] == [(row.ended_at, row.cost_usd)]
    _fill(root, 2, MB)  # new checkpoints: billed again from their measurement
    clock.advance(600)
    _settle(accrual)
    assert [r.closed for r in _rows(engine)] == [True, False]


def test_a_server_down_for_an_hour_bills_it_once_and_a_restart_goes_on_with_the_row(
    engine: Engine, clock: VirtualClock, tmp_path: Path
) -> None:
    _root, url = _store(tmp_path)
    _job(engine, clock, url)
    t0 = clock.now()
    _settle(_accrual(engine, clock))
    clock.advance(HOUR)  # no pass for an hour, then a new server
    fresh = _accrual(engine, clock)
    fresh.run()  # the open row found again and advanced to now
    (row,) = _rows(engine)
    assert (row.ended_at, round(row.cost_usd, 2)) == (t0 + HOUR, 1.00)
    fresh.run()  # the same instant again: nothing more
    fresh.wait_idle(30)
    fresh.run()  # the same bytes measured: the row goes on, no split
    assert [(r.ended_at, r.cost_usd, r.closed) for r in _rows(engine)] == [
        (row.ended_at, row.cost_usd, False)
    ]
    clock.advance(60)
    fresh.run()
    (row,) = _rows(engine)
    assert row.ended_at == t0 + HOUR + 60 and row.cost_usd == pytest.approx(1.0 + 60 / HOUR)


def test_a_price_of_zero_measures_nothing_and_writes_no_rows(
    engine: Engine, clock: VirtualClock, tmp_path: Path
) -> None:
    _root, url = _store(tmp_path)
    _job(engine, clock, url)
    measured: list[str] = []

    def counted(store: str) -> int:
        measured.append(store)
        return measure_store(store)

    accrual = _accrual(engine, clock, _pricing(local=0.0, s3=0.023), measure=counted)
    for _ in range(3):
        _settle(accrual)
        clock.advance(HOUR)
    assert (_rows(engine), measured) == ([], [])


def test_a_failed_measurement_is_retried_with_backoff_and_logged_once(
    engine: Engine, clock: VirtualClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _root, url = _store(tmp_path)
    _job(engine, clock, url)
    failing = [False]

    def flaky(store: str) -> int:
        if failing[0]:
            raise Retryable(f"{store}: cannot reach the store")
        return measure_store(store)

    accrual = _accrual(engine, clock, _pricing(every=600), measure=flaky)
    t0 = clock.now()
    _settle(accrual)
    failing[0] = True
    caplog.set_level(logging.INFO, "gpulease.controller.storage_accrual")
    for _ in range(4):  # due every 600 s, then retried after each backoff (at most 600 s)
        clock.advance(600)
        _settle(accrual)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and url in warnings[0].getMessage()
    (row,) = _rows(engine)  # the row went on at its measured bytes
    assert (row.closed, row.ended_at) == (False, t0 + 2400)
    failing[0] = False
    clock.advance(600)
    _settle(accrual)
    assert any("measured again" in r.getMessage() for r in caplog.records)
    assert len(_rows(engine)) == 1


def test_a_later_job_on_the_same_store_takes_the_next_row(
    engine: Engine, clock: VirtualClock, tmp_path: Path
) -> None:
    _root, url = _store(tmp_path)
    first = _job(engine, clock, url, name="first")
    accrual = _accrual(engine, clock)
    _settle(accrual)
    clock.advance(60)
    second = _job(engine, clock, str(url.removeprefix("local://")) + "/", name="second")
    accrual.run()
    old, new = _rows(engine)
    assert (old.job_id, old.closed, old.ended_at) == (first, True, new.started_at)
    assert (new.job_id, new.task_name, new.quantity) == (second, "second", 0.001)


def test_a_job_committed_after_a_later_one_is_still_learnt(
    engine: Engine, clock: VirtualClock, tmp_path: Path
) -> None:
    _root, url = _store(tmp_path)
    other = tmp_path / "other"
    _fill(other, 1, MB)
    _job(engine, clock, f"local://{tmp_path / 'empty'}", job_id=50)
    accrual = _accrual(engine, clock)
    _settle(accrual)  # job 50 seen, its store empty
    _job(engine, clock, url, name="late", job_id=45)  # id 45 committed after id 50 was read
    _job(engine, clock, f"local://{other}", name="next", job_id=51)
    _settle(accrual)
    assert sorted((r.job_id, r.task_name) for r in _rows(engine)) == [(45, "late"), (51, "next")]


def test_a_long_store_url_is_keyed_by_its_hash_and_found_again_after_a_restart(
    engine: Engine, clock: VirtualClock, tmp_path: Path
) -> None:
    root = tmp_path.joinpath(*["a-rather-long-directory-name"] * 8)
    _fill(root, 1, MB)
    url = f"local://{root}"
    assert len(url) > 255
    jid = _job(engine, clock, url)
    t0 = clock.now()
    _settle(_accrual(engine, clock))
    (row,) = _rows(engine)
    assert row.entry_key.startswith("storage:sha256:") and len(row.entry_key) < 100
    clock.advance(HOUR)
    _settle(_accrual(engine, clock))  # a new server: the same row goes on
    (row,) = _rows(engine)
    assert (row.job_id, row.closed, row.started_at, row.ended_at) == (jid, False, t0, t0 + HOUR)


def test_storage_rows_reach_the_report_by_job_and_by_task(
    engine: Engine, clock: VirtualClock, tmp_path: Path
) -> None:
    _root, url = _store(tmp_path)
    jid = _job(engine, clock, url, name="llm")
    accrual = _accrual(engine, clock)
    _settle(accrual)
    clock.advance(HOUR)
    accrual.run()
    for by, key in (("job", jid), ("task", "llm")):
        report = cost_report(engine, since="30d", by=by, clock=clock)
        assert report["total"]["by_kind"] == {"storage": pytest.approx(1.0)}
        (group,) = report["breakdown"]
        assert str(group["key"]) == str(key) and group["cost_usd"] == pytest.approx(1.0)


def test_normal_url_spells_one_store_one_way() -> None:
    assert normal_url("/data/ckpt/") == "local:///data/ckpt"
    assert normal_url("s3://bucket/runs/a/") == "s3://bucket/runs/a"
    assert normal_url("local:///") == "local:///"


def test_an_s3_store_bills_the_bytes_uploaded_through_it(
    engine: Engine,
    clock: VirtualClock,
    tmp_path: Path,
    s3_env: str,  # noqa: F811
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.pt").write_bytes(b"w" * 300_000)
    store = S3Store(s3_env, "runs/llm")
    store.upload(3, src)
    S3Store(s3_env, "runs/other").upload(1, src)  # another prefix: not this store's bytes
    size = store.total_bytes()
    assert size > 300_000  # the data and its manifest
    jid = _job(engine, clock, f"s3://{s3_env}/runs/llm")
    _settle(_accrual(engine, clock, _pricing(local=0.0, s3=0.023)))
    (row,) = _rows(engine)
    assert (row.provider, row.job_id, row.region) == ("aws", jid, None)
    assert row.quantity == size / 1e9
    assert row.price_per_hour == pytest.approx(size / 1e9 * 0.023 / 730)
