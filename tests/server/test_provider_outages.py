"""Provider API outages are persisted for ``gpulease sla``: the server's call wrapper
(``count_calls`` + ``ProviderCalls``) tells :class:`ProviderOutages`, which opens a row at the
first ``ProviderUnavailable``, advances it while calls fail, closes it at the first answer (a
``CapacityError`` included), and a row a dead server left open is closed at its last sighting.
A provider double whose API goes down and up; real SQLite; a virtual clock."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import cast

import pytest
from sqlalchemy import Engine, select

from gpulease.clock import VirtualClock
from gpulease.cost.sla import report
from gpulease.providers.base import CapacityError, Instance, Provider, ProviderUnavailable
from gpulease.server.provider_calls import ProviderCalls, count_calls
from gpulease.server.provider_outages import WRITE_EVERY_S, ProviderOutages
from gpulease.state import make_engine, session_scope
from gpulease.state.models import LedgerEntry, ProviderOutage
from tests.dbfixtures import sqlite_template  # noqa: F401 - a fixture

T0 = 1_793_491_200.0  # 2026-11-01 00:00 UTC


@pytest.fixture
def engine(sqlite_template: Path, tmp_path: Path) -> Iterator[Engine]:  # noqa: F811
    path = tmp_path / "state.db"
    shutil.copyfile(sqlite_template, path)
    eng = make_engine(f"sqlite:///{path}")
    yield eng
    eng.dispose()


class FlakyApi:
    """The provider's API: down while ``down`` is set, out of capacity while ``full`` is."""

    def __init__(self) -> None:
        self.down = False
        self.full = False

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        if self.down:
            raise ProviderUnavailable("503 Service Unavailable")
        if self.full:
            raise CapacityError("no capacity")
        return []


def rows(engine: Engine) -> list[tuple[float, float, float | None, int, str]]:
    with session_scope(engine) as s:
        found = s.scalars(select(ProviderOutage).order_by(ProviderOutage.id))
        return [(o.started_at, o.last_seen_at, o.ended_at, o.errors, o.last_error) for o in found]


def call(api: FlakyApi) -> None:
    with contextlib.suppress(ProviderUnavailable, CapacityError):
        api.list_instances({})


def test_an_outage_is_opened_advanced_closed_and_counted_by_sla(engine: Engine) -> None:
    clock = VirtualClock(T0)
    outages = ProviderOutages(engine, clock)
    api = FlakyApi()
    count_calls(cast("dict[str, Provider]", {"aws": api}), ProviderCalls(watchers=(outages,)))
    call(api)
    assert rows(engine) == []  # answers cost no write
    api.down = True
    for _ in range(4):  # 4 failures over 15 s: one insert, one advance
        call(api)
        clock.advance(5)
    assert rows(engine) == [(T0, T0 + WRITE_EVERY_S, None, 3, rows(engine)[0][4])]
    clock.advance(20 * 60)
    api.down, api.full = False, True  # the API answers, with an error of its own
    call(api)
    ((start, seen, ended, errors, last),) = rows(engine)
    assert (start, seen, ended, errors) == (T0, T0 + 1220, T0 + 1220, 4)
    assert last == "ProviderUnavailable: 503 Service Unavailable"
    extra = {"run_started_at": T0 - 3600} if hasattr(LedgerEntry, "run_started_at") else {}
    with session_scope(engine) as s:  # a node ran through it: the SLA counts the whole outage
        s.add(LedgerEntry(entry_key="n1", kind="instance", node_id=1, cluster_id=1, user="me",
                          provider="aws", region="us-east-1", gpu_count=1, pricing="on_demand",
                          price_per_hour=6.0, billing="second:60", started_at=T0 - 3600,
                          ended_at=T0 + 7200, closed=True, billed_s=10800, cost_usd=18.0,
                          created_at=T0, updated_at=T0, **extra))  # fmt: skip
    config = {"sla": {"aws": {"promise": 99.99, "api_window_minutes": 15,
                              "credit": {"per_outage_hour": 10}}}}  # fmt: skip
    with session_scope(engine) as s:
        view = report(s, config, month="2026-11", now=T0 + 86400)
    (breach,) = view["breaches"]
    assert (breach["kind"], breach["start"], breach["end"]) == ("api_outage", T0, T0 + 1220)
    assert round(view["credit_usd"], 2) == round(10 * 6.0 * 1220 / 3600, 2) == 20.33


def test_a_row_left_open_by_a_dead_server_ends_at_its_last_sighting(engine: Engine) -> None:
    clock = VirtualClock(T0)
    api = FlakyApi()
    count_calls(cast("dict[str, Provider]", {"aws": api}),
                ProviderCalls(watchers=(ProviderOutages(engine, clock),)))  # fmt: skip
    api.down = True
    for _ in range(3):
        call(api)
        clock.advance(10)
    assert rows(engine)[0][2] is None  # the server dies here
    clock.advance(3600)
    restarted = ProviderOutages(engine, clock)
    assert restarted.close_stale() == 1
    assert restarted.open_rows() == []
    assert rows(engine)[0][:3] == (T0, T0 + 20, T0 + 20)
