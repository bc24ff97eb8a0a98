"""The cost benchmarks' databases: a fresh SQLite file, or a PostgreSQL 15 server started for
the run (the tests' helper, tests/state/postgres.py), each in its own temporary folder."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine

from gpulease.state import make_engine


@contextmanager
def database(kind: str, name: str) -> Iterator[tuple[Engine, str, Path]]:
    """(engine, URL, a temporary folder) of a new ``kind`` database (``sqlite``: the file
    ``<folder>/home/state.db``, where a server with ``GPULEASE_HOME=<folder>/home`` finds it;
    ``postgresql``); everything is removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=f"gpulease-{name}-") as tmp:
        folder = Path(tmp)
        (folder / "home").mkdir()
        if kind == "sqlite":
            url = f"sqlite:///{folder / 'home' / 'state.db'}"
            with _engine(url) as engine:
                yield engine, url, folder
            return
        if kind != "postgresql":
            raise SystemExit(f"--db: {kind!r} is not sqlite or postgresql")
        from tests.state.postgres import new_server, unavailable_reason

        reason = unavailable_reason()
        if reason:
            raise SystemExit(f"PostgreSQL: {reason}")
        server = new_server(f"{name}-{os.getpid()}")
        server.start()
        try:
            url = server.create_database(name.replace("-", ""))
            with _engine(url) as engine:
                yield engine, url, folder
        finally:
            server.stop()


@contextmanager
def _engine(url: str) -> Iterator[Engine]:
    engine = make_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()
