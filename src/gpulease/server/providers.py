"""The providers this server rents on, built from the config file's ``providers`` section.

Today: ``local`` (always; settings ``providers.local.{root, gpus, accelerator}``), ``sim``
(when the config file has a ``providers.sim`` section, even an empty one: see
:class:`gpulease.providers.sim_cloud.SimSettings`) and ``aws`` (when it has a ``providers.aws``
section: see :class:`gpulease.providers.aws.AwsSettings`; its files live in ``<home>/aws``) and
``slurm`` (when it has a ``providers.slurm`` section, or none but ``SLURM_CONF`` is set in the
environment: see :class:`gpulease.providers.slurm.SlurmSettings` and docs/slurm.md; its files
live in ``<home>/slurm``).
With ``calls``, :func:`build_providers` counts every call the server makes into them
(:mod:`gpulease.server.provider_calls`: the methods are wrapped in place, the objects and their
capabilities stay the same). Moves no states.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpulease.providers.base import Provider
from gpulease.providers.registry import build_providers as build
from gpulease.providers.registry import configured_providers
from gpulease.server.provider_calls import ProviderCalls, count_calls


def provider_settings(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Settings per configured provider (``local`` is always configured)."""
    return configured_providers(config)


def build_providers(
    config: Mapping[str, Any], *, calls: ProviderCalls | None = None
) -> dict[str, Provider]:
    """Every configured provider (:func:`gpulease.providers.registry.build_providers`), their
    API calls counted in ``calls`` when given."""
    providers = build(config)
    if calls is not None:
        count_calls(providers, calls)
    return providers


def describe(
    providers: Mapping[str, Provider], settings: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """What ``gpulease check`` shows per provider."""
    from gpulease.providers.base import SupportsMultiNode, SupportsSpot, SupportsStopStart

    rows: list[dict[str, Any]] = []
    for name, provider in sorted(providers.items()):
        rows.append(
            {
                "name": name,
                "enabled": True,
                "stop_start": isinstance(provider, SupportsStopStart),
                "spot": isinstance(provider, SupportsSpot),
                "multi_node": isinstance(provider, SupportsMultiNode),
                "settings": {k: v for k, v in settings.get(name, {}).items() if k != "credentials"},
            }
        )
    for name, why in UNAVAILABLE.items():
        if name not in providers:
            rows.append({"name": name, "enabled": False, "reason": why})
    return rows


#: Providers this install knows but does not run, and what it would take.
UNAVAILABLE = {
    "sim": "not configured: add a `providers: {sim: {}}` section to the config file",
    "aws": "no providers.aws section in the config (see docs/aws.md)",
    "slurm": "no providers.slurm section in the config and no SLURM_CONF (see docs/slurm.md)",
}
