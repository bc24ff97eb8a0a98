"""CPU-only offers from price lists: which rows without an accelerator are CPU instances the
catalog keeps, and their row in our schema.

Price lists hold thousands of CPU-only instance types (every AWS family and size). The catalog
keeps a representative **general-purpose** and **compute** family per provider
(:data:`CPU_FAMILIES`) — the same rule for the bundled snapshot, ``gpulease catalog import`` and
a gpuhunt refresh, so a refresh never drops the CPU offers it replaces. A kept row is an offer
like any other, with part ``cpu`` (:data:`gpulease.catalog._specs.CPU_PART`), accelerator
``CPU``, 0 GPUs and 0 GB of GPU memory; everything else (prices and their rules, host CPU
architecture, certifications) comes from :func:`gpulease.catalog._convert.offer_row`. Rows that
match no family (other CPU types, fractional vGPUs without an accelerator name) stay skipped.
"""

from __future__ import annotations

import math
import re

from gpulease.catalog._convert import Converted, offer_row
from gpulease.catalog._names import Resolved
from gpulease.catalog._specs import CPU_NAME, CPU_PART

#: Provider → the CPU-only instance types kept (a name pattern per provider).
CPU_FAMILIES: dict[str, re.Pattern[str]] = {
    # general purpose m6i/m7i (x86_64), m7g (Graviton3); compute c6i/c7i, c7g
    "aws": re.compile(r"^(m6i|m7i|m7g|c6i|c7i|c7g)\.[a-z0-9-]+$"),
    # general purpose N2; compute-optimized C2, C3
    "gcp": re.compile(r"^(n2-standard|c2-standard|c3-standard)-\d+$"),
    # general purpose Dsv5; compute-optimized Fsv2
    "azure": re.compile(r"^Standard_(D\d+s_v5|F\d+s_v2)$"),
    # the AMD flexible standard shapes as SkyPilot lists them (VM.Standard.E4.Flex$_2_8)
    "oci": re.compile(r"^VM\.Standard\.E[45]\.Flex(\$_\d+_\d+)?$"),
    # Lambda's CPU instances (cpu_4x_general)
    "lambda": re.compile(r"^cpu_\w+$"),
}
CPU = Resolved(CPU_NAME, CPU_PART)
SKIPPED = "no accelerator (CPU-only type outside the kept families, or fractional vGPU)"


def is_cpu_instance(provider: str, instance_type: str) -> bool:
    """Whether ``instance_type`` is one of the CPU-only families kept for ``provider``."""
    pattern = CPU_FAMILIES.get(provider)
    return bool(pattern and pattern.match(instance_type))


def append_cpu_offer(
    out: Converted,
    *,
    provider: str,
    region: str,
    zone: str,
    instance_type: str,
    vcpus: float,
    ram_gb: float,
    on_demand: float,
    spot: float,
    as_of: str,
    source: str,
    cpu_arch: object = "",
) -> None:
    """Add one CPU-only offer to ``out`` (or count it skipped when it has no price at all)."""
    if math.isnan(on_demand) and math.isnan(spot):
        out.skipped[f"no price: {instance_type}"] += 1
        return
    out.rows.append(
        offer_row(
            provider=provider,
            region=region,
            zone=zone,
            instance_type=instance_type,
            resolved=CPU,
            gpu_count=0,
            vcpus=vcpus,
            ram_gb=ram_gb,
            on_demand=on_demand,
            spot=spot,
            as_of=as_of,
            source=source,
            memory_gb=0.0,
            cpu_arch=cpu_arch,
        )
    )
