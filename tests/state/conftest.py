"""Fixtures of the state tests: every DB test runs on SQLite and on a real PostgreSQL server.

- ``postgres_server`` (session): a server this test session starts itself (tests/state/postgres.py)
  and stops at the end; the PostgreSQL params are skipped, with the reason, when the binaries or
  the driver are missing. Under pytest-xdist each worker starts its own.
- ``engine`` (function, params sqlite / postgresql): a migrated, empty database — a copy of a
  migrated SQLite template, or the session's PostgreSQL database with every table truncated.
- ``empty_engine`` (function, same params): a database with no tables (migration tests).
- ``clock``: a :class:`~gpulease.clock.VirtualClock`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from gpulease.clock import VirtualClock
from gpulease.state import make_engine
from tests.dbfixtures import (
    db_kind,
    engine,
    postgres_server,
    postgres_url,
    sqlite_template,
)
from tests.state.postgres import PostgresServer


@pytest.fixture
def empty_engine(db_kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if db_kind == "sqlite":
        eng = make_engine(f"sqlite:///{tmp_path / 'empty.db'}")
        try:
            yield eng
        finally:
            eng.dispose()
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    name = f"empty_{uuid.uuid4().hex[:12]}"
    eng = make_engine(server.create_database(name))
    try:
        yield eng
    finally:
        eng.dispose()
        server.drop_database(name)


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()
