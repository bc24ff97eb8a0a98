"""The vault's keyring file, ``<home>/secrets.keyring``, beside ``server.key`` and
``server.token`` (:mod:`gpulease.server.keys`): 0600 in the 0700 home, created atomically (a
racing second creator reads the first one's), replaced atomically, never logged.

Its content is JSON::

    {"format": 1, "current": "k-<16 hex>", "kms": null | {"key_id": KEY, "region": R},
     "keys": {"k-<16 hex>": "<base64>", ...}}

``current`` seals new sets; every key listed opens the sets sealed with it. Without ``kms``
each key is its 32 raw bytes in base64; with it, the base64 of the KMS ``Encrypt`` ciphertext of
those bytes (:class:`~gpulease.server.vault.kms.KmsWrap`), opened with KMS ``Decrypt`` when the
file is read. A file is always read by its own ``kms`` entry; the config's ``secrets`` section
only says how the next file is written (a rotation re-wraps).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulease.atomic import write_atomic
from gpulease.server.vault.errors import VaultError
from gpulease.server.vault.kms import KmsWrap

KEYRING_FILE = "secrets.keyring"
FORMAT = 1
KEY_BYTES = 32  # AES-256


@dataclass(frozen=True)
class Keyring:
    """The keys in memory (raw bytes, never in a repr), which one is current, and the wrap the
    file was (or will be) written with."""

    current: str
    keys: Mapping[str, bytes] = field(repr=False)
    kms: KmsWrap | None = None

    def key(self, key_id: str) -> bytes | None:
        return self.keys.get(key_id)


def new_key_id() -> str:
    return f"k-{secrets.token_hex(8)}"


def new_keyring(kms: KmsWrap | None, keep: Mapping[str, bytes] | None = None) -> Keyring:
    """A keyring whose current key is new; ``keep``: older keys it still holds."""
    key_id = new_key_id()
    keys = {**(keep or {}), key_id: secrets.token_bytes(KEY_BYTES)}
    return Keyring(current=key_id, keys=keys, kms=kms)


def encode(ring: Keyring) -> bytes:
    """The file's bytes for ``ring`` (keys wrapped by ``ring.kms`` when set)."""

    def stored(name: str, raw: bytes) -> str:
        sealed = ring.kms.wrap(name, raw) if ring.kms else raw
        return base64.b64encode(sealed).decode("ascii")

    kms = {"key_id": ring.kms.key_id, "region": ring.kms.region} if ring.kms else None
    keys = {name: stored(name, raw) for name, raw in ring.keys.items()}
    doc = {"format": FORMAT, "current": ring.current, "kms": kms, "keys": keys}
    return (json.dumps(doc, indent=1) + "\n").encode("utf-8")


def decode(path: Path, data: bytes) -> Keyring:
    """The keyring in ``data`` (``path`` names it in errors), KMS-wrapped keys opened."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise VaultError(f"{path}: not a keyring (not JSON)") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise VaultError(f"{path}: not a keyring of format {FORMAT}")
    kms = _kms_of(path, doc.get("kms"))
    keys = doc.get("keys")
    if not isinstance(keys, dict) or not keys:
        raise VaultError(f"{path}: keys: expected a mapping of key id to key")
    opened = {str(name): _open_key(path, str(name), value, kms) for name, value in keys.items()}
    current = doc.get("current")
    if not isinstance(current, str) or current not in opened:
        raise VaultError(f"{path}: current: not one of the keys listed")
    return Keyring(current=current, keys=opened, kms=kms)


def _kms_of(path: Path, value: Any) -> KmsWrap | None:
    if value is None:
        return None
    key_id = value.get("key_id") if isinstance(value, dict) else None
    region = value.get("region") if isinstance(value, dict) else None
    if not isinstance(key_id, str) or not (region is None or isinstance(region, str)):
        raise VaultError(f"{path}: kms: expected {{key_id, region}}")
    return KmsWrap(key_id=key_id, region=region)


def _open_key(path: Path, name: str, value: Any, kms: KmsWrap | None) -> bytes:
    try:
        stored = base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raise VaultError(f"{path}: keys.{name}: not base64") from None
    raw = kms.unwrap(name, stored) if kms else stored
    if len(raw) != KEY_BYTES:
        raise VaultError(f"{path}: keys.{name}: not a {KEY_BYTES}-byte key")
    return raw


def read_bytes(path: Path) -> bytes:
    """The file's bytes (its mode put back to 0600 when it was opened up)."""
    try:
        if path.stat().st_mode & 0o077:
            path.chmod(0o600)
        return path.read_bytes()
    except FileNotFoundError:
        raise VaultError(f"{path}: no keyring (the vault creates it on first use)") from None


def write(path: Path, ring: Keyring, *, exclusive: bool = False) -> bytes:
    """Write ``ring`` to ``path`` atomically, 0600 from the first byte; the bytes written.
    ``exclusive``: only if there is no file yet (``FileExistsError`` otherwise, nothing
    written)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    data = encode(ring)
    write_atomic(path, data, mode=0o600, exclusive=exclusive)
    return data


def ensure(path: Path, kms: KmsWrap | None) -> None:
    """Create the keyring with one fresh key when there is none (a racing creator wins)."""
    if path.exists():
        return
    with contextlib.suppress(FileExistsError):
        write(path, new_keyring(kms), exclusive=True)
