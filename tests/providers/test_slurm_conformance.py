"""The slurm provider passes the provider conformance suite against a REAL Slurm cluster
(``scripts/dev-slurm.sh``: three slurmd daemons on this machine); every node runs a real agent
started by srun, answering on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.providers.base import Instance
from gpulease.providers.slurm import SlurmProvider, SlurmSettings
from tests.providers.conformance import Harness, ProviderConformance
from tests.slurmfixtures import slurm_cluster  # noqa: F401 - fixture

pytestmark = pytest.mark.xdist_group("slurm")


def agent_pids(instance_ids: list[str]) -> list[int]:
    """Live pids whose environment names one of the instances (GPULEASE_INSTANCE_ID)."""
    wanted = {f"GPULEASE_INSTANCE_ID={i}".encode() for i in instance_ids}
    found = []
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            environ = set((pid_dir / "environ").read_bytes().split(b"\0"))
            state = (pid_dir / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and environ & wanted:
            found.append(int(pid_dir.name))
    return found


@pytest.fixture
def harness(slurm_cluster: str, tmp_path: Path) -> Iterator[Harness]:  # noqa: F811 - fixture
    provider = SlurmProvider(
        tmp_path / "slurm", SlurmSettings.from_mapping({"slurm_conf": slurm_cluster})
    )

    def processes(instances: list[Instance]) -> list[int]:
        return agent_pids([i.id for i in instances])

    yield Harness(provider, node_processes=processes, timeout=20.0)
    provider.close()


class TestSlurmConformance(ProviderConformance):
    pass
