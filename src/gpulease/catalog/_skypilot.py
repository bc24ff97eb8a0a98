"""SkyPilot catalog ``vms.csv`` files → offers in our schema.

Columns are read by header name (their order differs per cloud); lines starting with ``#`` are
provenance comments. Quirks handled here (the price rules shared by all sources live in
:mod:`gpulease.catalog._convert`):

- **GCP**: GPU VMs (a2/a3/g2) carry the host-only price; the GPU price is in rows with an empty
  ``InstanceType`` near the end of the file. Each host row is joined with the GPU row of its
  family, GPU count and region and the prices are summed; a GPU spot price at or above its
  on-demand price voids the spot price. ``n1-standard-8`` hosts are combined with every T4, V100
  and P100 count listed in the same region. TPU rows and hosts with placeholder prices (``0.0``,
  ``700.0``) are dropped.
- **AWS**: one row per availability zone (spot prices differ by zone); kept as is.
- **Azure**: ``Standard_ND96isr_H100_v5`` lists 12 GPUs (really 8: ``instance_types.csv`` wins);
  ``*_Promo`` rows carry promotional prices and are dropped; rows without an accelerator name are
  fractional A10 vGPUs (NC*ads_A10_v4) and are dropped.
- **RunPod**: ``Region`` is a country code, ``AvailabilityZone`` the data-centre id — the data
  centre becomes our region; ``GpuInfo`` memory is in GB, not MiB.
- **Vast**: ``Region`` is free text "City, CC, Continent" → region ``cc-city``; vCPUs and memory
  are placeholders (stored as NaN); ``GpuInfo`` memory is the total across GPUs.
- **Paperspace** ("East Coast (NY2)" → ``ny2``) and **Fluidstack** ("FINLAND" → ``finland``).
- **Alibaba** (the ``alicloud`` fork): fractional vGPU families (``A10*1/12``, ``T4/8``) drop.
- **Arch** (AWS ``x86_64``/``arm64``, Alibaba ``X86``): the host CPU where a file has the column;
  elsewhere (GCP, Azure v6, Lambda, …) the name rule of :mod:`gpulease.catalog._arch` decides.
- **CPU-only rows** (no accelerator name): kept when the type is one of the representative
  families of :mod:`gpulease.catalog._cpu` (AWS m6i/c6i/m7g/c7g…, GCP n2-standard/c2-standard,
  Azure Dsv5/Fsv2, OCI E4/E5 Flex, Lambda ``cpu_*``), as CPU offers (part ``cpu``, 0 GPUs); the
  GCP price of such a row is the whole VM's. Other CPU-only rows are skipped and counted.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from gpulease.catalog import _cpu
from gpulease.catalog._convert import Converted, count_of, offer_row, price, skip_reason
from gpulease.catalog._names import Resolved, resolve
from gpulease.catalog._tables import instance_facts, read_rows

#: SkyPilot cloud folder → our provider id.
CLOUD_PROVIDER = {"alicloud": "alibaba", "lambdalabs": "lambda"}
_PROVENANCE = re.compile(r"(catalogs/v\d+/[\w-]+/vms\.csv).*?commit ([0-9a-f]{40})", re.S)
_GCP_FAMILY_GPU = {
    "a2-highgpu": "A100",
    "a2-megagpu": "A100",
    "a2-ultragpu": "A100-80GB",
    "a3-highgpu": "H100",
    "a3-edgegpu": "H100",
    "a3-megagpu": "H100-MEGA",
    "a3-ultragpu": "H200",
    "a4-highgpu": "B200",
    "g2-standard": "L4",
}
_GCP_ATTACH_HOSTS = ("n1-standard-8",)
_GCP_ATTACHABLE = ("T4", "V100", "P100")
_GCP_NOTE = "GCP lists host and GPU prices separately; summed"


def provider_of(cloud: str) -> str:
    return CLOUD_PROVIDER.get(cloud, cloud)


def source_of(path: Path, default: str) -> str:
    """``skypilot-catalog <file>@<commit>`` from an extract's provenance comment, else default."""
    with path.open(encoding="utf-8") as handle:
        comments = "".join(line for line in handle if line.startswith("#"))
    match = _PROVENANCE.search(comments)
    if match is None:
        return default
    return f"skypilot-catalog {match.group(1)}@{match.group(2)[:12]}"


