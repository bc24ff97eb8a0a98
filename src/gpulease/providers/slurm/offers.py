"""What a Slurm cluster sells, as its backend (the commands, locally or on a login node over
ssh, or slurmrestd) shows it now: one offer per partition node shape — region = the cluster
name, zone = the partition, one per power-of-two GPU count up to the node's GPUs (gres), priced
``price_per_gpu_hour`` × GPUs (0 by default), and one CPU-only shape per partition node shape
(``PARTITION-cpu``: no GPU asked, at price 0, so a task without accelerators runs on the
cluster), with the node's CPU architecture where the backend says (slurmrestd's
``architecture``), else x86_64. Nodes down, drained or failing are
left out, and so are partitions the settings do not list. A cluster that does not answer sells
nothing (a warning in the log). Moves no states.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gpulease.catalog.runtime import (
    CPU_SPEC,
    host_cpu_arch,
    offer_row,
    offer_table,
    power_of_two_counts,
)
from gpulease.errors import GpuleaseError
from gpulease.providers.base import ProviderOffers
from gpulease.providers.slurm.commands import NodeInfo, SlurmBackend
from gpulease.providers.slurm.settings import SlurmSettings

if TYPE_CHECKING:
    from gpulease.catalog import Catalog

log = logging.getLogger("gpulease.providers.slurm")
_UNUSABLE = ("down", "drain", "fail")


def usable_nodes(nodes: list[NodeInfo], partitions: tuple[str, ...]) -> list[NodeInfo]:
    wanted = set(partitions)
    return [
        n for n in nodes
        if not any(bad in n.state for bad in _UNUSABLE) and (not wanted or n.partition in wanted)
    ]  # fmt: skip


def slurm_offers(
    backend: SlurmBackend, settings: SlurmSettings, catalog: Catalog
) -> ProviderOffers:
    try:
        cluster = backend.cluster_name()
        nodes = usable_nodes(backend.nodes(), settings.partitions)
    except (GpuleaseError, OSError) as exc:
        log.warning("slurm: no offers, the cluster did not answer: %s", exc)
        return ProviderOffers(offer_table([]))
    rows, seen = [], set()
    for node in nodes:
        parts = catalog.parts_of(node.gpu_type) if node.gpu_type else []
        parts = parts or catalog.parts_of(settings.accelerator)
        shapes = [(CPU_SPEC, 0)]
        if parts and node.gpus:
            shapes += [(parts[0], count) for count in power_of_two_counts(node.gpus)]
        for spec, count in shapes:
            name = f"{node.partition}-{spec.name}x{count}" if count else f"{node.partition}-cpu"
            if name in seen:
                continue
            seen.add(name)
            rows.append(offer_row(
                "slurm", name, accelerator=spec.name, part=spec.part, gpus=count,
                memory=spec.memory_gb, region=cluster,
                zone=node.partition, vcpus=float(node.cpus), ram_gb=node.memory_mb / 1000.0,
                cpu_arch=host_cpu_arch(node.arch or "x86_64"),
                price_on_demand=settings.price_per_gpu_hour * count,
                source=f"slurm sinfo ({cluster})",
            ))  # fmt: skip
    return ProviderOffers(offer_table(rows))
