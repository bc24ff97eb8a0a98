"""Migrations: upgrade from empty works on SQLite and PostgreSQL, the migrated schema equals the
models (autogenerate finds no difference), upgrades are idempotent and safe to race, and the
migrations ship inside the package (no alembic.ini, any working directory)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect

import gpulease.state
from gpulease.state import current_revision, head_revision, upgrade
from gpulease.state.migrate import MIGRATIONS_DIR, _config
from gpulease.state.models import Base

TABLES = {"jobs", "clusters", "nodes", "launch_intents", "status_changes", "server_identity"}


def test_upgrade_from_empty_reaches_head(empty_engine: Engine) -> None:
    assert current_revision(empty_engine) is None
    upgrade(empty_engine)
    assert current_revision(empty_engine) == head_revision()
    assert set(inspect(empty_engine).get_table_names()) == TABLES | {"alembic_version"}


def test_the_migrated_schema_matches_the_models(empty_engine: Engine) -> None:
    upgrade(empty_engine)
    with empty_engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []


def test_upgrade_is_idempotent_and_downgrade_empties(empty_engine: Engine) -> None:
    upgrade(empty_engine)
    upgrade(empty_engine)
    assert current_revision(empty_engine) == head_revision()
    with empty_engine.begin() as conn:
        command.downgrade(_config(conn), "base")
    assert set(inspect(empty_engine).get_table_names()) <= {"alembic_version"}
    upgrade(empty_engine)
    assert current_revision(empty_engine) == head_revision()


def test_two_processes_upgrading_at_once_both_succeed(empty_engine: Engine) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def run() -> None:
        barrier.wait()
        try:
            upgrade(empty_engine)
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert current_revision(empty_engine) == head_revision()


def test_migrations_run_without_alembic_ini_from_any_directory(
    empty_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    upgrade(empty_engine)
    assert current_revision(empty_engine) == head_revision()
    assert not list(Path(gpulease.state.__file__).parent.rglob("alembic.ini"))


def test_the_migrations_are_part_of_the_package() -> None:
    # regular packages (with __init__.py), so every setuptools finder ships them in the wheel
    assert (MIGRATIONS_DIR / "__init__.py").is_file()
    assert (MIGRATIONS_DIR / "versions" / "__init__.py").is_file()
    assert (MIGRATIONS_DIR / "env.py").is_file()
    assert sorted(p.name for p in (MIGRATIONS_DIR / "versions").glob("0*.py")) == [
        "0001_initial.py",
        "0002_jobs.py",
        "0003_task_failure.py",
    ]
    setuptools = pytest.importorskip("setuptools")  # not in every venv (Python >= 3.12)
    src = Path(gpulease.state.__file__).resolve().parents[2]
    for finder in (setuptools.find_packages, setuptools.find_namespace_packages):
        packages = set(finder(str(src)))
        assert {"gpulease.state.migrations", "gpulease.state.migrations.versions"} <= packages
