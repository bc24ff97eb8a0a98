"""Agent tokens: random, handed out once as a :class:`~pydantic.SecretStr`, stored only as a
sha256 hash, compared in constant time. Moves no states.

The plaintext is never stored and never logged (``SecretStr`` prints as ``**********``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from pydantic import SecretStr

TOKEN_BYTES = 32


def hash_token(token: str | SecretStr) -> str:
    """The hex sha256 of a token (what the DB stores)."""
    plain = token.get_secret_value() if isinstance(token, SecretStr) else token
    return hashlib.sha256(plain.encode("utf-8")).hexdigest()


def new_token() -> tuple[SecretStr, str]:
    """A fresh random token (URL-safe, 256 bits) and its hash."""
    token = SecretStr(secrets.token_urlsafe(TOKEN_BYTES))
    return token, hash_token(token)


def verify_token(token: str | SecretStr, token_hash: str | None) -> bool:
    """Whether ``token`` hashes to ``token_hash`` (constant-time; False when no hash is stored)."""
    if not token_hash:
        return False
    return hmac.compare_digest(hash_token(token).encode("ascii"), token_hash.encode("utf-8"))
