"""Fixtures of the vault tests: every test runs on SQLite and on a real PostgreSQL server
(``engine`` from tests/dbfixtures.py, in place of the server tests' SQLite-only one), and the
KMS tests on a real moto server (tests/awsfixtures.py)."""

from __future__ import annotations

from tests.awsfixtures import aws_env, moto_server
from tests.dbfixtures import db_kind, engine, postgres_server, postgres_url

__all__ = ["aws_env", "db_kind", "engine", "moto_server", "postgres_server", "postgres_url"]
