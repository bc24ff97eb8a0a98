"""Database fixtures shared by every test package that touches the state DB: each such test runs
on SQLite and on a real PostgreSQL server this test session starts itself.

- ``postgres_server`` (session): started here (tests/state/postgres.py), stopped at the end; the
  PostgreSQL params are skipped, with one line naming the Debian package or the driver, when
  the server binaries or the driver are missing (``tests/components.py``; under ``CI=true``
  they fail instead, and as root a failed start fails loudly). Under pytest-xdist each worker
  starts its own.
- ``postgres_url`` (session): the session's migrated database; ``fresh_postgres_url``: a new,
  empty, migrated database per test (for a server process of its own).
- ``engine`` (function, params sqlite / postgresql): a migrated, empty database — a copy of a
  migrated SQLite template, or the session's PostgreSQL database with every table truncated.

Import the fixtures a conftest needs from here (``from tests.dbfixtures import engine, ...``).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from gpulease.state import make_engine, upgrade
from gpulease.state.models import Base
from tests.components import require, unavailable
from tests.state.postgres import PostgresServer, new_server, unavailable_reason

DB_KINDS = ["sqlite", "postgresql"]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    require("postgresql")
    reason = unavailable_reason()
    if reason is not None:
        unavailable(f"PostgreSQL tests skipped: {reason}")
    server = new_server(os.environ.get("PYTEST_XDIST_WORKER", "main"))
    try:
        server.start()
    except RuntimeError as exc:
        server.stop()
        if os.geteuid() == 0:  # CI runs as root and must run these: fail loudly
            raise
        pytest.skip(f"PostgreSQL tests skipped: could not start a server: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The session's migrated PostgreSQL database."""
    url = postgres_server.create_database("gpulease_test")
    engine = make_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    yield url


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file that each test copies."""
    path = tmp_path_factory.mktemp("template") / "state.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    engine.dispose()  # the last connection checkpoints the WAL into the file
    return path


def _truncate_all(engine: Engine) -> None:
    tables = ", ".join(table.name for table in Base.metadata.sorted_tables)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))


@pytest.fixture(params=DB_KINDS)
def db_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def engine(db_kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if db_kind == "sqlite":
        path = tmp_path / "state.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        eng = make_engine(f"sqlite:///{path}", busy_timeout_s=10)
    else:
        eng = make_engine(request.getfixturevalue("postgres_url"))
        _truncate_all(eng)
    try:
        yield eng
    finally:
        eng.dispose()


@pytest.fixture
def fresh_postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A new migrated PostgreSQL database for one test, dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    url = postgres_server.create_database(name)
    engine = make_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    try:
        yield url
    finally:
        postgres_server.drop_database(name)
