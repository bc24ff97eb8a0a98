"""The vault's errors. A message names a set id, a key id, a file or a KMS key — never a value
nor key material."""

from __future__ import annotations

from gpulease.errors import Permanent, Retryable


class VaultError(Permanent):
    """The vault cannot do what was asked: a keyring that cannot be read or a set that does not
    decrypt (the message says which and why)."""


class SecretSetNotFound(VaultError):
    """No secret set with this id (deleted, or never stored); ``set_id`` names it."""

    def __init__(self, set_id: str) -> None:
        super().__init__(f"secret set {set_id}: not in the vault (deleted, or never stored)")
        self.set_id = set_id


class KmsUnavailable(Retryable):
    """AWS KMS could not be reached or refused the call (the keyring's keys stay sealed)."""
