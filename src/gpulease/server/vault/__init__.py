"""gpulease.server.vault: tasks' secrets (``secrets:``) encrypted at rest in the state DB.

The API the server uses (values only ever as ``pydantic.SecretStr``; ids are not secret)::

    vault = open_vault(home, engine, config)        # config: the parsed config file
    set_id = vault.store({"HF_TOKEN": SecretStr(...)})   # -> "ss-<32 hex>"
    values = vault.load(set_id)                     # -> {"HF_TOKEN": SecretStr(...)}
    vault.delete(set_id)                            # no-op when there is none
    count = vault.rotate()                          # new key, every set re-sealed, old dropped

- ``store`` seals the JSON ``{name: value}`` with AES-256-GCM (the set id as AAD) under the
  keyring's current key, as one ``secret_sets`` row (:mod:`gpulease.state.secret_sets`); a name
  that is not an environment variable name is a ``UserInputError`` naming it.
- ``load`` raises :class:`SecretSetNotFound` (naming the set id) for a missing set and
  :class:`VaultError` for one that does not decrypt; it re-reads the keyring when a row names a
  key it does not hold (a rotation by another process, e.g. ``gpulease server
  rotate-secrets-key`` while the server runs).
- The keyring is ``<home>/secrets.keyring`` (:mod:`.keyring`: 0600, atomic, never logged);
  with ``secrets: {kms_key_id: KEY, region: R}`` in the config each key in it is KMS
  ciphertext (:mod:`.kms`), opened with KMS ``Decrypt`` when read; :class:`KmsUnavailable`
  when KMS cannot be reached. A keyring not wrapped as the config says is a ``UserInputError``
  that says to rotate (the rotation writes the new keyring as the config says).
- :mod:`.vault`: the class and the rotation protocol; :mod:`.command`: ``python -m
  gpulease.server rotate-secrets-key``.

Never logs a value or a key. Moves no states.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from gpulease.config import secrets_settings
from gpulease.errors import UserInputError
from gpulease.server.vault.errors import KmsUnavailable, SecretSetNotFound, VaultError
from gpulease.server.vault.keyring import KEYRING_FILE
from gpulease.server.vault.kms import KmsWrap
from gpulease.server.vault.vault import Vault

__all__ = [
    "KEYRING_FILE",
    "KmsUnavailable",
    "SecretSetNotFound",
    "Vault",
    "VaultError",
    "configured_kms",
    "open_vault",
]


def configured_kms(config: Mapping[str, Any]) -> KmsWrap | None:
    """The KMS wrap the config's ``secrets`` section asks for (None: raw keys)."""
    settings = secrets_settings(config)
    if settings.kms_key_id is None:
        return None
    return KmsWrap(key_id=settings.kms_key_id, region=settings.region)


def open_vault(home: Path, engine: Engine, config: Mapping[str, Any]) -> Vault:
    """The vault of this home and state DB (its keyring created when missing, wrapped as the
    config says); a keyring wrapped otherwise than the config says is a ``UserInputError``."""
    kms = configured_kms(config)
    vault = Vault(engine, home / KEYRING_FILE, kms)
    found = vault.file_kms
    if found != kms:
        now = f"wrapped by {found.where()}" if found else "not wrapped by KMS"
        wanted = f"wrapped by {kms.where()}" if kms else "not wrapped by KMS"
        raise UserInputError(
            f"secrets.kms_key_id: the keyring {vault.path} is {now}, the config says "
            f"{wanted}: run `gpulease server rotate-secrets-key` to rewrite it"
        )
    return vault
