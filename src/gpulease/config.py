"""Where gpulease keeps its files, and the user's config file.

The home is ``$GPULEASE_HOME`` or ``~/.gpulease``. The config file is ``<home>/config.yaml``; it is
optional, and every section in it is optional. Sections read so far:

``pricing``
    the user's negotiated discounts, ``pricing.discounts`` (see
    :mod:`gpulease.catalog.commitments`; docs/cost-tco.md).
``data_classes``
    user-defined data-policy classes (see :mod:`gpulease.policy`).
``budgets``
    spend caps per calendar period that warn, block launches or stop clusters (see
    :mod:`gpulease.cost.budgets`, docs/cost-budgets.md).
``cost``
    what the checkpoint stores cost to keep: ``cost.storage_usd_per_gb_month`` (per scheme,
    ``{s3: 0.023, local: 0}`` by default — AWS S3 Standard us-east-1 list price, read
    2026-12-01 — or one number for every scheme) and ``cost.storage_measure_every`` (how often
    each store's bytes are counted, default ``1h``); see :mod:`gpulease.storage.pricing`,
    docs/cost-ledger.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpulease.errors import UserInputError


def home() -> Path:
    """The gpulease home directory (not created)."""
    env = os.environ.get("GPULEASE_HOME")
    return Path(env).expanduser() if env else Path.home() / ".gpulease"


def config_path() -> Path:
    return home() / "config.yaml"


def load_config(path: Path | None = None) -> dict[str, Any]:
    """The parsed config file, or ``{}`` when there is none."""
    import yaml

    path = path or config_path()
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise UserInputError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserInputError(f"{path}: the config file must be a mapping of sections")
    return data
