"""CLI tests run the real console entry point in a subprocess, with a private GPULEASE_HOME."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


class Cli:
    def __init__(self, home: Path) -> None:
        self.home = home

    def __call__(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "GPULEASE_HOME": str(self.home), "COLUMNS": "200"}
        result = subprocess.run(
            [sys.executable, "-m", "gpulease", *args],
            cwd=ROOT,
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert result.returncode == 0, result.stderr
        return result


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "home")
