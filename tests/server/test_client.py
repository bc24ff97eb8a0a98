"""The SDK's surface: a curated ``__all__``, and importing it loads none of the server side."""

from __future__ import annotations

import subprocess
import sys

import gpulease.client


def test_the_client_exports_a_curated_surface() -> None:
    assert sorted(gpulease.client.__all__) == [
        "Client", "Conflict", "InvalidRequest", "JobLogChunk", "LogChunk", "NotFound",
        "ServerError", "ServerInfo", "ServerUnavailable", "ServiceLogChunk", "Unauthorized",
        "connect", "read_info", "running", "stop",
    ]  # fmt: skip
    for name in gpulease.client.__all__:
        assert getattr(gpulease.client, name) is not None


def test_importing_the_client_loads_no_server_controller_or_state() -> None:
    code = (
        "import sys, gpulease.client; "
        "bad = [m for m in sys.modules if m.split('.')[0] in {'fastapi', 'uvicorn', 'sqlalchemy'}"
        " or m.startswith(('gpulease.server', 'gpulease.controller', 'gpulease.state'))]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_importing_the_cli_loads_no_database_layer() -> None:
    # every command runs through the CLI's entry module: a command module that imports the
    # state (SQLAlchemy, alembic) at import time adds ~0.3 s to every command, `version` too
    code = (
        "import sys, gpulease.cli.main; "
        "bad = [m for m in sys.modules if m.split('.')[0] in {'fastapi', 'uvicorn', 'sqlalchemy',"
        " 'alembic'} or m.startswith(('gpulease.server', 'gpulease.controller',"
        " 'gpulease.state'))]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
