"""The aws provider passes the provider conformance suite against a real moto server process
(moto runs no VMs: there are no agents, so ``has_agents`` is False)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.providers.aws import AwsProvider, AwsSettings
from tests.awsfixtures import aws_env, ec2_env, moto_server  # noqa: F401 - fixtures
from tests.providers.conformance import Harness, ProviderConformance


@pytest.fixture
def harness(ec2_env: str, tmp_path: Path) -> Iterator[Harness]:  # noqa: F811 - fixture
    provider = AwsProvider(tmp_path / "aws", AwsSettings(tunnels=False), retry_base=0.01)
    yield Harness(provider, has_agents=False)
    provider.close()


class TestAwsConformance(ProviderConformance):
    pass
