"""Fixtures of the cost tests: the report runs on SQLite and on a real PostgreSQL server
(tests/dbfixtures.py), over ledger rows seeded through the real schema (:mod:`tests.cost.seed`)."""

from __future__ import annotations

from tests.dbfixtures import (
    db_kind,
    engine,
    postgres_server,
    postgres_url,
    sqlite_template,
)
