"""``gpulease serve`` as a user runs it, on bad input: a task file without a ``service:``
section, or with a bad field in it, exits 2 naming the field — no traceback, no server started,
nothing created."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import Cli


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ("name: web\nrun: python app.py\n", "service:"),
        ("name: web\nrun: x\nservice:\n  replicas: {min: 3, max: 1}\n", "service.replicas"),
    ],
)
def test_bad_service_input_exits_2_naming_the_field(
    cli: Cli, tmp_path: Path, body: str, named: str
) -> None:
    task = tmp_path / "service.yaml"
    task.write_text(body)
    result = cli("serve", "up", str(task))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert named in result.stderr and "Traceback" not in result.stderr
    assert not (cli.home / "server.json").exists()  # nothing started, nothing created