def convert_file(path: Path, provider: str, *, as_of: str, source: str | None = None) -> Converted:
    """Offers in one ``vms.csv`` (or an extract of one) for ``provider``."""
    rows = list(read_rows(path))
    return convert_rows(rows, provider, as_of=as_of, source=source or source_of(path, str(path)))


def convert_rows(
    rows: list[dict[str, str]], provider: str, *, as_of: str, source: str
) -> Converted:
    if provider == "gcp":
        return _convert_gcp(rows, as_of=as_of, source=source)
    out = Converted()
    for row in rows:
        _convert_row(row, provider, as_of=as_of, source=source, out=out)
    return out


def _number(text: str | None) -> float:
    text = (text or "").strip()
    return float(text) if text else math.nan


def _gpu_info(text: str | None, provider: str, count: float) -> tuple[float | None, str]:
    """(memory per GPU in GB, GPU name) from a ``GpuInfo`` cell, per the cloud's conventions."""
    text = text or ""
    name = re.search(r"'Name': '([^']*)'", text)
    size = re.search(r"'SizeInMiB': (\d+)", text)
    if size is None:
        plain = re.search(r"(\d+)\s*GB", text)
        return (float(plain.group(1)) if plain else None), text
    value = float(size.group(1))
    if provider == "runpod":
        memory = value  # RunPod writes GB into SizeInMiB
    elif provider == "vast":
        memory = value / max(count, 1.0) / 1024  # the total across GPUs
    else:
        memory = value / 1024
    return round(memory, 1), name.group(1) if name else ""


def _location(provider: str, row: dict[str, str]) -> tuple[str, str, str]:
    """(region, zone, country stated upstream or "")."""
    region, zone = row.get("Region", "").strip(), (row.get("AvailabilityZone") or "").strip()
    if provider == "runpod":
        return zone, "", region.upper()
    if provider == "vast":
        city, country = (part.strip() for part in [*region.split(","), "", ""][:2])
        slug = re.sub(r"[^a-z0-9]+", "-", city.lower()).strip("-")
        return (f"{country.lower()}-{slug}" if slug else country.lower()), "", country.upper()
    if provider == "paperspace":
        code = re.search(r"\(([^)]+)\)", region)
        return (code.group(1) if code else region).lower(), "", ""
    if provider == "fluidstack":
        return region.lower(), "", ""
    return region, zone, ""


def _convert_row(
    row: dict[str, str], provider: str, *, as_of: str, source: str, out: Converted
) -> None:
    instance = row.get("InstanceType", "").strip()
    name = (row.get("AcceleratorName") or "").strip()
    if not name and (provider, instance) not in instance_facts():
        _convert_cpu_row(row, provider, instance, as_of=as_of, source=source, out=out)
        return
    if "_promo" in instance.lower():
        out.skipped[f"promotional price: {instance}"] += 1
        return
    upstream = _number(row.get("AcceleratorCount"))
    count = count_of(provider, instance, upstream)
    memory, gpu_name = _gpu_info(row.get("GpuInfo"), provider, count)
    resolved = resolve(provider, instance, name, memory_gb=memory, hint=gpu_name)
    on_demand, spot = price(row.get("Price")), price(row.get("SpotPrice"))
    reason = skip_reason(resolved, count, on_demand, spot)
    if reason is not None or resolved is None:
        out.skipped[f"{reason}: {name or instance}"] += 1
        return
    region, zone, country = _location(provider, row)
    notes = () if upstream == count else (f"upstream AcceleratorCount {upstream:g} is wrong",)
    placeholder = provider == "vast"  # vCPUs/memory are fixed placeholders upstream
    out.rows.append(
        offer_row(
            provider=provider,
            region=region,
            zone=zone,
            instance_type=instance,
            resolved=resolved,
            gpu_count=int(count),
            vcpus=None if placeholder else _number(row.get("vCPUs")),
            ram_gb=None if placeholder else _number(row.get("MemoryGiB")),
            on_demand=on_demand,
            spot=spot,
            as_of=as_of,
            source=source,
            memory_gb=memory,
            notes=notes,
            cpu_arch=row.get("Arch") or "",
        )
    )
    if country:
        out.countries[(provider, region)] = country


