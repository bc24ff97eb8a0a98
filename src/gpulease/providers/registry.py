"""The providers this install runs, built from the config file, and the catalog they plan over.

- :func:`configured_providers`: settings per provider: ``local`` always, ``sim``, ``aws`` and
  ``slurm`` when the config file has a ``providers.<name>`` section (even an empty one); ``slurm``
  also, with defaults, when there is no such section but ``SLURM_CONF`` is set;
- :func:`build_providers`: the provider objects (each module imported only when configured);
- :func:`runtime_catalog`: the public catalog plus what each provider that
  :class:`~gpulease.providers.base.SupportsOffers` sells now, through its own backends (this
  machine; the sim's copy of the catalog; a Slurm cluster's partitions over its commands, ssh or
  slurmrestd). The server (for ``launch``) and the in-process ``gpulease plan`` both plan over
  it, so they see the same offers.

Moves no states.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from gpulease.providers.base import Provider, SupportsOffers

if TYPE_CHECKING:
    from gpulease.catalog import Catalog

#: providers that sell offers of their own (the others sell what the public catalog lists)
SELLERS = frozenset({"local", "sim", "slurm"})


def configured_providers(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Settings per provider this install runs (``local`` always)."""
    section = dict(config.get("providers") or {})
    settings = {"local": dict(section.get("local") or {})}
    for name in ("sim", "aws", "slurm"):
        if name in section:
            settings[name] = dict(section.get(name) or {})
    if "slurm" not in settings and os.environ.get("SLURM_CONF"):
        settings["slurm"] = {}
    return settings


def build_providers(
    config: Mapping[str, Any], *, only: Collection[str] | None = None
) -> dict[str, Provider]:
    """The configured providers (of ``only``, when given), with their files under the home."""
    from gpulease.config import home

    settings = configured_providers(config)
    wanted = [n for n in settings if only is None or n in only]
    providers: dict[str, Provider] = {}
    for name in wanted:
        providers[name] = _build(name, config, settings[name], home())
    return providers


def _build(name: str, config: Mapping[str, Any], section: dict[str, Any], root: Any) -> Provider:
    if name == "local":
        from gpulease.providers.local import LocalProvider

        return LocalProvider.from_config(config)
    if name == "sim":
        from gpulease.providers.sim import SimProvider

        return SimProvider.from_config(section, root / "sim")
    if name == "aws":
        from gpulease.providers.aws import AwsProvider

        return AwsProvider.from_config(section, root / "aws")
    from gpulease.providers.slurm import SlurmProvider

    return SlurmProvider.from_config(section, root / "slurm")


def runtime_catalog(providers: Mapping[str, Provider], base: Catalog | None = None) -> Catalog:
    """``base`` (default: the bundled or refreshed catalog) plus every provider's own offers."""
    from gpulease.catalog import Catalog

    public = base or Catalog.load()
    catalog = public
    for name, provider in sorted(providers.items()):
        if isinstance(provider, SupportsOffers):
            sold = provider.offers(public)
            catalog = catalog.with_offers(sold.table, label=name, specs=sold.specs)
    return catalog
