r"""Run-time offers: what the providers of this install sell besides the public catalog.

The ``local`` provider sells this machine: one offer per shape — CPU only (``local-cpu``, a part
of its own with no GPU figures) and, when the config gives the machine fake GPUs
(``providers.local.gpus: N``, ``providers.local.accelerator: T4``), one per power-of-two GPU count
up to N — at price 0, region ``local``, with this machine's vCPUs and RAM. The ``sim`` provider
(configured by a ``providers.sim`` section) sells the catalog's own offers under its name. The
``slurm`` provider (a ``providers.slurm`` section, or ``SLURM_CONF`` in the environment) sells
its partitions' node shapes as ``sinfo`` shows them now: region = the cluster name, zone = the
partition, one offer per power-of-two GPU count up to the node's GPUs (gres), priced
``price_per_gpu_hour`` × GPUs (0 by default); a cluster that does not answer sells nothing.

``gpulease plan`` (in process) and the server's ``launch`` both plan over
:func:`catalog_for`\ (:func:`configured_providers`), so they see the same offers.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Mapping
from datetime import date
from typing import Any

import numpy as np

from gpulease.catalog._catalog import Catalog
from gpulease.catalog.types import COLUMNS, AcceleratorSpec, OfferTable
from gpulease.errors import UserInputError

_log = logging.getLogger(__name__)


def configured_providers(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Settings per provider this install runs: ``local`` always, ``sim``, ``aws`` and ``slurm``
    when the config file has a ``providers.<name>`` section (even an empty one); ``slurm`` also,
    with defaults, when there is no such section but ``SLURM_CONF`` is set in the environment."""
    section = dict(config.get("providers") or {})
    settings = {"local": dict(section.get("local") or {})}
    for name in ("sim", "aws", "slurm"):
        if name in section:
            settings[name] = dict(section.get(name) or {})
    if "slurm" not in settings and os.environ.get("SLURM_CONF"):
        settings["slurm"] = {}
    return settings


LOCAL_CPU_PART = "local-cpu"
_CPU_SPEC = AcceleratorSpec(
    part=LOCAL_CPU_PART,
    name="CPU",
    vendor="none",
    architecture="cpu",
    generation="cpu",
    form_factor="host",
    memory_gb=0.0,
    memory_bandwidth_gbps=0.0,
    tflops={},
    interconnect="none",
    intra_node_gbps=0.0,
    tdp_w=None,
    release_year=date.today().year,
    source="local machine",
)


def _ram_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError):
        return float("nan")


def _offer(
    instance_type: str, accelerator: str, part: str, gpus: int, memory: float
) -> dict[str, Any]:
    return {
        "provider": "local", "region": "local", "zone": "", "instance_type": instance_type,
        "accelerator": accelerator, "part": part, "gpu_count": gpus, "gpu_memory_gb": memory,
        "vcpus": float(os.cpu_count() or 1), "ram_gb": _ram_gb(), "nvme_gb": float("nan"),
        "network_gbps": float("nan"), "fabric": "", "price_on_demand": 0.0,
        "price_spot": float("nan"), "price_reserved_1y": float("nan"),
        "price_reserved_3y": float("nan"), "interruption_band": -1, "certifications": "",
        "as_of": date.today().isoformat(), "source": "local machine",
    }  # fmt: skip


def _slurm_run(argv: list[str], settings: Mapping[str, Any]) -> str:
    env = dict(os.environ)
    conf = settings.get("slurm_conf") or env.get("SLURM_CONF")
    if conf:
        env["SLURM_CONF"] = str(conf)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=15, check=True)
    return done.stdout


