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
``containers``
    credentials for the registries task images are pulled from:
    ``containers.registries: {ghcr.io: {username, password_env: GHCR_TOKEN}}`` — the password
    only by the name of its environment variable (see below, docs/containers.md).
``secrets``
    how the server's vault keeps its keyring (``<home>/secrets.keyring``):
    ``secrets: {kms_key_id: KEY, region: R}`` wraps every key in it with that AWS KMS key
    (:func:`secrets_settings`; see :mod:`gpulease.server.vault`, docs/server.md).

Registry credentials (:func:`registry_entries`, :func:`resolve_credential`): each key of
``containers.registries`` is a registry host (with its port, as
:func:`gpulease.spec.container_image.registry_of` names it); ``username`` is given in the file,
the password only by the name of an environment variable (``password_env``), read when the
credential is resolved — never written in the config file, so it is not in the state DB, a run
document or a NodeTask either (those carry the registry's name). A resolved
:class:`RegistryCredential` holds the password as a pydantic ``SecretStr``: its repr, ``str``
and JSON dump show ``**********``; only :meth:`RegistryCredential.secret` gives the text, for
the one call that logs in. Bad input raises :class:`~gpulease.errors.UserInputError` naming the
field.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from gpulease.errors import UserInputError

__all__ = [
    "RegistryCredential",
    "RegistryEntry",
    "SecretsSettings",
    "config_path",
    "home",
    "load_config",
    "registry_entries",
    "resolve_credential",
    "secrets_settings",
]


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


# --- container registry credentials (containers.registries) --------------------------------

_SECTION = "containers.registries"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOST = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$")


class RegistryCredential(BaseModel):
    """A username and password for one registry; the password never shows (SecretStr)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    registry: str
    username: str = Field(min_length=1)
    password: SecretStr

    def secret(self) -> str:
        """The password's text, for the login call only (never log it)."""
        return self.password.get_secret_value()


@dataclass(frozen=True, slots=True)
class RegistryEntry:
    """One ``containers.registries`` entry as configured: names only, no secret."""

    registry: str
    username: str
    password_env: str


def registry_entries(config: Mapping[str, Any]) -> dict[str, RegistryEntry]:
    """The configured registries by host (lower-cased); ``{}`` without the section."""
    containers = config.get("containers") or {}
    if not isinstance(containers, Mapping):
        raise UserInputError("containers: expected a mapping (registries: {HOST: {...}})")
    registries = containers.get("registries") or {}
    if not isinstance(registries, Mapping):
        raise UserInputError(f"{_SECTION}: expected a mapping of registry host to credentials")
    return {str(host).lower(): _entry(str(host), spec) for host, spec in registries.items()}


def _entry(host: str, spec: Any) -> RegistryEntry:
    where = f"{_SECTION}.{host}"
    if not _HOST.match(host.lower()):
        raise UserInputError(f"{where}: not a registry host (as in ghcr.io or localhost:5000)")
    if not isinstance(spec, Mapping):
        raise UserInputError(f"{where}: expected {{username, password_env}}")
    unknown = sorted(set(map(str, spec)) - {"username", "password_env"})
    if "password" in unknown:
        raise UserInputError(
            f"{where}.password: a password is never written in the config file; "
            "name the environment variable that holds it with password_env"
        )
    if unknown:
        raise UserInputError(f"{where}.{unknown[0]}: unknown field (username, password_env)")
    username, env = spec.get("username"), spec.get("password_env")
    if not isinstance(username, str) or not username.strip():
        raise UserInputError(f"{where}.username: expected the registry user name (text)")
    if not isinstance(env, str) or not _ENV_NAME.match(env):
        raise UserInputError(
            f"{where}.password_env: expected an environment variable name, as in GHCR_TOKEN"
        )
    return RegistryEntry(registry=host.lower(), username=username.strip(), password_env=env)


def resolve_credential(
    entries: Mapping[str, RegistryEntry], registry: str, environ: Mapping[str, str]
) -> RegistryCredential | None:
    """The credential for ``registry`` read from ``environ``; None when none is configured
    (an anonymous pull). A configured one whose variable is unset or empty is an error naming
    the variable (not its value)."""
    entry = entries.get(registry.lower())
    if entry is None:
        return None
    password = environ.get(entry.password_env, "")
    if not password:
        raise UserInputError(
            f"{_SECTION}.{entry.registry}.password_env: the environment variable "
            f"{entry.password_env} is not set (it holds the registry password)"
        )
    return RegistryCredential(
        registry=entry.registry, username=entry.username, password=SecretStr(password)
    )


# --- the vault's keyring (secrets) ---------------------------------------------------------

_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]+$")


@dataclass(frozen=True, slots=True)
class SecretsSettings:
    """The ``secrets`` section: the KMS key that wraps the vault's keyring (None: not wrapped)
    and its region (None: boto3's usual chain, e.g. ``AWS_DEFAULT_REGION``)."""

    kms_key_id: str | None = None
    region: str | None = None


def secrets_settings(config: Mapping[str, Any]) -> SecretsSettings:
    """The ``secrets`` section, checked; bad input names the field."""
    section = config.get("secrets")
    if section is None:
        return SecretsSettings()
    if not isinstance(section, Mapping):
        raise UserInputError("secrets: expected a mapping ({kms_key_id: KEY, region: R})")
    unknown = sorted(set(map(str, section)) - {"kms_key_id", "region"})
    if unknown:
        raise UserInputError(f"secrets.{unknown[0]}: unknown field (kms_key_id, region)")
    key, region = section.get("kms_key_id"), section.get("region")
    if key is not None and (not isinstance(key, str) or not key.strip()):
        raise UserInputError(
            "secrets.kms_key_id: expected a KMS key id, ARN or alias (text), as in alias/gpulease"
        )
    if region is not None and (not isinstance(region, str) or not _REGION.match(region)):
        raise UserInputError(
            f"secrets.region: expected an AWS region such as us-east-1, not {region!r}"
        )
    if region is not None and key is None:
        raise UserInputError("secrets.region: only with secrets.kms_key_id (the KMS key's region)")
    return SecretsSettings(kms_key_id=key.strip() if key else None, region=region)
