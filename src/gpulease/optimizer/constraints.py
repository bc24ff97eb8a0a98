"""Hard constraints of a task's ``resources`` and ``data_policy``, applied to the offer table.

Order matters only for the explanation: each rejected offer is explained by the first constraint it
fails, in the order a user reads a task file (instance type, accelerators, host CPU
architecture, providers, regions, zones, candidates, GPU or CPU only, data policy, host size,
network tier, pricing availability); GPU or CPU only comes after the where-filters so that its
line names offers the task could otherwise have had.

A task without ``resources.accelerators`` and without ``resources.instance_type`` means CPU only
when it has no workload (GPU offers are rejected), and GPUs when it has one (a training or
inference estimate needs accelerator figures: CPU-only offers are rejected); see
:func:`_gpu_or_cpu_only`. A task with ``resources.candidates`` (SkyPilot's any_of/ordered entries
that pair accelerators with places) is filtered by them instead of by its accelerators.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from gpulease.catalog.types import OfferTable
from gpulease.optimizer.funnel import Funnel, Mask, examples
from gpulease.policy import DataClass, evaluate_data_policy
from gpulease.spec.models import Candidate, Resources
from gpulease.units import Minimum


def apply_resource_constraints(
    funnel: Funnel,
    offers: OfferTable,
    resources: Resources,
    *,
    data_classes: Sequence[DataClass],
    countries: np.ndarray,
    has_workload: bool,
) -> None:
    """Narrow ``funnel`` by everything in ``resources``; ``has_workload`` (the task has a
    ``workload``) only decides what a task (or a candidate) without accelerators means."""
    _instance_type(funnel, offers, resources.instance_type)
    if resources.candidates is None:
        _accelerators(funnel, offers, resources)
    _cpu_arch(funnel, offers, resources)
    _providers(funnel, offers, resources)
    _regions(funnel, offers, resources)
    _zones(funnel, offers, resources.zones)
    if resources.candidates is not None:
        _candidates(funnel, offers, resources.candidates, has_workload=has_workload)
    else:
        _gpu_or_cpu_only(funnel, offers, resources, has_workload=has_workload)
    if data_classes:
        verdict = evaluate_data_policy(
            data_classes,
            provider=offers.provider,
            region=offers.region,
            country=countries,
            certifications=offers.certifications,
            alive=funnel.alive,
        )
        funnel.alive &= verdict.allowed
        for reason, count in verdict.reasons:
            funnel.reject(reason, count)
    _host_minimum(funnel, offers.vcpus, resources.cpus, "vCPUs", "cpus")
    _host_minimum(funnel, offers.ram_gb, resources.memory, "GB of RAM", "memory")
    _network_tier(funnel, offers, resources.network_tier)


def _instance_type(funnel: Funnel, offers: OfferTable, wanted: str | None) -> None:
    if wanted:
        funnel.apply(
            offers.instance_type == wanted,
            lambda m: f"instance type is not {wanted} ({examples(offers.instance_type[m])})",
        )


def _accelerators(funnel: Funnel, offers: OfferTable, resources: Resources) -> None:
    request = resources.accelerators
    if request is None:
        return
    names = list(request.names)
    funnel.apply(
        np.isin(offers.accelerator, names),
        lambda m: (
            f"accelerator not requested (asked for {', '.join(names)}; "
            f"these have {examples(offers.accelerator[m])})"
        ),
    )
    count_ok = np.zeros(len(offers), dtype=bool)
    for name, count in request.options:
        same = offers.accelerator == name
        count_ok |= same if count is None else same & (offers.gpu_count == count)
    funnel.apply(count_ok, lambda m: _count_reason(offers, m, request.options))


def _gpu_or_cpu_only(
    funnel: Funnel, offers: OfferTable, resources: Resources, *, has_workload: bool
) -> None:
    """What a task that names neither accelerators nor an instance type runs on: CPU-only offers
    (``gpu_count`` 0) without a workload, GPU offers with one. An explicit ``instance_type`` is
    honoured whatever it is; named accelerators are :func:`_accelerators`' business."""
    if resources.accelerators is not None or resources.instance_type:
        return
    cpu_only = offers.gpu_count == 0
    if has_workload:
        funnel.apply(
            ~cpu_only,
            lambda m: (
                f"CPU only, the workload needs a GPU: {examples(offers.instance_type[m])} "
                "(resources.accelerators picks one)"
            ),
        )
    else:
        funnel.apply(
            cpu_only,
            lambda m: (
                f"has GPUs, the task asks for none: {examples(offers.instance_type[m])} "
                "(add resources.accelerators to use a GPU)"
            ),
        )


