"""Engines and sessions of the state DB: which database, how it is opened, how a unit of work runs.

Owns :func:`database_url` (``$GPULEASE_DB_URL`` or SQLite at ``<home>/state.db``),
:func:`make_engine` (SQLite in WAL mode with foreign keys and a busy timeout, so the server and the
CLI can open the file at once; PostgreSQL through psycopg 3), :func:`session_scope` (commit or roll
back; lock and connection errors become :class:`DatabaseBusy`, a ``Retryable``) and
:func:`open_database` (engine + migrations). Moves no states.

SQLite keeps the driver's default transaction handling: a transaction begins at the first write,
so plain reads take no lock and two writers serialise on the database lock (waiting up to the busy
timeout). Races are therefore decided by compare-and-set writes, never by what a session read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from gpulease import config
from gpulease.errors import Retryable, UserInputError

ENV_DB_URL = "GPULEASE_DB_URL"
DEFAULT_BUSY_TIMEOUT_S = 30.0

_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
# serialization failure, deadlock, lock not available, admin shutdown, cannot connect now
_PG_RETRYABLE = {"40001", "40P01", "55P03", "57P01", "57P03"}


class DatabaseBusy(Retryable):
    """The database is locked, in a serialization conflict or unreachable: try again."""


def database_url() -> str:
    """``$GPULEASE_DB_URL`` when set, else SQLite at ``<gpulease home>/state.db`` (the home
    directory is created, readable by its owner only)."""
    url = os.environ.get(ENV_DB_URL, "").strip()
    if url:
        return url
    home = config.home()
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    return f"sqlite:///{home / 'state.db'}"


def _normalise(url: str | URL) -> URL:
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend in {"postgresql", "postgres"}:
        return parsed.set(drivername="postgresql+psycopg")
    if backend == "sqlite":
        return parsed
    raise UserInputError(
        f"{ENV_DB_URL}: unsupported database {parsed.drivername!r}; use sqlite:///PATH or "
        "postgresql://USER@HOST/DB"
    )


def make_engine(url: str | URL, *, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> Engine:
    """An engine for ``url`` (``sqlite:///…`` or ``postgresql://…``; the psycopg 3 driver is used
    for PostgreSQL). A SQLite file's directory is created."""
    parsed = _normalise(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, busy_timeout_s)
    try:
        return create_engine(parsed, pool_pre_ping=True)
    except ModuleNotFoundError:
        raise UserInputError(
            "PostgreSQL needs the psycopg driver: pip install 'gpulease[postgres]'"
        ) from None


def _sqlite_engine(url: URL, busy_timeout_s: float) -> Engine:
    database = url.database or ""
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": busy_timeout_s})
    busy_ms = int(busy_timeout_s * 1000)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    return engine


def is_retryable_db_error(exc: BaseException) -> bool:
    """Whether a driver error is a lock, serialization or connection failure (by error code)."""
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    sqlite_code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(sqlite_code, int):
        return sqlite_code & 0xFF in {_SQLITE_BUSY, _SQLITE_LOCKED}
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str):
        return sqlstate in _PG_RETRYABLE or sqlstate.startswith("08")
    return False


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """One unit of work: commits when the block ends, rolls back when it raises.

    Objects stay usable after the commit (``expire_on_commit=False``). A lock, serialization or
    connection error is raised as :class:`DatabaseBusy` (``Retryable``)."""
    session = Session(engine, expire_on_commit=False)
    try:
        yield session
        session.commit()
    except DBAPIError as exc:
        session.rollback()
        if is_retryable_db_error(exc):
            raise DatabaseBusy(f"state DB busy: {type(exc.orig).__name__}", delay=0.2) from exc
        raise
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def open_database(url: str | None = None) -> Engine:
    """The engine of the state DB (``url`` or :func:`database_url`), migrated to the latest
    schema. What the server and the CLI call."""
    from gpulease.state.migrate import upgrade

    engine = make_engine(url or database_url())
    upgrade(engine)
    return engine