def _slurm_nodes(settings: Mapping[str, Any]) -> tuple[str, list[tuple[str, str, int, int, int]]]:
    """The cluster name and (partition, gpu type, gpus, cpus, memory MB) per up node."""
    cluster = "slurm"
    for line in _slurm_run(["scontrol", "show", "config"], settings).splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "ClusterName":
            cluster = value.strip()
    wanted = set(settings.get("partitions") or [])
    nodes = []
    out = _slurm_run(["sinfo", "-h", "-N", "-o", "%P|%T|%G|%c|%m"], settings)
    for line in out.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 5 or any(bad in fields[1] for bad in ("down", "drain", "fail")):
            continue
        partition = fields[0].rstrip("*")
        if wanted and partition not in wanted:
            continue
        kind, gpus = "", 0
        for item in fields[2].split(","):
            parts = item.split("(")[0].split(":")
            if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
                kind, gpus = (parts[1] if len(parts) > 2 else ""), int(parts[-1])
        cpus, memory = (int(f) if f.isdigit() else 0 for f in fields[3:5])
        nodes.append((partition, kind, gpus, cpus, memory))
    return cluster, nodes


def slurm_offers(catalog: Catalog, settings: Mapping[str, Any]) -> OfferTable:
    """The slurm provider's offers now (``sinfo``); none when the cluster does not answer."""
    try:
        cluster, nodes = _slurm_nodes(settings)
    except (OSError, subprocess.SubprocessError) as exc:
        _log.warning("slurm: no offers, sinfo failed: %s", exc)
        nodes, cluster = [], "slurm"
    rate = float(settings.get("price_per_gpu_hour") or 0.0)
    rows, seen = [], set()
    for partition, kind, gpus, cpus, memory in nodes:
        parts = catalog.parts_of(kind) if kind else []
        parts = parts or catalog.parts_of(str(settings.get("accelerator") or "T4"))
        if not parts:
            continue
        spec = parts[0]
        counts = [c for c in (1, 2, 4, 8, 16, 32) if c < gpus] + ([gpus] if gpus else [])
        for count in counts:
            name = f"{partition}-{spec.name}x{count}"
            if (name, count) in seen:
                continue
            seen.add((name, count))
            row = _offer(name, spec.name, spec.part, count, spec.memory_gb)
            row.update(provider="slurm", region=cluster, zone=partition, vcpus=float(cpus),
                       ram_gb=memory / 1000.0, price_on_demand=rate * count,
                       source=f"slurm sinfo ({cluster})")  # fmt: skip
            rows.append(row)
    return _table(rows)


def _table(rows: list[dict[str, Any]]) -> OfferTable:
    columns: dict[str, np.ndarray[Any, Any]] = {
        n: np.array([r[n] for r in rows], dtype=k) for n, k in COLUMNS.items()
    }
    return OfferTable.from_columns(columns)


def local_offers(catalog: Catalog, settings: Mapping[str, Any]) -> OfferTable:
    """The local provider's offers for ``settings`` (the config's ``providers.local``)."""
    rows = [_offer("local-cpu", "CPU", LOCAL_CPU_PART, 0, 0.0)]
    gpus = int(settings.get("gpus") or 0)
    if gpus > 0:
        name = str(settings.get("accelerator") or "T4")
        parts = catalog.parts_of(name)
        if not parts:
            raise UserInputError(f"providers.local.accelerator: unknown accelerator {name!r}")
        spec = parts[0]
        count = 1
        while count <= gpus:
            rows.append(_offer(f"local-{spec.name}x{count}", spec.name, spec.part, count,
                               spec.memory_gb))  # fmt: skip
            count *= 2
    return _table(rows)


def sim_offers(catalog: Catalog) -> OfferTable:
    """The sim provider sells the catalog's offers — same regions, zones, shapes, prices and
    interruption bands — under the provider name ``sim``."""
    columns = catalog.offers.column_dict()
    columns["provider"] = np.full(len(catalog.offers), "sim")
    columns["source"] = np.char.add("sim of ", catalog.offers.source.astype(str))
    return OfferTable.from_columns(columns)


def catalog_for(providers: Mapping[str, Mapping[str, Any]]) -> Catalog:
    """The catalog with the run-time offers of the configured providers."""
    base = Catalog.load()
    catalog = base
    if "sim" in providers:
        catalog = catalog.with_offers(sim_offers(base), label="sim")
    if "slurm" in providers:
        catalog = catalog.with_offers(slurm_offers(base, providers["slurm"]), label="slurm")
    if "local" in providers:
        catalog = catalog.with_offers(
            local_offers(base, providers["local"]),
            label="local",
            specs={LOCAL_CPU_PART: _CPU_SPEC},
        )
    return catalog