def _count_reason(
    offers: OfferTable, removed: Mask, options: Sequence[tuple[str, int | None]]
) -> str:
    parts = []
    for name in dict.fromkeys(name for name, _ in options):
        counts = [count for option, count in options if option == name]
        here = removed & (offers.accelerator == name)
        if None not in counts and here.any():
            have = examples(int(c) for c in set(offers.gpu_count[here].tolist()))
            asked = " or ".join(f"{name}:{count}" for count in counts)
            parts.append(f"{asked} asked, these nodes have {have}")
    return "GPUs per node differ from the request (" + "; ".join(parts) + ")"


DEFAULT_CPU_ARCH = "x86_64"


def _cpu_arch(funnel: Funnel, offers: OfferTable, resources: Resources) -> None:
    """Keep hosts of the architecture asked (``any``: all); one line per architecture removed,
    naming its instance types and how to ask for them. Under the default (``x86_64``) the
    ``local`` provider's offers always pass: they are this machine, which already runs the
    user's environment whatever its CPU (an arm64 laptop's quickstart just works); asking for
    ``arm64`` still leaves an x86_64 machine out. Left unset, the default also lets in an
    accelerator the task names that only comes with an arm64 host (GH200, GB200: Grace)."""
    wanted = resources.cpu_arch
    if wanted == "any":
        return
    passing = offers.cpu_arch == wanted
    if wanted == DEFAULT_CPU_ARCH:
        passing = passing | (offers.provider == "local")
        if "cpu_arch" not in resources.model_fields_set:
            passing = passing | _arm_only_parts_asked(offers, resources)
    removed = funnel.alive & ~passing
    for arch in sorted(set(offers.cpu_arch[removed].tolist())):
        these = removed & (offers.cpu_arch == arch)
        funnel.apply(
            ~these,
            f"host CPU {arch}, the task asks {wanted}: {examples(offers.instance_type[these])} "
            f"(resources.cpu_arch: {arch} or any to allow them)",
        )


def _arm_only_parts_asked(offers: OfferTable, resources: Resources) -> Mask:
    """Offers of an accelerator the task asks for by name that no x86_64 host carries."""
    found = np.zeros(len(offers), dtype=bool)
    request = resources.accelerators
    for name in request.names if request else ():
        these = offers.accelerator == name
        if these.any() and not (these & (offers.cpu_arch == DEFAULT_CPU_ARCH)).any():
            found |= these
    return found


def _providers(funnel: Funnel, offers: OfferTable, resources: Resources) -> None:
    if resources.providers:
        allowed = [p.lower() for p in resources.providers]
        absent = _absent_providers(offers, allowed)
        funnel.apply(
            np.isin(offers.provider, allowed),
            lambda m: (
                f"provider not in the allow-list {', '.join(allowed)} "
                f"({examples(offers.provider[m])}){absent}"
            ),
        )
    if resources.exclude_providers:
        excluded = [p.lower() for p in resources.exclude_providers]
        funnel.apply(
            ~np.isin(offers.provider, excluded),
            lambda m: f"provider excluded ({examples(offers.provider[m])})",
        )


def _absent_providers(offers: OfferTable, allowed: Sequence[str]) -> str:
    """Why an allowed provider has no offers at all: gpulease has no such provider (yet), or
    this install does not sell through it."""
    missing = [name for name in allowed if not (offers.provider == name).any()]
    notes = [
        "gpulease has no Kubernetes provider yet"
        if name == "kubernetes"
        else f"{name} has no offers in this install's catalog"
        for name in missing
    ]
    return "; " + "; ".join(notes) if notes else ""


def _regions(funnel: Funnel, offers: OfferTable, resources: Resources) -> None:
    if resources.regions:
        allowed = list(resources.regions)
        in_list = np.isin(offers.region, allowed) | np.isin(offers.zone, allowed)
        funnel.apply(
            in_list,
            lambda m: (
                f"region not in the allow-list {', '.join(allowed)} ({examples(offers.region[m])})"
            ),
        )
    if resources.exclude_regions:
        excluded = list(resources.exclude_regions)
        out = ~(np.isin(offers.region, excluded) | np.isin(offers.zone, excluded))
        funnel.apply(out, lambda m: f"region excluded ({examples(offers.region[m])})")


_ZONE_SUFFIX = re.compile(r"-?[a-z]$")


def region_of_zone(zone: str) -> str:
    """The region a zone name implies: ``us-east-1a`` → ``us-east-1``, ``us-central1-a`` →
    ``us-central1``; a name without a zone letter (Azure's ``1``) is its own answer."""
    return _ZONE_SUFFIX.sub("", zone.strip())


