"""Shared fixtures of the spec tests: the example task files."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
NATIVE_EXAMPLES = sorted((FIXTURES / "native").glob("*.yaml"))
SKYPILOT_EXAMPLES = sorted((FIXTURES / "skypilot").glob("*.yaml"))


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
