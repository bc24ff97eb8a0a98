"""The optional KMS wrap of the vault's keyring: each key is stored as AWS KMS ``Encrypt``
ciphertext and opened with ``Decrypt`` when the keyring is read, so the keyring file alone (a
backup, a copied home) does not give the keys.

The boto3 client is built as the aws provider builds its clients (:mod:`gpulease.providers.aws
.clients`: a plain ``boto3.session.Session()``, credentials from boto3's usual chain,
``AWS_ENDPOINT_URL`` honoured — the tests' moto server), with short timeouts and few retries:
a KMS that cannot be reached is a :class:`~gpulease.server.vault.errors.KmsUnavailable` naming
the KMS key and region, not a hang. Each call carries the encryption context
``{"gpulease": "secrets.keyring", "key": <keyring key id>}``, so a wrapped key cannot be passed
off as another. Nothing here logs a request, a key or a credential.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpulease.server.vault.errors import KmsUnavailable

_CONTEXT = "secrets.keyring"


@dataclass(frozen=True, slots=True)
class KmsWrap:
    """The KMS key (id, ARN or alias) that wraps the keyring, and its region (None: boto3's
    chain)."""

    key_id: str
    region: str | None = None

    def where(self) -> str:
        return f"KMS key {self.key_id} ({self.region or 'default region'})"

    def _client(self) -> Any:
        import boto3
        from botocore.config import Config

        config = Config(
            connect_timeout=5, read_timeout=15, retries={"max_attempts": 2, "mode": "standard"}
        )
        try:
            return boto3.session.Session().client("kms", region_name=self.region, config=config)
        except Exception as exc:  # NoRegionError and the like: botocore's own classes
            raise KmsUnavailable(f"{self.where()}: no KMS client: {_reason(exc)}") from None

    def wrap(self, name: str, raw: bytes) -> bytes:
        """KMS ``Encrypt`` of keyring key ``name``'s bytes."""
        client = self._client()
        try:
            answer = client.encrypt(
                KeyId=self.key_id, Plaintext=raw, EncryptionContext=_context(name)
            )
        except Exception as exc:
            raise KmsUnavailable(f"{self.where()}: Encrypt failed: {_reason(exc)}") from None
        return bytes(answer["CiphertextBlob"])

    def unwrap(self, name: str, blob: bytes) -> bytes:
        """KMS ``Decrypt`` of keyring key ``name``'s wrapped bytes."""
        client = self._client()
        try:
            answer = client.decrypt(
                KeyId=self.key_id, CiphertextBlob=blob, EncryptionContext=_context(name)
            )
        except Exception as exc:
            raise KmsUnavailable(f"{self.where()}: Decrypt failed: {_reason(exc)}") from None
        return bytes(answer["Plaintext"])


def _context(name: str) -> dict[str, str]:
    return {"gpulease": _CONTEXT, "key": name}


def _reason(exc: BaseException) -> str:
    """A short reason: the AWS error code when there is one, else the exception's class and
    message (botocore's messages name endpoints and codes, never the payload)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        if code:
            return str(code)
    return f"{type(exc).__name__}: {exc}"
