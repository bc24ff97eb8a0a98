"""Engines and sessions: which database, SQLite settings for concurrent use, commit/rollback, and
lock errors surfacing as Retryable by error code."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError

from gpulease.clock import VirtualClock
from gpulease.errors import Retryable, UserInputError
from gpulease.state import (
    DatabaseBusy,
    current_revision,
    database_url,
    get_cluster,
    head_revision,
    make_engine,
    open_database,
    session_scope,
)
from gpulease.state.db import is_retryable_db_error
from gpulease.state.models import Node
from tests.state.helpers import new_cluster


def test_database_url_prefers_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPULEASE_DB_URL", "postgresql://u@db.example/gpulease")
    assert database_url() == "postgresql://u@db.example/gpulease"


def test_database_url_defaults_to_sqlite_in_a_private_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    home = tmp_path / "home" / ".gpulease"
    monkeypatch.delenv("GPULEASE_DB_URL", raising=False)
    monkeypatch.setenv("GPULEASE_HOME", str(home))
    assert database_url() == f"sqlite:///{home / 'state.db'}"
    assert home.is_dir() and stat.S_IMODE(home.stat().st_mode) == 0o700


def test_open_database_creates_and_migrates_the_default_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("GPULEASE_DB_URL", raising=False)
    monkeypatch.setenv("GPULEASE_HOME", str(tmp_path / "h"))
    engine = open_database()
    try:
        assert current_revision(engine) == head_revision()
        assert (tmp_path / "h" / "state.db").exists()
    finally:
        engine.dispose()


def test_sqlite_is_set_up_for_concurrent_use(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'sub' / 'state.db'}", busy_timeout_s=7)
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 7000
    finally:
        engine.dispose()


def test_postgresql_urls_use_psycopg_and_others_are_refused() -> None:
    pytest.importorskip("psycopg")
    for url in ("postgresql://u@h/db", "postgres://u@h/db", "postgresql+psycopg://u@h/db"):
        engine = make_engine(url)
        assert engine.dialect.driver == "psycopg"
        engine.dispose()
    with pytest.raises(UserInputError, match="unsupported database"):
        make_engine("mysql://u@h/db")


def test_session_scope_commits_and_rolls_back(engine: Engine, clock: VirtualClock) -> None:
    cluster_id, _ = new_cluster(engine, clock)
    with pytest.raises(ZeroDivisionError), session_scope(engine) as session:
        cluster = get_cluster(session, cluster_id)
        assert cluster is not None
        cluster.autostop_minutes = 7
        session.flush()
        _ = 1 / 0
    with session_scope(engine) as session:
        cluster = get_cluster(session, cluster_id)
        assert cluster is not None and cluster.autostop_minutes is None
        cluster.autostop_minutes = 9
    with session_scope(engine) as session:
        cluster = get_cluster(session, cluster_id)
        assert cluster is not None and cluster.autostop_minutes == 9


def test_foreign_keys_are_enforced(engine: Engine) -> None:
    with pytest.raises(IntegrityError), session_scope(engine) as session:
        session.add(
            Node(
                cluster_id=4242,
                node_rank=0,
                instance_id="i",
                provider="p",
                state="ready",
                status_changed_at=0.0,
                missed_heartbeats=0,
                created_at=0.0,
                updated_at=0.0,
            )
        )


def test_a_locked_database_raises_database_busy(engine: Engine, clock: VirtualClock) -> None:
    cluster_id, _ = new_cluster(engine, clock)
    waiter = make_engine(engine.url, busy_timeout_s=0.2)
    try:
        with engine.connect() as holder:
            holder.execute(
                text("UPDATE clusters SET autostop_minutes = 1 WHERE id = :id"), {"id": cluster_id}
            )
            with pytest.raises(DatabaseBusy) as info, session_scope(waiter) as session:
                if waiter.dialect.name == "postgresql":
                    session.execute(text("SET LOCAL lock_timeout = '200ms'"))
                session.execute(
                    text("UPDATE clusters SET autostop_minutes = 2 WHERE id = :id"),
                    {"id": cluster_id},
                )
            holder.rollback()
    finally:
        waiter.dispose()
    assert isinstance(info.value, Retryable) and info.value.delay > 0
    assert is_retryable_db_error(info.value.__cause__)


def test_integrity_errors_are_not_retryable(engine: Engine, clock: VirtualClock) -> None:
    with pytest.raises(IntegrityError) as info, session_scope(engine) as session:
        session.execute(
            text("INSERT INTO server_identity (id, owner_id, created_at) VALUES (1, 'a', 0)")
        )
        session.execute(
            text("INSERT INTO server_identity (id, owner_id, created_at) VALUES (1, 'b', 0)")
        )
    assert not is_retryable_db_error(info.value)
    assert not is_retryable_db_error(ValueError("x"))
