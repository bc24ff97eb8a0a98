"""What this install's providers sell: each provider's own ``offers()`` (the local machine, the
sim's copy of the catalog; Slurm's are tested against real daemons in test_slurm_provider.py),
merged by ``runtime_catalog`` into the catalog both the server and ``gpulease plan`` plan over."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import numpy
import pytest

from gpulease.catalog import Catalog
from gpulease.catalog.runtime import LOCAL_CPU_PART, host_cpu_arch
from gpulease.errors import UserInputError
from gpulease.providers.local import LocalProvider
from gpulease.providers.registry import SELLERS, build_providers, runtime_catalog
from gpulease.providers.sim import SimProvider
from gpulease.providers.slurm.commands import NodeInfo
from gpulease.providers.slurm.offers import slurm_offers
from gpulease.providers.slurm.settings import SlurmSettings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.load()


def test_the_local_machine_sells_a_cpu_shape_and_power_of_two_gpu_counts(
    catalog: Catalog, tmp_path: Path
) -> None:
    cpu_only = LocalProvider(tmp_path / "a").offers(catalog)
    assert cpu_only.table.instance_type.tolist() == ["local-cpu"]
    assert LOCAL_CPU_PART in cpu_only.specs
    sold = LocalProvider(tmp_path / "b", gpus=6, accelerator="A100").offers(catalog).table
    assert sold.gpu_count.tolist() == [0, 1, 2, 4]
    assert set(sold.price_on_demand.tolist()) == {0.0} and set(sold.region.tolist()) == {"local"}
    assert set(sold.cpu_arch.tolist()) == {host_cpu_arch(platform.machine())}  # this machine
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # asking writes nothing


def test_an_unknown_local_accelerator_is_named(catalog: Catalog, tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match=r"providers\.local\.accelerator"):
        LocalProvider(tmp_path, gpus=1, accelerator="Z9000").offers(catalog)
    with pytest.raises(UserInputError, match=r"providers\.local\.accelerator"):
        LocalProvider.from_config({"providers": {"local": {"accelerator": 7}}})


def test_the_sim_sells_the_catalog_under_its_name_and_asking_writes_nothing(
    catalog: Catalog, tmp_path: Path
) -> None:
    sim = SimProvider.from_config({}, tmp_path / "sim")
    sold = sim.offers(catalog).table
    assert len(sold) == len(catalog.offers) and set(sold.provider.tolist()) == {"sim"}
    numpy.testing.assert_array_equal(sold.price_on_demand, catalog.offers.price_on_demand)
    assert not (tmp_path / "sim").exists()  # the sim clock starts on first use, not on a plan


def test_slurm_offers_follow_partitions_states_and_the_rate(catalog: Catalog) -> None:
    class Cluster:  # the backend's two answers (the commands and slurmrestd are tested live)
        def cluster_name(self) -> str:
            return "dev"

        def nodes(self) -> list[NodeInfo]:
            return [
                NodeInfo("n1", "gpu", "10.0.0.1", "idle", 8, "a100", 64, 512000),
                NodeInfo("n2", "gpu", "10.0.0.2", "down*", 8, "a100", 64, 512000),
                NodeInfo("n3", "debug", "10.0.0.3", "mixed", 2, None, 8, 32000, arch="aarch64"),
            ]

    settings = SlurmSettings.from_mapping({"price_per_gpu_hour": 2.0, "partitions": ["gpu"]})
    sold = slurm_offers(Cluster(), settings, catalog).table  # type: ignore[arg-type]
    assert sold.gpu_count.tolist() == [0, 1, 2, 4, 8]  # a CPU-only shape, then the GPU counts
    assert (sold.instance_type[0], sold.accelerator[0], sold.part[0]) == ("gpu-cpu", "CPU", "cpu")
    assert set(sold.zone.tolist()) == {"gpu"} and set(sold.region.tolist()) == {"dev"}
    assert sold.price_on_demand.tolist() == [0.0, 2.0, 4.0, 8.0, 16.0]
    everything = slurm_offers(Cluster(), SlurmSettings.from_mapping({}), catalog).table  # type: ignore[arg-type]
    assert ("debug", 2) in set(
        zip(everything.zone.tolist(), everything.gpu_count.tolist(), strict=True)
    )
    # the node's CPU where the backend says (slurmrestd), else x86_64 — not this machine's
    arch = dict(zip(everything.zone.tolist(), everything.cpu_arch.tolist(), strict=False))
    assert arch == {"gpu": "x86_64", "debug": "arm64"}


def test_a_slurm_cluster_that_does_not_answer_sells_nothing_at_once(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpulease.providers.slurm import SlurmProvider

    monkeypatch.setenv("PATH", str(tmp_path))  # no Slurm commands on this "login node"
    provider = SlurmProvider.from_config({}, tmp_path)
    assert len(provider.offers(catalog).table) == 0


def test_runtime_catalog_merges_every_sellers_offers(catalog: Catalog, tmp_path: Path) -> None:
    providers = {
        "local": LocalProvider(tmp_path / "l", gpus=2, accelerator="T4"),
        "sim": SimProvider.from_config({}, tmp_path / "s"),
    }
    merged = runtime_catalog(providers, base=catalog)
    names, sizes = numpy.unique(merged.offers.provider, return_counts=True)
    counts = dict(zip(names.tolist(), sizes.tolist(), strict=True))
    assert counts["local"] == 3 and counts["sim"] == len(catalog.offers)
    assert LOCAL_CPU_PART in merged.accelerators
    assert set(SELLERS) == {"local", "sim", "slurm"}


def test_plan_sees_what_the_configured_local_machine_sells(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("providers: {local: {gpus: 2, accelerator: T4}}\n")
    task = tmp_path / "t.yaml"
    task.write_text("name: t\nresources: {providers: [local], accelerators: T4:2}\nrun: echo\n")
    done = subprocess.run(
        [sys.executable, "-m", "gpulease", "plan", str(task), "--json"], capture_output=True,
        text=True, timeout=60, check=False, env={"GPULEASE_HOME": str(home), "PATH": "/usr/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    plans = json.loads(done.stdout)["plans"]
    assert plans and plans[0]["instance_type"] == "local-T4x2" and plans[0]["launchable"]
    assert sorted(p.name for p in home.iterdir()) == ["config.yaml"]  # planning wrote nothing
    assert set(build_providers({}, only=SELLERS)) == {"local"}