def zone_mask(offers: OfferTable, zones: Sequence[str]) -> Mask:
    """Offers in one of ``zones``. An offer whose zone is not named after its region (no zone,
    or an AWS zone id such as ``use1-az1``, which maps to names differently in every account)
    is in a zone when its region is the zone's region: the launch then asks for the zone."""
    regions = [region_of_zone(zone) for zone in zones]
    named = np.char.startswith(offers.zone.astype(str), offers.region.astype(str))
    ok: Mask = np.isin(offers.zone, list(zones)) | (~named & np.isin(offers.region, regions))
    return ok


def _zones(funnel: Funnel, offers: OfferTable, zones: Sequence[str] | None) -> None:
    if not zones:
        return
    wanted = list(zones)
    funnel.apply(
        zone_mask(offers, wanted),
        lambda m: (
            f"zone not in the allow-list {', '.join(wanted)} "
            f"({examples(np.where(offers.zone[m] == '', offers.region[m], offers.zone[m]))})"
        ),
    )


def candidate_mask(offers: OfferTable, candidate: Candidate, *, has_workload: bool) -> Mask:
    """Offers that match one candidate: its accelerators (none: a CPU instance, or any GPU for
    a workload) in its providers, regions and zones."""
    ok = np.zeros(len(offers), dtype=bool)
    request = candidate.accelerators
    if request is None:
        ok = offers.gpu_count > 0 if has_workload else offers.gpu_count == 0
    else:
        for name, count in request.options:
            same = offers.accelerator == name
            ok |= same if count is None else same & (offers.gpu_count == count)
    if candidate.providers:
        ok &= np.isin(offers.provider, [p.lower() for p in candidate.providers])
    if candidate.regions:
        ok &= np.isin(offers.region, candidate.regions) | np.isin(offers.zone, candidate.regions)
    if candidate.zones:
        ok &= zone_mask(offers, candidate.zones)
    result: Mask = ok
    return result


def describe_candidate(candidate: Candidate) -> str:
    """``A100:8 on aws/us-east-1``, ``CPU on aws``."""
    request = candidate.accelerators
    what = (
        " or ".join(name if c is None else f"{name}:{c}" for name, c in request.options)
        if request
        else "CPU"
    )
    where = [",".join(v) for v in (candidate.providers, candidate.regions, candidate.zones) if v]
    return what + (f" on {'/'.join(where)}" if where else "")


def _candidates(
    funnel: Funnel, offers: OfferTable, candidates: Sequence[Candidate], *, has_workload: bool
) -> None:
    ok = np.zeros(len(offers), dtype=bool)
    for candidate in candidates:
        ok |= candidate_mask(offers, candidate, has_workload=has_workload)
    listed = "; ".join(describe_candidate(c) for c in candidates)

    def reason(removed: Mask) -> str:
        shapes = np.char.add(offers.accelerator[removed].astype(str), " on ")
        return f"not one of the task's candidates ({listed}); these are " + examples(
            np.char.add(shapes, offers.provider[removed].astype(str))
        )

    funnel.apply(ok, reason)


def _host_minimum(
    funnel: Funnel, values: np.ndarray, wanted: Minimum | None, unit: str, field: str
) -> None:
    if wanted is None:
        return
    ok = values >= wanted.value if wanted.at_least else values == wanted.value
    funnel.apply(
        ok,
        lambda m: (
            f"{field}: {wanted} {unit} asked per node; these have "
            f"{examples(f'{v:g}' for v in set(values[m].tolist()))}"
        ),
    )


FAST_FABRICS = ("efa", "infiniband", "roce")
FAST_NETWORK_GBPS = 100.0


def _network_tier(funnel: Funnel, offers: OfferTable, tier: str | None) -> None:
    """``network_tier: best`` keeps the offers the catalog knows to have a fast interconnect:
    an EFA, InfiniBand or RoCE fabric, or at least 100 Gbps; ``standard`` keeps every offer."""
    if tier != "best":
        return
    fast = np.isin(offers.fabric, FAST_FABRICS) | (offers.network_gbps >= FAST_NETWORK_GBPS)
    funnel.apply(
        fast,
        lambda m: (
            "resources.network_tier: best asks for EFA, InfiniBand, RoCE or ≥ 100 Gbps; these "
            f"have {examples(_network_of(offers, m))} "
            f"({examples(offers.instance_type[m])})"
        ),
    )


def _network_of(offers: OfferTable, removed: Mask) -> list[str]:
    """``ethernet 25 Gbps`` / ``ethernet`` (speed unknown) for each removed offer."""
    speeds = offers.network_gbps[removed]
    fabrics = offers.fabric[removed]
    return [
        f"{fabric} {speed:g} Gbps" if np.isfinite(speed) else f"{fabric}"
        for fabric, speed in zip(fabrics.tolist(), speeds.tolist(), strict=True)
    ]
