"""A task whose image comes from a configured registry whose password variable is unset, as a
user launches it: the real ``gpulease`` entry point, the server it starts in the background (it
reads the variable from its own environment, the one it inherited). Every launch command exits
2 with a message naming the variable and the registry, and nothing is created."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import Cli

VARIABLE = "GL_TEST_UNSET_REGISTRY_TOKEN"
TASK = """name: img
resources:
  providers: [local]
  image_id: docker:ghcr.io/org/img:v1
run: echo hi
"""


@pytest.fixture
def user(cli: Cli) -> Iterator[Cli]:
    assert VARIABLE not in os.environ
    cli.home.mkdir(parents=True)
    (cli.home / "config.yaml").write_text(
        f"containers:\n  registries:\n    ghcr.io: {{username: me, password_env: {VARIABLE}}}\n"
    )
    yield cli
    cli("server", "stop")


def test_every_launch_command_refuses_the_task_naming_the_variable(
    user: Cli, tmp_path: Path
) -> None:
    task = tmp_path / "task.yaml"
    task.write_text(TASK)
    service = tmp_path / "service.yaml"
    service.write_text(TASK + "service:\n  readiness_probe: /\n  replicas: 1\n")
    for args in (("launch", "-d", str(task)), ("jobs", "launch", "-d", str(task)),
                 ("serve", "up", str(service))):  # fmt: skip
        result = user(*args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
        assert f"{VARIABLE} is not set" in result.stderr and "ghcr.io" in result.stderr, args
    assert json.loads(user("status", "--json", check=True).stdout)["clusters"] == []
