"""A throwaway PostgreSQL server for the tests: initdb into a temp dir, pg_ctl start on 127.0.0.1,
stop and delete at the end. Used by tests/state/conftest.py.

As root (CI), ``initdb`` refuses to run, so the data directory is handed to the ``postgres`` user
and the binaries run through ``runuser -u postgres``; as any other user they run directly.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text

USER = "gpulease"


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl`` (PATH first, then Debian's layout)."""
    initdb = shutil.which("initdb")
    if initdb:
        bindir = Path(initdb).resolve().parent
        if (bindir / "pg_ctl").exists():
            return bindir
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    return None


def unavailable_reason() -> str | None:
    """Why no server can be started here, or None when it can."""
    if find_bindir() is None:
        return (
            "PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in "
            "/usr/lib/postgresql/*/bin"
        )
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the psycopg driver is not installed (pip install 'gpulease[postgres]')"
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            return "running as root without runuser: initdb refuses to run as root"
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run initdb as"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PostgresServer:
    bindir: Path
    root: Path
    port: int = 0

    @property
    def data(self) -> Path:
        return self.root / "data"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        done = self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", USER, "-E", "UTF8")
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr[-2000:]}")
        for _ in range(3):
            self.port = _free_port()
            options = (
                f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            )
            log = str(self.root / "postgres.log")
            started = self._run(
                "pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start"
            )
            if started.returncode == 0:
                return
        log_text = (self.root / "postgres.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"pg_ctl start failed: {started.stderr[-1000:]} {log_text}")

    def stop(self) -> None:
        try:
            if self.data.exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{database}"

    def _admin(self, sql: str) -> None:
        engine = create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(text(sql))
        finally:
            engine.dispose()

    def create_database(self, name: str) -> str:
        self._admin(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def new_server(tag: str) -> PostgresServer:
    bindir = find_bindir()
    assert bindir is not None
    root = Path(tempfile.mkdtemp(prefix=f"gpulease-pg-{tag}-"))
    return PostgresServer(bindir=bindir, root=root)
