"""Fixtures of the cost tests: ``engine`` (params sqlite / postgresql: a migrated, empty DB)."""

from __future__ import annotations

from tests.dbfixtures import (
    db_kind,
    engine,
    postgres_server,
    postgres_url,
    sqlite_template,
)
