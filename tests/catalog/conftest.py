"""Fixtures for the catalog tests: an empty gpulease home per test and the fixture folders."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.catalog import _catalog

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def gpulease_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own empty ``$GPULEASE_HOME`` (so no refreshed cache leaks in)."""
    home = tmp_path / "home"
    monkeypatch.setenv("GPULEASE_HOME", str(home))
    yield home
    _catalog._LOADED.clear()


@pytest.fixture
def skypilot_dir() -> Path:
    return FIXTURES / "skypilot"


@pytest.fixture
def gpuhunt_dir() -> Path:
    return FIXTURES / "gpuhunt"
