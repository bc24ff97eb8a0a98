"""Hard constraints of a task's ``resources`` and ``data_policy``, applied to the offer table.

Order matters only for the explanation: each rejected offer is explained by the first constraint it
fails, in the order a user reads a task file (instance type, accelerators, host CPU
architecture, providers, regions, GPU or CPU only, data policy, host size, pricing availability);
GPU or CPU only comes after the where-filters so that its line names offers the task could
otherwise have had.

A task without ``resources.accelerators`` and without ``resources.instance_type`` means CPU only
when it has no workload (GPU offers are rejected), and GPUs when it has one (a training or
inference estimate needs accelerator figures: CPU-only offers are rejected); see
:func:`_gpu_or_cpu_only`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from gpulease.catalog.types import OfferTable
from gpulease.optimizer.funnel import Funnel, Mask, examples
from gpulease.policy import DataClass, evaluate_data_policy
from gpulease.spec.models import Resources
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
    ``workload``) only decides what a task without accelerators means."""
    _instance_type(funnel, offers, resources.instance_type)
    _accelerators(funnel, offers, resources)
    _cpu_arch(funnel, offers, resources.cpu_arch)
    _providers(funnel, offers, resources)
    _regions(funnel, offers, resources)
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
    names = list(request.choices)
    funnel.apply(
        np.isin(offers.accelerator, names),
        lambda m: (
            f"accelerator not requested (asked for {', '.join(names)}; "
            f"these have {examples(offers.accelerator[m])})"
        ),
    )
    count_ok = np.ones(len(offers), dtype=bool)
    for name, count in request.choices.items():
        if count is not None:
            count_ok &= ~((offers.accelerator == name) & (offers.gpu_count != count))
    funnel.apply(count_ok, lambda m: _count_reason(offers, m, request.choices))


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


def _count_reason(offers: OfferTable, removed: Mask, choices: Mapping[str, int | None]) -> str:
    parts = []
    for name, count in choices.items():
        here = removed & (offers.accelerator == name)
        if count is not None and here.any():
            have = examples(int(c) for c in set(offers.gpu_count[here].tolist()))
            parts.append(f"{name}:{count} asked, these nodes have {have}")
    return "GPUs per node differ from the request (" + "; ".join(parts) + ")"


DEFAULT_CPU_ARCH = "x86_64"


def _cpu_arch(funnel: Funnel, offers: OfferTable, wanted: str) -> None:
    """Keep hosts of the architecture asked (``any``: all); one line per architecture removed,
    naming its instance types and how to ask for them. Under the default (``x86_64``) the
    ``local`` provider's offers always pass: they are this machine, which already runs the
    user's environment whatever its CPU (an arm64 laptop's quickstart just works); asking for
    ``arm64`` still leaves an x86_64 machine out."""
    if wanted == "any":
        return
    passing = offers.cpu_arch == wanted
    if wanted == DEFAULT_CPU_ARCH:
        passing = passing | (offers.provider == "local")
    removed = funnel.alive & ~passing
    for arch in sorted(set(offers.cpu_arch[removed].tolist())):
        these = removed & (offers.cpu_arch == arch)
        funnel.apply(
            ~these,
            f"host CPU {arch}, the task asks {wanted}: {examples(offers.instance_type[these])} "
            f"(resources.cpu_arch: {arch} or any to allow them)",
        )


def _providers(funnel: Funnel, offers: OfferTable, resources: Resources) -> None:
    if resources.providers:
        allowed = [p.lower() for p in resources.providers]
        funnel.apply(
            np.isin(offers.provider, allowed),
            lambda m: (
                f"provider not in the allow-list {', '.join(allowed)} "
                f"({examples(offers.provider[m])})"
            ),
        )
    if resources.exclude_providers:
        excluded = [p.lower() for p in resources.exclude_providers]
        funnel.apply(
            ~np.isin(offers.provider, excluded),
            lambda m: f"provider excluded ({examples(offers.provider[m])})",
        )


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
