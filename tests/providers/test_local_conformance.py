"""The local provider passes the provider conformance suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.providers.base import Instance
from gpulease.providers.local import LocalProvider
from tests.providers.conformance import Harness, ProviderConformance
from tests.providers.procs import node_pids


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    provider = LocalProvider(tmp_path / "local", kill_grace_s=0.5)

    def processes(instances: list[Instance]) -> list[int]:
        return node_pids(provider, [i.id for i in instances])

    yield Harness(provider, node_processes=processes)
    provider.close()


class TestLocalConformance(ProviderConformance):
    pass
