"""Launch and job documents carry a typed run spec; the ``workdir`` columns move into it.

Version 1 documents (``clusters.task``, ``jobs.task``) held only the task spec; version 2 adds
``run`` — what the nodes run (``run``, ``setup``, ``envs``, ``workdir``, ``file_mounts``,
``provider_config``), the one part of the task the controller reads (see
``gpulease.wire.RunSpec``). This migration builds ``run`` from each stored spec and the row's
``workdir`` column, then drops the column. A bare spec (a document without ``version``) becomes a
version 2 document without plans. Downgrade puts the columns back from ``run.workdir`` (the
documents stay version 2).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_TABLES = ("clusters", "jobs")


def _run_of(spec: Mapping[str, Any], workdir: str | None) -> dict[str, Any]:
    resources = spec.get("resources") or {}
    return {
        "run": spec.get("run"),
        "setup": spec.get("setup"),
        "envs": {str(k): str(v) for k, v in (spec.get("envs") or {}).items()},
        "workdir": workdir or spec.get("workdir"),
        "file_mounts": {str(k): str(v) for k, v in (spec.get("file_mounts") or {}).items()},
        "provider_config": dict(resources.get("provider_config") or {}),
    }


def _upgraded(task: Mapping[str, Any], workdir: str | None) -> dict[str, Any]:
    if "version" not in task:  # a bare spec
        task = {"version": 1, "spec": dict(task), "plans": []}
    doc = dict(task)
    if "run" not in doc:
        doc["run"] = _run_of(doc.get("spec") or {}, workdir)
    doc["version"] = 2
    return doc


def upgrade() -> None:
    conn = op.get_bind()
    for name in _TABLES:
        table = sa.table(name, sa.column("id"), sa.column("task", sa.JSON()),
                         sa.column("workdir", sa.Text()))  # fmt: skip
        for row in conn.execute(sa.select(table.c.id, table.c.task, table.c.workdir)).all():
            if not row.task:  # a job row written in two steps: its document comes later
                continue
            doc = _upgraded(row.task, row.workdir)
            conn.execute(table.update().where(table.c.id == row.id).values(task=doc))
        # SQLite recreates the table: keep AUTOINCREMENT (ids are never reused)
        with op.batch_alter_table(name, table_kwargs={"sqlite_autoincrement": True}) as batch:
            batch.drop_column("workdir")


def downgrade() -> None:
    conn = op.get_bind()
    for name in _TABLES:
        with op.batch_alter_table(name) as batch:
            batch.add_column(sa.Column("workdir", sa.Text(), nullable=True))
        table = sa.table(name, sa.column("id"), sa.column("task", sa.JSON()),
                         sa.column("workdir", sa.Text()))  # fmt: skip
        for row in conn.execute(sa.select(table.c.id, table.c.task)).all():
            workdir = ((row.task or {}).get("run") or {}).get("workdir")
            if workdir:
                conn.execute(table.update().where(table.c.id == row.id).values(workdir=workdir))
