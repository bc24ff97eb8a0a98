"""The sim provider passes the provider conformance suite (scaled time: one simulated hour per
real second, so its provisioning delays pass in milliseconds)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.providers.base import Instance
from gpulease.providers.local import LocalProvider
from gpulease.providers.sim import SimProvider
from gpulease.providers.sim_cloud import SimSettings
from tests.providers.conformance import Harness, ProviderConformance
from tests.providers.procs import node_pids


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    nodes = LocalProvider(tmp_path / "sim" / "local", kill_grace_s=0.5)
    provider = SimProvider(tmp_path / "sim", settings=SimSettings(time_scale=3600.0), nodes=nodes)

    def processes(instances: list[Instance]) -> list[int]:
        return node_pids(nodes, [i.id for i in instances])

    yield Harness(provider, node_processes=processes)
    provider.close()


class TestSimConformance(ProviderConformance):
    pass
