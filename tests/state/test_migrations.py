"""Migrations: upgrade from empty works on SQLite and PostgreSQL, the migrated schema equals the
models (autogenerate finds no difference), upgrades are idempotent and safe to race, and the
migrations ship inside the package (no alembic.ini, any working directory)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, insert, inspect, text

import gpulease.state
from gpulease.controller.document import LaunchDocument
from gpulease.state import current_revision, head_revision, upgrade
from gpulease.state.migrate import MIGRATIONS_DIR, _config
from gpulease.state.models import Base, LedgerEntry
from gpulease.wire import RunSpec

TABLES = {
    "jobs",
    "clusters",
    "nodes",
    "launch_intents",
    "status_changes",
    "server_identity",
    "telemetry_points",
    "ledger_entries",
    "provider_outages",
    "ledger_days",
    "services",
    "pools",
    "bench_runs",
    "secret_sets",
}


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
        "0003_run_spec.py",
        "0004_job_claims.py",
        "0005_task_failure.py",
        "0006_telemetry.py",
        "0007_ledger.py",
        "0008_sla.py",
        "0009_ledger_days.py",
        "0010_ledger_indexes.py",
        "0011_serving.py",
        "0012_bench_runs.py",
        "0013_secret_sets.py",
    ]
    if importlib.util.find_spec("setuptools") is None:  # not in every venv (Python >= 3.12)
        pytest.skip("setuptools is not installed")
    src = Path(gpulease.state.__file__).resolve().parents[2]
    # setuptools only in a process of its own (not even imported here): it asserts when
    # distutils was imported before it, which an earlier test of the same worker may have done
    probe = ("import json, sys, setuptools as s; print(json.dumps([sorted(f(sys.argv[1])) "
             "for f in (s.find_packages, s.find_namespace_packages)]))")  # fmt: skip
    found = subprocess.run([sys.executable, "-c", probe, str(src)], capture_output=True,
                           text=True, check=True, timeout=60).stdout  # fmt: skip
    for packages in json.loads(found):
        assert {"gpulease.state.migrations", "gpulease.state.migrations.versions"} <= set(packages)


def test_0003_moves_workdir_into_a_typed_run_spec(empty_engine: Engine) -> None:
    """A version 1 launch document and a bare spec written at 0002 come out at head as version
    2 documents whose ``run`` holds what the nodes run, the row's old ``workdir`` included."""
    with empty_engine.begin() as conn:
        command.upgrade(_config(conn), "0002")
    spec = {"name": "ft", "run": "python t.py", "setup": "pip install x", "envs": {"A": 1},
            "file_mounts": {"/data": "/src/data"},
            "resources": {"provider_config": {"aws": {"ami": "ami-1"}}}}  # fmt: skip
    v1 = {"version": 1, "spec": spec, "plans": []}
    insert = text(
        "INSERT INTO clusters (id, name, owner, status, status_changed_at, provider, "
        "gpus_per_node, num_nodes, pricing, task, workdir, autostop_down, failover_history, "
        "created_at, updated_at) VALUES (:id, :name, 'o', 'pending', 0, 'local', 0, 1, "
        "'on_demand', :task, :workdir, false, '[]', 0, 0)"
    )
    with empty_engine.begin() as conn:
        conn.execute(insert, {"id": 1, "name": "a", "task": json.dumps(v1), "workdir": "/w"})
        conn.execute(insert, {"id": 2, "name": "b", "task": json.dumps({"run": "echo"}),
                              "workdir": None})  # fmt: skip
    upgrade(empty_engine)
    with empty_engine.connect() as conn:
        rows = dict(conn.execute(text("SELECT id, task FROM clusters")).all())
    docs = {k: LaunchDocument.from_json(v if isinstance(v, dict) else json.loads(v))
            for k, v in rows.items()}  # fmt: skip
    assert docs[1].run == RunSpec(
        run="python t.py", setup="pip install x", envs={"A": "1"}, workdir="/w",
        file_mounts={"/data": "/src/data"}, provider_config={"aws": {"ami": "ami-1"}},
    )  # fmt: skip
    assert docs[1].spec == spec and docs[2].run == RunSpec(run="echo") and docs[2].plans == ()
    assert "workdir" not in {c["name"] for c in inspect(empty_engine).get_columns("clusters")}


def test_a_ledger_from_before_0009_gets_its_daily_rollup_at_head(empty_engine: Engine) -> None:
    """Migration 0009 creates the rollup empty; the upgrade to head fills it from the rows
    closed before it, with the writer's own SQL (and never twice)."""
    with empty_engine.begin() as conn:
        command.upgrade(_config(conn), "0008")
    row = {"kind": "instance", "user": "u", "provider": "sim", "pricing": "spot",
           "price_per_hour": 3.6, "billing": "second", "gpu_count": 8, "closed": True,
           "created_at": 0.0, "updated_at": 0.0}  # fmt: skip
    closed = [  # one row inside 2026-12-01, one across its midnight; one still open
        {**row, "entry_key": "instance:1:a", "started_at": DAY0 + 3600.0,
         "ended_at": DAY0 + 7200.0, "run_started_at": DAY0 + 3600.0, "billed_s": 3600.0,
         "cost_usd": 3.6},
        {**row, "entry_key": "instance:2:a", "started_at": DAY0 + 86400.0 - 1800.0,
         "ended_at": DAY0 + 86400.0 + 1800.0, "run_started_at": DAY0, "billed_s": 3600.0,
         "cost_usd": 3.6},
        {**row, "entry_key": "instance:3:a", "closed": False, "started_at": DAY0,
         "ended_at": DAY0 + 60.0, "run_started_at": DAY0, "billed_s": 60.0, "cost_usd": 0.06},
    ]  # fmt: skip
    with empty_engine.begin() as conn:
        conn.execute(insert(LedgerEntry), closed)
    upgrade(empty_engine)
    upgrade(empty_engine)  # a second upgrade adds nothing
    with empty_engine.connect() as conn:
        days = conn.execute(
            text("SELECT day, cost_usd, entries FROM ledger_days WHERE dim = 'all' ORDER BY day")
        ).all()
    first = int(DAY0 // 86400)
    assert [(d, round(c, 6), n) for d, c, n in days] == [(first, 5.4, 2), (first + 1, 1.8, 1)]


DAY0 = 1_796_083_200.0  # 2026-12-01 00:00 UTC