def _convert_cpu_row(
    row: dict[str, str], provider: str, instance: str, *, as_of: str, source: str, out: Converted
) -> None:
    """A row without an accelerator: a CPU offer when its type is a kept family, else skipped."""
    if not _cpu.is_cpu_instance(provider, instance):
        out.skipped[_cpu.SKIPPED] += 1
        return
    region, zone, country = _location(provider, row)
    _cpu.append_cpu_offer(
        out,
        provider=provider,
        region=region,
        zone=zone,
        instance_type=instance,
        vcpus=_number(row.get("vCPUs")),
        ram_gb=_number(row.get("MemoryGiB")),
        on_demand=price(row.get("Price")),
        spot=price(row.get("SpotPrice")),
        as_of=as_of,
        source=source,
        cpu_arch=row.get("Arch") or "",
    )
    if country:
        out.countries[(provider, region)] = country


def _convert_gcp(rows: list[dict[str, str]], *, as_of: str, source: str) -> Converted:
    gpus: dict[tuple[str, int, str], dict[str, str]] = {}
    hosts: list[dict[str, str]] = []
    for row in rows:
        if row.get("InstanceType", "").strip():
            hosts.append(row)
        elif row.get("AcceleratorName", "").startswith("tpu-"):
            continue  # TPUs are not GPUs; no spec
        elif row.get("AcceleratorName"):
            key = (row["AcceleratorName"], int(_number(row["AcceleratorCount"])), row["Region"])
            gpus.setdefault(key, row)
    out = Converted()
    seen: set[tuple[str, str]] = set()
    for host in hosts:
        instance, region = host["InstanceType"].strip(), host["Region"].strip()
        family = instance.rsplit("-", 1)[0]
        if (instance, region) in seen:
            continue
        facts = instance_facts().get(("gcp", instance))
        if family in _GCP_FAMILY_GPU and facts is not None:
            seen.add((instance, region))
            gpu = gpus.get((_GCP_FAMILY_GPU[family], facts.gpu_count, region))
            if gpu is None:
                out.skipped[f"no GPU price row: {instance}"] += 1
                continue
            _append_gcp(out, host, gpu, instance, facts.gpu_count, as_of=as_of, source=source)
        elif _cpu.is_cpu_instance("gcp", instance):
            _convert_cpu_row(host, "gcp", instance, as_of=as_of, source=source, out=out)
        elif instance in _GCP_ATTACH_HOSTS:
            seen.add((instance, region))
            for (name, count, where), gpu in gpus.items():
                if where == region and name in _GCP_ATTACHABLE:
                    _append_gcp(
                        out,
                        host,
                        gpu,
                        f"{instance}+{count}x{name}",
                        count,
                        as_of=as_of,
                        source=source,
                    )
    return out


def _append_gcp(
    out: Converted,
    host: dict[str, str],
    gpu: dict[str, str],
    instance: str,
    count: int,
    *,
    as_of: str,
    source: str,
) -> None:
    host_od, host_spot = price(host.get("Price")), price(host.get("SpotPrice"))
    gpu_od, gpu_spot = price(gpu.get("Price")), price(gpu.get("SpotPrice"))
    notes = [_GCP_NOTE]
    if not math.isnan(gpu_spot) and not math.isnan(gpu_od) and gpu_spot >= gpu_od:
        gpu_spot = math.nan
        notes.append("upstream GPU spot price >= on-demand: no real spot quote")
    resolved: Resolved | None = resolve("gcp", instance, gpu["AcceleratorName"])
    on_demand, spot = round(host_od + gpu_od, 6), round(host_spot + gpu_spot, 6)
    reason = skip_reason(resolved, count, on_demand, spot)
    if reason is not None or resolved is None:
        out.skipped[f"{reason}: {instance}"] += 1
        return
    out.rows.append(
        offer_row(
            provider="gcp",
            region=host["Region"].strip(),
            zone=gpu.get("AvailabilityZone", ""),
            instance_type=instance,
            resolved=resolved,
            gpu_count=count,
            vcpus=_number(host.get("vCPUs")),
            ram_gb=_number(host.get("MemoryGiB")),
            on_demand=on_demand,
            spot=spot,
            as_of=as_of,
            source=source,
            notes=tuple(notes),
        )
    )
