"""Task fields that only some providers honour at launch, beyond the offer they rent, and the
one warning line ``plan`` and ``launch`` say when a plan's provider ignores one.

Today that is ``resources.disk_tier``: aws sets the root EBS volume's type, IOPS and throughput
from it (:mod:`gpulease.providers.aws.volumes`); local, sim and slurm have no disk to choose and
ignore it. (``resources.disk`` is honoured by aws alone too, as the root volume's size; elsewhere
it is the node's disk as it comes, as before, and not warned about.) Moves no states.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpulease.spec import Resources

__all__ = ["DISK_TIER_PROVIDERS", "ignored_field_warnings"]

#: providers whose launches honour ``resources.disk_tier``
DISK_TIER_PROVIDERS = frozenset({"aws"})


def ignored_field_warnings(resources: Resources, providers: Iterable[str]) -> list[str]:
    """One line per field of ``resources`` that some of ``providers`` (where the task's plans
    run) ignore; none when every one honours it."""
    tier = resources.disk_tier
    ignoring = sorted(set(providers) - DISK_TIER_PROVIDERS)
    if tier is None or not ignoring:
        return []
    return [
        f"resources.disk_tier: {tier} is honoured on aws only (the root EBS volume's type); "
        f"{', '.join(ignoring)} ignore{'s' if len(ignoring) == 1 else ''} it"
    ]
